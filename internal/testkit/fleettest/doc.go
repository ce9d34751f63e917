// Package fleettest holds the fleet test (fleet_test.go): three gateway
// processes sharing a three-node NATS JetStream cluster, as described in
// docs/fleet.md. testdata/replica.Caddyfile is the replica configuration
// that the guide shows.
package fleettest
