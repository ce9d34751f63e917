package caddyquota

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// DefaultCountsBucket is the bucket of a handler's own counts shared by
// a fleet (Counts.Fleet) when it names none.
const DefaultCountsBucket = "gateway_rate_limit"

// countsRetentionDays is the max age of a bucket of handlers' own counts
// when the gateway creates it: longer than the longest sliding window
// (MaxWindow), so a document outlives what it counts.
const countsRetentionDays = 8

// Counts keeps a quota handler's counts (its own plan, a rate limit of a
// route) apart from the quota app's: in a store of their own, on disk,
// shared by the gateways of a fleet through NATS JetStream with leases,
// as the app's fleet shares a plan's. The docker app sets it for the
// routes of rate_limit labels, so that they need no quota global option.
type Counts struct {
	// Dir is the directory of the counts, one per gateway, on a disk
	// that survives restarts. Default: rate_limit/ under Caddy's data
	// directory.
	Dir string `json:"dir,omitempty"`

	// Fleet shares the counts with the other gateways of a fleet, as the
	// quota app's fleet does (see FleetConfig): its bucket defaults to
	// gateway_rate_limit, its node to this Caddy instance's ID (the data
	// directory's instance.uuid), its NATS servers to storage nats's.
	// Nil: this gateway counts alone.
	Fleet *FleetConfig `json:"fleet,omitempty"`

	// OnUnavailable is what a gateway does once it has admitted its
	// share of a window while the fleet's counts cannot be reached:
	// "fail_closed" refuses with 429 (a limit holds through an outage),
	// "fail_open" admits on. Default: fail_closed.
	OnUnavailable string `json:"on_unavailable,omitempty"`
}

// ownCounts is a handler's store of its own counts, opened at its first
// request (provisioning opens nothing: `caddy validate` leaves the counts
// and NATS alone) and released at its cleanup.
type ownCounts struct {
	key      string // the store's directory, its key in stores
	natsOpts natsconn.Options
	fleet    *FleetConfig
	closed   bool // fail_closed
	plan     *Plan
	logger   *zap.Logger

	once   sync.Once
	st     *Store
	err    error
	opened atomic.Bool
}

// newOwnCounts checks a handler's Counts; it opens nothing.
func newOwnCounts(ctx caddy.Context, c *Counts, plan *Plan) (*ownCounts, error) {
	switch c.OnUnavailable {
	case "", FailOpen, FailClosed:
	default:
		return nil, fmt.Errorf("counts: invalid on_unavailable %q: want fail_open or fail_closed", c.OnUnavailable)
	}
	repl := caddy.NewReplacer()
	dir := repl.ReplaceKnown(c.Dir, "")
	if dir == "" {
		dir = filepath.Join(caddy.AppDataDir(), "rate_limit")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("counts: invalid dir %q: %v", dir, err)
	}
	o := &ownCounts{key: abs, closed: c.OnUnavailable != FailOpen, plan: plan, logger: ctx.Logger()}
	if c.Fleet != nil {
		if err := c.Fleet.validate(); err != nil {
			return nil, fmt.Errorf("counts: %w", err)
		}
		if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
			return nil, fmt.Errorf("registering NATS metrics: %v", err)
		}
		if o.natsOpts, err = c.Fleet.natsOptions(repl, func() natsconn.OptionsProvider {
			p, _ := ctx.Storage().(natsconn.OptionsProvider)
			return p
		}); err != nil {
			return nil, fmt.Errorf("counts: %w", err)
		}
		f := *c.Fleet
		f.Node = repl.ReplaceKnown(f.Node, "")
		o.fleet = &f
	}
	return o, nil
}

// store returns the handler's store, opening it (and its fleet link) the
// first time.
func (o *ownCounts) store() (*Store, error) {
	o.once.Do(o.open)
	return o.st, o.err
}

func (o *ownCounts) open() {
	v, _, err := stores.LoadOrNew(o.key, func() (caddy.Destructor, error) {
		s, err := OpenStore(StoreOptions{Dir: o.key, Logger: o.logger.Named("store")})
		if err != nil {
			return nil, err
		}
		return &pooledStore{Store: s, apart: true}, nil
	})
	if err != nil {
		o.err = err
		return
	}
	ps := v.(*pooledStore)
	if !ps.apart {
		_, _ = stores.Delete(o.key)
		o.err = fmt.Errorf("counts: dir %s is the quota app's: give the handler's counts a directory of their own", o.key)
		return
	}
	ps.plans.Store(o.plan.Name, o.plan)
	var fo *FleetOptions
	if o.fleet != nil {
		opts := o.fleet.options()
		if o.fleet.Bucket == "" {
			opts.Bucket = DefaultCountsBucket
		}
		if opts.Node == "" {
			id, err := caddy.InstanceID()
			if err != nil {
				_, _ = stores.Delete(o.key)
				o.err = fmt.Errorf("counts: this instance's ID (the fleet's node name): %w", err)
				return
			}
			opts.Node = id.String()
		}
		opts.FailClosed = o.closed
		opts.Apart = true
		opts.RetentionDays = countsRetentionDays
		opts.Plan = ps.plan
		opts.Logger = o.logger.Named("fleet")
		fo = &opts
	}
	if err := ps.configureFleet(o.natsOpts, fo); err != nil {
		_, _ = stores.Delete(o.key)
		o.err = err
		return
	}
	o.st = ps.Store
	o.opened.Store(true)
}

// release gives the store back (the last user closes it).
func (o *ownCounts) release() error {
	if !o.opened.CompareAndSwap(true, false) {
		return nil
	}
	_, err := stores.Delete(o.key)
	return err
}

// plan returns a plan of a handler counting in the store (nil: none).
func (p *pooledStore) plan(name string) *Plan {
	if v, ok := p.plans.Load(name); ok {
		return v.(*Plan)
	}
	return nil
}
