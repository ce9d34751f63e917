// Package deps pins the project's third-party modules in go.mod while the
// packages that use them are written; it is imported by nothing.
package deps

import (
	_ "github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/caddytest"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/docker/docker/client"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/mholt/caddy-ratelimit"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/sync/singleflight"
)
