package caddyquota

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

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

// ownCounts is a handler's store of its own counts. Provisioning takes
// the handler's reference to the store's entry in the pool (opening no
// file and no NATS connection: `caddy validate` leaves the counts and
// NATS alone), so that across a config reload the new config's handlers
// hold the entry before the old config's let go of it: the store and its
// fleet link stay open and linked through a route change, whether or not
// a request has reached the new config yet. The store opens at the
// handler's first request; the handler's cleanup releases the entry once
// the requests deciding in it are done (the old config's requests still
// run after its cleanup: a reload does not wait for them).
type ownCounts struct {
	key      string // the store's directory, its key in stores
	natsOpts natsconn.Options
	fleet    *FleetConfig
	closed   bool // fail_closed
	plan     *Plan
	logger   *zap.Logger

	// entry is the pool's entry, held from provisioning until released
	entry *pooledStore
	mu    sync.Mutex // opening
	st    atomic.Pointer[Store]
	// state counts the requests deciding in the entry (low bits), plus
	// releasedBit once the handler's cleanup released it; the entry is
	// given back when both are done
	state   atomic.Int64
	cleaned atomic.Bool
	dropped atomic.Bool
}

// releasedBit marks ownCounts.state once the handler is cleaned up.
const releasedBit = int64(1) << 40

// newApartEntry is a pool entry for handlers' own counts, its store not
// yet open.
func newApartEntry() (caddy.Destructor, error) { return &pooledStore{apart: true}, nil }

// newOwnCounts checks a handler's Counts and takes its reference to the
// store's pool entry; it opens nothing.
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
	v, _, err := stores.LoadOrNew(abs, newApartEntry)
	if err != nil {
		return nil, err
	}
	ps := v.(*pooledStore)
	if !ps.apart {
		_, _ = stores.Delete(abs)
		return nil, fmt.Errorf("counts: dir %s is the quota app's: give the handler's counts a directory of their own", abs)
	}
	o.entry = ps
	return o, nil
}

// acquire decides a request in the handler's counts (see
// Store.AcquireAt) and returns the store it decided in.
func (o *ownCounts) acquire(p *Plan, consumer string, now time.Time, dry bool) (*Store, Decision, error) {
	if o.state.Add(1)&releasedBit != 0 {
		// a request of a config already cleaned up (a reload does not
		// wait for the old config's requests): it decides in the store
		// on a reference of its own, the entry of the config that
		// replaced this one when it counts there too
		o.done()
		return o.acquireReleased(p, consumer, now, dry)
	}
	defer o.done()
	st := o.st.Load()
	if st == nil {
		var err error
		o.mu.Lock()
		if st = o.st.Load(); st == nil {
			if st, err = o.link(o.entry); err == nil {
				o.st.Store(st)
			}
		}
		o.mu.Unlock()
		if err != nil {
			return nil, Decision{}, err
		}
	}
	d, err := st.AcquireAt(p, consumer, now, dry)
	return st, d, err
}

// acquireReleased decides a request of a handler already released, on a
// reference of its own to the store's entry.
func (o *ownCounts) acquireReleased(p *Plan, consumer string, now time.Time, dry bool) (*Store, Decision, error) {
	v, _, err := stores.LoadOrNew(o.key, newApartEntry)
	if err != nil {
		return nil, Decision{}, err
	}
	defer func() { _, _ = stores.Delete(o.key) }()
	ps := v.(*pooledStore)
	if !ps.apart {
		return nil, Decision{}, fmt.Errorf("counts: dir %s is the quota app's: give the handler's counts a directory of their own", o.key)
	}
	st, err := o.link(ps)
	if err != nil {
		return nil, Decision{}, err
	}
	d, err := st.AcquireAt(p, consumer, now, dry)
	return st, d, err
}

// link opens the entry's store (once for all its handlers) and starts or
// keeps its fleet link with this handler's settings.
func (o *ownCounts) link(ps *pooledStore) (*Store, error) {
	st, err := ps.openApart(o.key, o.logger)
	if err != nil {
		return nil, err
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
				return nil, fmt.Errorf("counts: this instance's ID (the fleet's node name): %w", err)
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
		return nil, err
	}
	return st, nil
}

// done ends a request's use of the entry.
func (o *ownCounts) done() {
	if o.state.Add(-1) == releasedBit {
		_ = o.drop()
	}
}

// release is the handler's cleanup: the entry is given back once no
// request decides in it.
func (o *ownCounts) release() error {
	if !o.cleaned.CompareAndSwap(false, true) {
		return nil
	}
	if o.state.Add(releasedBit) == releasedBit {
		return o.drop()
	}
	return nil
}

// drop gives the handler's reference to the entry back (the last one
// closes the store).
func (o *ownCounts) drop() error {
	if !o.dropped.CompareAndSwap(false, true) {
		return nil
	}
	_, err := stores.Delete(o.key)
	return err
}

// openApart opens the store of an entry of handlers' own counts, the
// first time.
func (p *pooledStore) openApart(dir string, logger *zap.Logger) (*Store, error) {
	p.openMu.Lock()
	defer p.openMu.Unlock()
	if p.destructed {
		return nil, errors.New("quota store closed")
	}
	if p.Store == nil {
		s, err := OpenStore(StoreOptions{Dir: dir, Logger: logger.Named("store")})
		if err != nil {
			return nil, err
		}
		p.Store = s
	}
	return p.Store, nil
}

// plan returns a plan of a handler counting in the store (nil: none).
func (p *pooledStore) plan(name string) *Plan {
	if v, ok := p.plans.Load(name); ok {
		return v.(*Plan)
	}
	return nil
}
