// Package caddyquota is the gateway's consumer plans: quotas per minute,
// hour, calendar day and calendar month, counted per consumer on disk (and
// across a fleet over NATS JetStream), with usage metering.
//
// The global option `quota` (the app, module "quota") defines the plans,
// where a consumer's plan comes from, the time zone of the calendar
// windows, where the counts live and how a fleet shares them. The handler
// `quota` (module http.handlers.quota) counts each request of a consumer
// against its plan and refuses it with 429 when a limit is reached. The
// admin API serves a consumer's usage at /gateway/usage.
//
// The window, count and lease logic (window.go, plan.go, store.go,
// table.go, index.go, and the fleet's fleet.go, fleetlease.go,
// fleetcalendar.go, fleetsliding.go) imports nothing of Caddy.
package caddyquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "time/tzdata" // zones work where the system has no zoneinfo (containers)

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/natsconn"
)

func init() {
	caddy.RegisterModule(App{})
	caddy.RegisterModule(Handler{})
	caddy.RegisterModule(AdminAPI{})
}

// The values of on_unavailable.
const (
	FailOpen   = "fail_open"
	FailClosed = "fail_closed"
)

// App is the quota app: the plans and the counts. It is configured with
// the `quota` global option.
type App struct {
	// Plans are the plans, by name (1 to 64 letters, digits, '-', '_').
	// None: only quota handlers with their own plan count (a rate limit
	// of a route; the app then keeps their counts, and shares them with
	// a fleet).
	Plans map[string]PlanConfig `json:"plans,omitempty"`

	// Default is the plan of a consumer that no claim, API key or client
	// certificate mapping gives one. Required with more than one plan;
	// with one plan, that plan.
	Default string `json:"default,omitempty"`

	// PlanClaim is the path of a claim of the verified identity whose
	// string value names the consumer's plan (dotted, as rbac's
	// roles_claim). It takes precedence over an API key's plan. A value
	// that names no plan is logged and the default plan is used.
	PlanClaim string `json:"plan_claim,omitempty"`

	// Timezone is the IANA zone of the calendar windows (a day is local
	// midnight to local midnight). Default: UTC.
	Timezone string `json:"timezone,omitempty"`

	// OnUnavailable is what a gateway of a fleet does once it has
	// admitted its share of a consumer's remaining quota while the fleet's
	// counts cannot be reached (NATS down): "fail_open" admits on (the
	// fleet may then exceed the quota; everything admitted is counted),
	// "fail_closed" refuses with 429. Default: fail_open.
	OnUnavailable string `json:"on_unavailable,omitempty"`

	// UnavailableShare is the share (0 to 1) of a consumer's remaining
	// quota one gateway admits on its own while the fleet's counts cannot
	// be reached. Default: 1 / the number of gateways the fleet had.
	UnavailableShare float64 `json:"unavailable_share,omitempty"`

	// Dir is the directory of the counts (one per gateway, on a disk
	// that survives restarts); a relative path is from Caddy's working
	// directory, as every file path of a config. Default: quota/ under
	// Caddy's data directory.
	Dir string `json:"dir,omitempty"`

	// MaxConsumers bounds the consumers counted (each costs about 1 KiB
	// of disk); beyond it new consumers share one count per plan
	// (consumer "*overflow*"). Default: 1,000,000.
	MaxConsumers int `json:"max_consumers,omitempty"`

	// Retention is how long daily usage is kept, at least 62 days (the
	// current and the previous month). Default: 100 days.
	Retention caddy.Duration `json:"retention,omitempty"`

	// SyncInterval is how often the counts are written to the disk (a
	// SIGKILL loses nothing in any case; a power loss loses at most this
	// much). Default: 1s.
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`

	// ConsumerMetrics, when positive, adds the counter
	// gateway_quota_consumer_requests_total{consumer,plan,decision} for
	// at most this many consumers (the first seen); the others are
	// counted under consumer "other". Default: 0, no per-consumer series.
	ConsumerMetrics int `json:"consumer_metrics,omitempty"`

	// Fleet, when set, shares the counts of every gateway of a fleet
	// through NATS JetStream (see FleetConfig).
	Fleet *FleetConfig `json:"fleet,omitempty"`

	plans       map[string]*Plan
	labels      map[string]*identity.PlanLabel
	defaultPlan *Plan
	claim       *identity.ClaimPath
	cal         *Calendar
	clock       func() time.Time
	logger      *zap.Logger
	storeKey    string
	natsOpts    natsconn.Options // the fleet's connection, resolved at Provision
	starting    *starting
	st          *Store
	released    *atomic.Bool
	unknown     *sync.Map // plan names already warned about: name -> time
	consumerCnt *consumerCounters
	ownMu       *sync.Mutex
	own         map[string]*Plan // the handlers' own plans, by name
}

// PlanConfig is one plan.
type PlanConfig struct {
	// Limits are the plan's limits, at most one per window:
	// "1000/day", "2000000/month", "60/minute", "5000/hour". A plan with
	// no limits counts its consumers' requests without refusing any.
	Limits []string `json:"limits,omitempty"`
}

// starting runs the app's start once, from Start or from the first
// request before it (Caddy starts apps in no fixed order).
type starting struct {
	once sync.Once
	err  error
	done atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "quota", New: func() caddy.Module { return new(App) }}
}

// Provision compiles the plans and checks the settings. It opens
// nothing: `caddy validate` leaves the counts as they are.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.clock = time.Now
	a.starting = new(starting)
	a.released, a.unknown = new(atomic.Bool), new(sync.Map)
	a.ownMu, a.own = new(sync.Mutex), map[string]*Plan{}
	if err := registerMetrics(ctx.GetMetricsRegistry(), a.Fleet != nil); err != nil {
		return fmt.Errorf("registering quota metrics: %v", err)
	}
	if err := a.compile(); err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	a.Dir = repl.ReplaceKnown(a.Dir, "")
	if a.Dir == "" {
		a.Dir = filepath.Join(caddy.AppDataDir(), "quota")
	}
	abs, err := filepath.Abs(a.Dir)
	if err != nil {
		return fmt.Errorf("invalid dir %q: %v", a.Dir, err)
	}
	a.Dir, a.storeKey = abs, abs
	if a.ConsumerMetrics > 0 {
		a.consumerCnt = newConsumerCounters(a.ConsumerMetrics)
	}
	if a.Fleet != nil {
		if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
			return fmt.Errorf("registering NATS metrics: %v", err)
		}
		opts, err := a.Fleet.natsOptions(repl, natsconn.ConfigStorage(ctx))
		if err != nil {
			return err
		}
		a.natsOpts = opts
		a.Fleet.Node = strings.TrimSpace(repl.ReplaceKnown(a.Fleet.Node, ""))
		if a.Fleet.Node == "" {
			a.Fleet.Node, _ = os.Hostname()
		}
		if a.Fleet.Node == "" {
			a.Fleet.Node = "gateway"
		}
	} else if natsconn.ConfigStorage(ctx)() != nil {
		a.logger.Warn("this config shares its storage over NATS (a fleet), but quota counts per gateway: add `fleet` to the quota global option to share the counts")
	}
	return nil
}

// compile checks the plans and the settings (no Caddy context needed,
// so Validate can call it too).
func (a *App) compile() error {
	a.plans = make(map[string]*Plan, len(a.Plans))
	a.labels = make(map[string]*identity.PlanLabel, len(a.Plans))
	for name, pc := range a.Plans {
		var limits []Limit
		for _, s := range pc.Limits {
			l, err := ParseLimit(s)
			if err != nil {
				return fmt.Errorf("plan %s: %v", name, err)
			}
			limits = append(limits, l)
		}
		p, err := NewPlan(name, limits)
		if err != nil {
			return err
		}
		a.plans[name] = p
		a.labels[name] = identity.NewPlanLabel(name)
	}
	switch {
	case a.Default != "":
		if a.plans[a.Default] == nil {
			return fmt.Errorf("invalid default %q: no such plan (plans: %s)", a.Default, strings.Join(a.planNames(), ", "))
		}
		a.defaultPlan = a.plans[a.Default]
	case len(a.plans) == 1:
		for _, p := range a.plans {
			a.defaultPlan = p
		}
	case len(a.plans) == 0:
		// only handlers with their own plans (quota { plan <name>
		// <n>/<window> }) count: Handler.Provision says so to one
		// without
	default:
		return fmt.Errorf("quota: %d plans and no default: name the plan of consumers without one (default <plan>)", len(a.plans))
	}
	if a.PlanClaim != "" {
		cp, err := identity.ParseClaimPath(a.PlanClaim)
		if err != nil {
			return fmt.Errorf("invalid plan_claim %q: %v", a.PlanClaim, err)
		}
		a.claim = &cp
	}
	loc := time.UTC
	if a.Timezone != "" {
		var err error
		if loc, err = time.LoadLocation(a.Timezone); err != nil {
			return fmt.Errorf("invalid timezone %q: want an IANA zone such as Europe/Berlin (%v)", a.Timezone, err)
		}
	}
	a.cal = NewCalendar(loc)
	switch a.OnUnavailable {
	case "", FailOpen, FailClosed:
	default:
		return fmt.Errorf("invalid on_unavailable %q: want fail_open or fail_closed", a.OnUnavailable)
	}
	if a.UnavailableShare < 0 || a.UnavailableShare > 1 {
		return fmt.Errorf("invalid unavailable_share %v: want a share from 0 to 1 (or a percentage in the Caddyfile)", a.UnavailableShare)
	}
	if a.MaxConsumers < 0 {
		return fmt.Errorf("invalid max_consumers %d: must be positive", a.MaxConsumers)
	}
	if a.Retention != 0 && time.Duration(a.Retention) < 62*24*time.Hour {
		return fmt.Errorf("invalid retention %s: at least 62 days (the current and the previous month)", time.Duration(a.Retention))
	}
	if a.SyncInterval < 0 {
		return fmt.Errorf("invalid sync_interval %s: must be positive", time.Duration(a.SyncInterval))
	}
	if a.ConsumerMetrics < 0 {
		return fmt.Errorf("invalid consumer_metrics %d: must be positive", a.ConsumerMetrics)
	}
	if a.Fleet != nil {
		if err := a.Fleet.validate(); err != nil {
			return err
		}
	}
	return nil
}

func (a *App) planNames() []string {
	names := make([]string, 0, len(a.plans))
	for n := range a.plans {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Validate checks the configuration.
func (a *App) Validate() error {
	if a.plans != nil {
		return nil // compiled by Provision
	}
	return a.compile()
}

// Start opens (or joins, across reloads) the store of the counts, and
// the fleet's connection.
func (a *App) Start() error { return a.start() }

func (a *App) start() error {
	st := a.starting
	if st == nil {
		return errors.New("quota app not provisioned")
	}
	st.once.Do(func() {
		st.err = a.open()
		st.done.Store(true)
	})
	return st.err
}

func (a *App) open() error {
	v, _, err := stores.LoadOrNew(a.storeKey, func() (caddy.Destructor, error) {
		s, err := OpenStore(StoreOptions{
			Dir:           a.Dir,
			Calendar:      a.cal,
			MaxConsumers:  a.MaxConsumers,
			RetentionDays: int(time.Duration(a.Retention) / (24 * time.Hour)),
			SyncInterval:  time.Duration(a.SyncInterval),
			Logger:        a.logger.Named("store"),
		})
		if err != nil {
			return nil, err
		}
		return &pooledStore{Store: s}, nil
	})
	if err != nil {
		return err
	}
	ps := v.(*pooledStore)
	if ps.apart {
		_, _ = stores.Delete(a.storeKey)
		return fmt.Errorf("invalid dir %s: quota handlers keep their own counts there (counts): give the quota app another", a.Dir)
	}
	ps.SetCalendar(a.cal)
	if err := ps.configureFleet(a.natsOpts, a.fleetOptions()); err != nil {
		_, _ = stores.Delete(a.storeKey)
		return err
	}
	a.st = ps.Store
	return nil
}

// store returns the app's store, starting the app if a request comes
// before Start.
func (a *App) store() (*Store, error) {
	if a.starting != nil && a.starting.done.Load() {
		return a.st, a.starting.err
	}
	if err := a.start(); err != nil {
		return nil, err
	}
	return a.st, nil
}

// Stop is a no-op: requests may still be finishing; the store is released
// in Cleanup.
func (a *App) Stop() error { return nil }

// Cleanup releases the store; the last config using it writes it to the
// disk and closes it.
func (a *App) Cleanup() error {
	if a.st == nil || a.released == nil || !a.released.CompareAndSwap(false, true) {
		return nil
	}
	_, err := stores.Delete(a.storeKey)
	return err
}

// stores holds one store per directory, shared across config reloads.
var stores = caddy.NewUsagePool()

// pooledStore is a store in the pool; the fleet link it runs belongs to
// it (fleet.go), reconfigured by each config that joins it.
type pooledStore struct {
	*Store
	fleetMu  sync.Mutex
	fleetKey string
	fleet    *Fleet
	// apart: the store of handlers' own counts (Counts), not the app's;
	// plans are those handlers' plans, by name. Its Store is opened at
	// the first request (openApart, under openMu; nil until then), and
	// destructed says the entry left the pool.
	apart      bool
	plans      sync.Map
	openMu     sync.Mutex
	destructed bool
}

// Destruct stops the fleet link and closes the store.
func (p *pooledStore) Destruct() error {
	p.fleetMu.Lock()
	if p.fleet != nil {
		p.fleet.Stop()
		p.fleet = nil
	}
	p.fleetMu.Unlock()
	p.openMu.Lock()
	p.destructed = true
	st := p.Store
	p.openMu.Unlock()
	if st == nil {
		return nil
	}
	return st.Close()
}

// registerOwn records a handler's own plan: two handlers may count on
// one plan of their own only with the same limits.
func (a *App) registerOwn(p *Plan) error {
	a.ownMu.Lock()
	defer a.ownMu.Unlock()
	if q := a.own[p.Name]; q != nil && q.String() != p.String() {
		return fmt.Errorf("plan %s: another quota handler has a plan of that name with other limits (%s, here %s): give each its own name", p.Name, q, p)
	}
	if a.own[p.Name] == nil {
		a.own[p.Name] = p
	}
	return nil
}

// planOf returns the plan of a name: the option's, or a handler's own.
func (a *App) planOf(name string) *Plan {
	if p := a.plans[name]; p != nil {
		return p
	}
	a.ownMu.Lock()
	defer a.ownMu.Unlock()
	return a.own[name]
}

// planFor returns the plan of the request's consumer: the handler's own
// plan, else the plan claim's value, else the identity's plan (an API
// key's, a client certificate mapping's), else the default.
func (a *App) planFor(h *Handler, id *identity.Identity) *Plan {
	if h.forced != nil {
		return h.forced
	}
	if id != nil {
		if a.claim != nil {
			if v, ok := a.claim.Lookup(id.Claims); ok {
				if name, ok := v.(string); ok && name != "" {
					if p := a.plans[name]; p != nil {
						return p
					}
					a.warnUnknown(name, "claim "+a.PlanClaim)
				}
			}
		}
		if id.Plan != "" {
			if p := a.plans[id.Plan]; p != nil {
				return p
			}
			a.warnUnknown(id.Plan, "identity ("+id.Method+")")
		}
	}
	return a.defaultPlan
}

// warnUnknown logs, at most once a minute per name, a plan name that no
// plan has.
func (a *App) warnUnknown(name, from string) {
	now := time.Now()
	if last, ok := a.unknown.Load(name); ok && now.Sub(last.(time.Time)) < time.Minute {
		return
	}
	if len(name) > 64 {
		name = name[:64]
	}
	a.unknown.Store(name, now)
	a.logger.Warn("a consumer's plan names no plan of the quota option: the default plan applies",
		zap.String("plan", name), zap.String("from", from), zap.String("default", a.defaultPlan.Name))
}

// activeApp returns the quota app of the running config, if it has one
// (the admin API and the dashboard read its store).
func activeApp() *App {
	app, err := caddy.ActiveContext().AppIfConfigured("quota")
	if err != nil {
		return nil
	}
	a, _ := app.(*App)
	return a
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
	_ caddy.Destructor   = (*pooledStore)(nil)
)
