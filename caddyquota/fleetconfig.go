package caddyquota

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/natsconn"
)

// Defaults of the fleet.
const (
	DefaultBucket            = "gateway_quota"
	DefaultMaxLease          = 1000
	DefaultFleetSyncInterval = time.Second
	DefaultLeaseWait         = time.Second
)

// FleetConfig shares the counts of a fleet of gateways through a
// JetStream key-value bucket. Each gateway takes leases of a consumer's
// remaining quota (so a request needs no NATS round trip) and returns
// what it does not use; see docs/caddyquota.md for the bounds.
type FleetConfig struct {
	// The NATS connection (the gateway's one NATS connection block:
	// servers, creds, nkey, user, password, token, tls, name; and the
	// older spellings creds_file, tls_ca, tls_cert, tls_key). Without
	// servers: the connection of this config's `storage nats`, shared.
	natsconn.Config
	// NATS is the older spelling of servers (its entries come first).
	NATS []string `json:"nats,omitempty"`
	// Bucket is the key-value bucket of the counts. Default:
	// gateway_quota.
	Bucket string `json:"bucket,omitempty"`
	// Replicas are the bucket's copies when the gateway creates it (1 to
	// 5; 1 where the servers cannot place more). Default: 1.
	Replicas int `json:"replicas,omitempty"`
	// Node names this gateway in the fleet (unique). Default: the host
	// name.
	Node string `json:"node,omitempty"`
	// MaxLease bounds the requests one lease covers. Default: 1000.
	MaxLease int64 `json:"max_lease,omitempty"`
	// SyncInterval is how often a gateway writes its usage to the
	// bucket and returns leases it does not use. Default: 1s.
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`
	// LeaseWait bounds how long a request waits for a lease before the
	// gateway decides on its share alone. Default: 1s.
	LeaseWait caddy.Duration `json:"lease_wait,omitempty"`
}

func (f *FleetConfig) validate() error {
	if f.Replicas < 0 || f.Replicas > 5 {
		return fmt.Errorf("fleet: invalid replicas %d: want 1 to 5", f.Replicas)
	}
	if f.MaxLease < 0 {
		return fmt.Errorf("fleet: invalid max_lease %d: must be positive", f.MaxLease)
	}
	if f.SyncInterval < 0 || f.LeaseWait < 0 {
		return errors.New("fleet: durations must be positive")
	}
	if f.Bucket != "" && !natsconn.ValidBucket(f.Bucket) {
		return fmt.Errorf("fleet: invalid bucket %q: letters, digits, '-' and '_'", f.Bucket)
	}
	return nil
}

// natsOptions are the fleet's connection options: its own servers, else
// those of the config's `storage nats` (storage looks it up).
func (f *FleetConfig) natsOptions(repl *caddy.Replacer, storage func() natsconn.OptionsProvider) (natsconn.Options, error) {
	c := f.Config
	c.AddServers(f.NATS...)
	o, err := c.Resolve(repl, storage)
	if err != nil {
		return o, fmt.Errorf("quota fleet: %w", err)
	}
	return o, nil
}

// configureFleet starts, keeps or stops the store's fleet link: fo nil
// stops it; a reload with the same settings keeps the running link.
func (p *pooledStore) configureFleet(natsOpts natsconn.Options, fo *FleetOptions) error {
	p.fleetMu.Lock()
	defer p.fleetMu.Unlock()
	if fo == nil {
		if p.fleet != nil {
			p.fleet.Stop()
			p.fleet, p.fleetKey = nil, ""
		}
		return nil
	}
	key := fmt.Sprintf("%#v|%s|%d|%s|%d|%s|%s|%d|%v", natsOpts, fo.Bucket, fo.Replicas, fo.Node, fo.MaxLease, fo.SyncInterval, fo.LeaseWait, fo.RetentionDays, fo.Apart)
	if p.fleet != nil && p.fleetKey == key {
		p.fleet.setPolicy(*fo)
		return nil
	}
	if p.fleet != nil {
		p.fleet.Stop()
		p.fleet = nil
	}
	conn, release, err := natsconn.Get(natsOpts)
	if err != nil {
		return fmt.Errorf("quota fleet: %w", err)
	}
	js, err := conn.JetStream()
	if err != nil {
		release()
		return fmt.Errorf("quota fleet: %w", err)
	}
	fc := fleetConnOf(conn.NATS(), js)
	fc.OnReconnect, fc.Release = conn.OnReconnect, release
	fl, err := StartFleet(p.Store, fc, *fo)
	if err != nil {
		release()
		return err
	}
	p.fleet, p.fleetKey = fl, key
	return nil
}

// options are the fleet link's settings from the config's, with the
// defaults filled in.
func (f *FleetConfig) options() FleetOptions {
	fo := FleetOptions{
		Bucket:       f.Bucket,
		Replicas:     f.Replicas,
		Node:         f.Node,
		MaxLease:     f.MaxLease,
		SyncInterval: time.Duration(f.SyncInterval),
		LeaseWait:    time.Duration(f.LeaseWait),
	}
	if fo.Bucket == "" {
		fo.Bucket = DefaultBucket
	}
	if fo.Replicas == 0 {
		fo.Replicas = 1
	}
	if fo.MaxLease == 0 {
		fo.MaxLease = DefaultMaxLease
	}
	if fo.SyncInterval == 0 {
		fo.SyncInterval = DefaultFleetSyncInterval
	}
	if fo.LeaseWait == 0 {
		fo.LeaseWait = DefaultLeaseWait
	}
	return fo
}

// fleetOptions are the fleet link's settings from the app's.
func (a *App) fleetOptions() *FleetOptions {
	if a.Fleet == nil {
		return nil
	}
	fo := a.Fleet.options()
	fo.RetentionDays = int(time.Duration(a.Retention) / (24 * time.Hour))
	fo.FailClosed = a.OnUnavailable == FailClosed
	fo.Share = a.UnavailableShare
	fo.Plan = a.planOf
	fo.Logger = a.logger.Named("fleet")
	return &fo
}

// fleetConnOf is what the fleet needs of a NATS connection and its
// JetStream context.
func fleetConnOf(nc *nats.Conn, js jetstream.JetStream) FleetConn {
	return FleetConn{
		JetStream: js,
		Connected: nc.IsConnected,
		Clustered: func() bool { return nc.ConnectedClusterName() != "" },
		Publish:   nc.Publish,
		Subscribe: func(subject string, handle func([]byte)) (func(), error) {
			sub, err := nc.Subscribe(subject, func(m *nats.Msg) { handle(m.Data) })
			if err != nil {
				return nil, err
			}
			return func() { _ = sub.Unsubscribe() }, nil
		},
	}
}
