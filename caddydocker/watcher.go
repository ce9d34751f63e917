package caddydocker

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Server is the HTTP server that receives the routes.
	Server string
	// Engine is the engine's address (the app's host), for the snapshot.
	Engine string
	// Debounce is the minimum time between two re-lists; an isolated event
	// is handled at once, a burst at most once per Debounce.
	Debounce time.Duration
	// Resync is the interval of the periodic full re-list.
	Resync time.Duration
	// StateFile is where the last applied route set is kept ("" = none).
	StateFile string
	// Build and Labels are the route generation options.
	Build  BuildOptions
	Labels LabelOptions
	// Fleet, if set, shares this host's containers with the gateways of
	// other hosts and adds theirs to the route set. The watcher starts it
	// and stops it.
	Fleet FleetPeer
	// OnStop runs after the watcher stopped (releases what the fleet uses).
	OnStop func()
	// CanaryFile keeps the canary releases' records (default: beside
	// StateFile, "<state file>-canary.json"; none without a StateFile).
	CanaryFile string
	// ForgetAfter is how long the routes of a service that is gone keep
	// answering 404 no_route (0: not at all).
	ForgetAfter time.Duration
}

// FleetPeer is what the watcher needs of the fleet (*Fleet).
type FleetPeer interface {
	Start()
	Stop()
	// Publish announces this host's containers.
	Publish(local []Container)
	// Remote returns the other hosts' containers, with Node and Advertise.
	Remote() []Container
	// Seed gives it the other hosts' containers of the previous run (the
	// state file's), until the bucket is read.
	Seed(remote []Container)
	// Changed is signalled when Remote may have changed.
	Changed() <-chan struct{}
	// Status describes the fleet for the snapshot.
	Status() FleetStatus
}

// Snapshot is a read-only view of what the watcher discovered, for status
// pages and the dashboard. Its slices are never modified after publication.
type Snapshot struct {
	// Server is the HTTP server that receives the routes.
	Server string `json:"server"`
	// Engine is the address of the engine the app lists (its host
	// option, DOCKER_HOST, or the default socket).
	Engine string `json:"engine,omitempty"`
	// Containers are the opted-in running containers at the last list, with
	// their parsed labels (Service) or label errors (Errors).
	Containers []Discovered `json:"containers"`
	// Warnings are route conflicts resolved at the last list.
	Warnings []string `json:"warnings,omitempty"`
	// Routes is the number of discovered routes in the desired set.
	Routes int `json:"routes"`
	// Hash identifies the desired route set; AppliedHash the set that last
	// applied successfully.
	Hash        string `json:"hash,omitempty"`
	AppliedHash string `json:"applied_hash,omitempty"`
	// EngineReachable is false while the engine cannot be listed.
	EngineReachable bool `json:"engine_reachable"`
	// FromStateFile is true while the routes come from the state file
	// because the engine has not been reachable since start.
	FromStateFile bool `json:"from_state_file,omitempty"`
	// LastList and LastApply are the times of the last successful list and
	// of the last successful apply.
	LastList  time.Time `json:"last_list,omitzero"`
	LastApply time.Time `json:"last_apply,omitzero"`
	// LastError is the last error, if any ("" after a success).
	LastError string `json:"last_error,omitempty"`
	// Fleet is the state of discovery across hosts, when configured.
	Fleet *FleetStatus `json:"fleet,omitempty"`
	// Canaries are the canary releases in use, by service.
	Canaries []CanaryStatus `json:"canaries,omitempty"`
	// Vanished are the routes of services that are gone, still answering
	// 404 no_route (for the app's forget_after).
	Vanished []VanishedRoute `json:"vanished,omitempty"`
	// Placement says where site policies of the server do not cover the
	// discovered routes (PlacementWarnings), at the last apply.
	Placement []string `json:"placement,omitempty"`
	// Scope are the labels this gateway routes containers by (the app's
	// scope option); OutOfScope counts the opted-in containers without
	// them, which it leaves alone.
	Scope      []string `json:"scope,omitempty"`
	OutOfScope int      `json:"out_of_scope,omitempty"`
}

// RouteApplier applies discovered routes to a server (the admin API client).
type RouteApplier interface {
	ApplyRoutes(ctx context.Context, server string, discovered []json.RawMessage) (changed bool, err error)
}

// Watcher follows an engine and keeps a server's discovered routes in sync.
// It lives in a caddy.UsagePool so that it survives the config reloads that
// its own changes cause.
type Watcher struct {
	cfg     WatcherConfig
	engine  Engine
	applier RouteApplier
	log     *zap.Logger
	m       *metrics
	canary  *canaries

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	stopOnce  sync.Once
	kick      chan struct{}
	recheck   chan struct{}

	mu   sync.RWMutex
	snap Snapshot

	// pubMu guards what config loads read (Serving): pub, the route set
	// the server's docker_routes handlers are to run (the loop's current
	// plan, or before its first list the state file's), and the state
	// file's plan, read once (stateTried) by the first config load or by
	// the loop when the engine is unreachable at start.
	pubMu           sync.Mutex
	pub             *servingSet
	stateTried      bool
	statePlan       *Plan
	stateContainers []Container
	stateVanished   []VanishedRoute

	// gone holds containers the event stream reported dead (die, oom,
	// destroy, remove) and not started since. The engine may still list a
	// container as running for a moment after its die event; trusting the
	// event removes its routes at once. stopping holds containers the
	// engine is stopping (a kill with a stopping signal, or stop), since
	// when: they leave their pool before their process exits.
	goneMu   sync.Mutex
	gone     map[string]bool
	stopping map[string]time.Time

	// owned by the run loop
	local      []Container              // this host's containers at the last list
	vanished   map[string]VanishedRoute // nil until the first build
	plan       *Plan
	containers []Container
	applied    string
	written    string
	reachable  bool
	everListed bool
	logged     map[string]string
	warned     map[string]bool
	// placementLogged: the placement warnings logged (notePlacement)
	placementLogged map[string]bool
	// downLogged: the engine's absence since start was logged.
	downLogged bool
	// fromState: the loop's plan is the state file's (no list yet).
	fromState bool
	// polled is true while a listed container has a health check: Podman
	// sends no health events, so the loop re-lists every HealthPoll.
	polled bool
	// stopPolled is true while the engine stops containers without an
	// event (Podman) and this host has routed containers: the loop
	// re-lists every StopPoll, so a container being stopped leaves its
	// pool as soon as it leaves the running list.
	stopPolled bool
}

func scopeStrings(scope []ScopeLabel) []string {
	var out []string
	for _, l := range scope {
		out = append(out, l.String())
	}
	return out
}

// HealthPoll is how often the watcher re-lists while a container has a
// health check, since Podman reports health changes in no event.
const HealthPoll = 2 * time.Second

// StopPoll is how often the watcher re-lists while the engine stops
// containers without an event (Engine.StopsUnannounced: Podman) and this
// host has routed containers. A container that `podman stop` is stopping
// leaves the running list as the stop begins, so it is drained at most
// StopPoll (plus a list) later, while it still serves during its grace
// period. A variable for tests.
var StopPoll = time.Second

// StoppingMax is how long a container stays out of its pool after a stop
// signal while the engine still lists it running; then it is routed
// again (the signal did not stop it). A variable for tests.
var StoppingMax = time.Minute

// NewWatcher returns a watcher; Start begins watching.
func NewWatcher(cfg WatcherConfig, engine Engine, applier RouteApplier, log *zap.Logger) *Watcher {
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.CanaryFile == "" {
		cfg.CanaryFile = canaryFile(cfg.StateFile)
	}
	store, _ := cfg.Fleet.(canaryStore)
	return &Watcher{
		cfg: cfg, engine: engine, applier: applier, log: log, m: globalMetrics(),
		canary: newCanaries(cfg.Server, cfg.CanaryFile, store, globalMetrics(), log),
		ctx:    ctx, cancel: cancel,
		kick:     make(chan struct{}, 1),
		recheck:  make(chan struct{}, 1),
		logged:   map[string]string{},
		gone:     map[string]bool{},
		stopping: map[string]time.Time{},
		warned:   map[string]bool{},
		snap:     Snapshot{Server: cfg.Server, Engine: cfg.Engine, Scope: scopeStrings(cfg.Labels.Scope)},
	}
}

// Start starts the watcher's goroutines once; later calls ask it to check
// that the live config still holds its routes (after a config reload).
func (w *Watcher) Start() {
	started := false
	w.startOnce.Do(func() {
		started = true
		if w.cfg.Fleet != nil {
			w.cfg.Fleet.Start()
		}
		w.wg.Add(3)
		go w.guard("loop", w.loop)
		go w.guard("events", w.events)
		go w.guard("canary", func() { w.canary.run(w.ctx) })
	})
	if !started {
		select {
		case w.recheck <- struct{}{}:
		default:
		}
	}
}

// Stop stops the goroutines and waits for them, then stops the fleet
// (which leaves this host's containers to the other gateways while this
// one restarts). Later calls do nothing.
func (w *Watcher) Stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.wg.Wait()
		if w.cfg.Fleet != nil {
			w.cfg.Fleet.Stop()
		}
		if w.engine != nil {
			_ = w.engine.Close()
		}
		if w.cfg.OnStop != nil {
			w.cfg.OnStop()
		}
	})
}

// Snapshot returns the current read-only view.
func (w *Watcher) Snapshot() Snapshot {
	w.mu.RLock()
	s := w.snap
	w.mu.RUnlock()
	if w.cfg.Fleet != nil {
		st := w.cfg.Fleet.Status()
		s.Fleet = &st
	}
	s.Canaries = w.canary.status(time.Now())
	return s
}

// SetAuditor sets where the audit events of canary releases go (the
// current config's audit app; nil: nowhere).
func (w *Watcher) SetAuditor(a Auditor) { w.canary.setAuditor(a) }

func (w *Watcher) guard(name string, fn func()) {
	defer w.wg.Done()
	guarded(w.ctx, w.log, "docker watcher panic", name, fn)
}

// guarded runs fn, restarting it a second after a panic (logged as msg,
// with the goroutine's name and the stack), until ctx ends. A goroutine of
// the watcher or the fleet must not take the process down.
func guarded(ctx context.Context, log *zap.Logger, msg, name string, fn func()) {
	for {
		panicked := func() (p bool) {
			defer func() {
				if r := recover(); r != nil {
					p = true
					log.Error(msg, zap.String("goroutine", name),
						zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				}
			}()
			fn()
			return false
		}()
		if !panicked || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (w *Watcher) trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watcher) update(fn func(s *Snapshot)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn(&w.snap)
}

// Serving returns the route set that a config being loaded runs in its
// docker_routes handlers: the current one (the last list's), else, before
// any list, the state file's (read at most once: at a process's first
// config load, the routes the gateway last applied, with the containers'
// replicas put in their pools, so that it routes from its first request).
// known is false while there is neither (discovery is starting).
func (w *Watcher) Serving() servingSet {
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	if w.pub == nil && !w.stateTried {
		w.stateTried = true
		w.readStateLocked(true)
	}
	if w.pub == nil {
		return servingSet{}
	}
	return *w.pub
}

// publish makes plan the route set of the next config load.
func (w *Watcher) publish(plan *Plan) {
	w.pubMu.Lock()
	w.pub = &servingSet{routes: plan.Routes, hash: plan.Hash, known: true}
	w.pubMu.Unlock()
}

func (w *Watcher) loop() {
	w.adoptState()
	w.seedFleet()
	w.sync()
	resync := w.cfg.Resync
	if resync <= 0 {
		resync = 30 * time.Second
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	health := time.NewTicker(HealthPoll)
	defer health.Stop()
	stopPoll := time.NewTicker(StopPoll)
	defer stopPoll.Stop()
	var fleetChanged <-chan struct{}
	if w.cfg.Fleet != nil {
		fleetChanged = w.cfg.Fleet.Changed()
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	pending := false
	last := time.Now()
	run := func() {
		pending = false
		last = time.Now()
		w.sync()
	}
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.kick:
			if pending {
				continue
			}
			if wait := w.cfg.Debounce - time.Since(last); wait > 0 {
				pending = true
				timer.Reset(wait)
				continue
			}
			run()
		case <-timer.C:
			run()
		case <-ticker.C:
			if !pending {
				run()
			}
		case <-health.C:
			if w.polled && !pending {
				run()
			}
		case <-stopPoll.C:
			// Not a debounced run: it leaves the debounce of the next
			// event alone. While the engine is away, the event stream's
			// reconnects re-list (no failed list every second).
			if w.stopPolled && w.reachable && !pending {
				w.sync()
			}
		case <-fleetChanged:
			// Another host's containers changed: rebuild from this
			// host's last list (no re-list). Before the first list, the
			// routes come from the state file and stay.
			if w.everListed {
				w.build()
			}
		case <-w.recheck:
			// A config (re)load happened: make sure the live config still
			// holds the desired routes. After a reload that this watcher
			// caused, this is one GET and no write.
			if w.plan != nil {
				w.apply(*w.plan, w.containers, w.fromState)
			}
		}
	}
}

func (w *Watcher) events() {
	backoff := 100 * time.Millisecond
	failing := false
	for w.ctx.Err() == nil {
		began := time.Now()
		// A container that starts between a list and the subscription
		// is in neither: list again once the engine has the subscription
		// (the loop's first list and Prime's run before it, and so does
		// the list after a reconnect's backoff).
		err := w.engine.Events(w.ctx, w.trigger, func(ev Event) {
			w.m.events.Inc()
			w.noteEvent(ev)
			if ce := w.log.Check(zap.DebugLevel, "container event"); ce != nil {
				ce.Write(zap.String("action", ev.Action), zap.String("container", shortID(ev.ID)), zap.String("signal", ev.Signal))
			}
			w.trigger()
		})
		if w.ctx.Err() != nil {
			return
		}
		w.m.errors.WithLabelValues("events").Inc()
		if time.Since(began) > 10*time.Second {
			backoff = 100 * time.Millisecond
			failing = false
		}
		if !failing {
			w.log.Warn("container event stream broke; reconnecting", zap.Error(err))
			failing = true
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
		// Events may have been missed while disconnected: re-list.
		w.trigger()
	}
}

func (w *Watcher) noteEvent(ev Event) {
	if ev.ID == "" {
		return
	}
	w.goneMu.Lock()
	defer w.goneMu.Unlock()
	switch ev.Action {
	case "die", "died", "oom", "destroy", "remove":
		w.gone[ev.ID] = true
		delete(w.stopping, ev.ID)
	case "kill", "stop":
		if (ev.Action == "stop" || stopSignal(ev.Signal)) && !w.gone[ev.ID] {
			if _, ok := w.stopping[ev.ID]; !ok {
				w.stopping[ev.ID] = time.Now()
			}
		}
	case "start", "restart", "unpause":
		delete(w.gone, ev.ID)
		delete(w.stopping, ev.ID)
	}
}

// stopSignal reports whether a kill event's signal stops a process by
// default (TERM, INT, QUIT, KILL) or is not reported: HUP, USR1 and the
// like ask a server to reload or reopen logs, and keep it routed.
func stopSignal(sig string) bool {
	switch strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(sig)), "SIG") {
	case "", "TERM", "15", "INT", "2", "QUIT", "3", "KILL", "9":
		return true
	}
	return false
}

// withEvents applies what the event stream said to a fresh list: it drops
// the containers reported dead, marks the ones being stopped, and forgets
// marks of containers the engine no longer lists.
func (w *Watcher) withEvents(list []Container) []Container {
	w.goneMu.Lock()
	defer w.goneMu.Unlock()
	if len(w.gone) == 0 && len(w.stopping) == 0 {
		return list
	}
	listed := make(map[string]bool, len(list))
	out := list[:0:0]
	for _, c := range list {
		listed[c.ID] = true
		if w.gone[c.ID] {
			continue
		}
		if since, ok := w.stopping[c.ID]; ok {
			if time.Since(since) < StoppingMax {
				c.Stopping = true
			} else {
				delete(w.stopping, c.ID)
				w.log.Warn("container still running after a stop signal; routing it again",
					zap.String("container", c.Name), zap.Duration("after", StoppingMax))
			}
		}
		out = append(out, c)
	}
	for id := range w.gone {
		if !listed[id] {
			delete(w.gone, id)
		}
	}
	for id := range w.stopping {
		if !listed[id] {
			delete(w.stopping, id)
		}
	}
	return out
}

// sync lists the engine, regenerates the routes and applies them if they
// changed. An engine error changes nothing: the current routes stay.
func (w *Watcher) sync() {
	containers, err := w.engine.List(w.ctx)
	if err != nil {
		if w.ctx.Err() != nil {
			return
		}
		w.m.errors.WithLabelValues("list").Inc()
		// One line when the engine goes away (or is away from the
		// start), not one per retry: the metric counts the retries.
		if w.reachable || !w.everListed && !w.downLogged {
			w.log.Warn("container engine unreachable; keeping the current routes", zap.String("engine", w.cfg.Engine), zap.Error(err))
			w.downLogged = true
		}
		w.reachable = false
		w.update(func(s *Snapshot) { s.EngineReachable = false; s.LastError = "list containers: " + err.Error() })
		if !w.everListed && w.plan == nil {
			// No list since start: serve the state file's routes (a
			// config load has usually read it already).
			w.Serving()
			if w.adoptState() {
				w.apply(*w.plan, w.containers, true)
			}
		}
		return
	}
	if !w.reachable && w.everListed {
		w.log.Info("container engine reachable again")
	}
	w.listed(containers)
	w.build()
}

// listed takes containers as this host's last list.
func (w *Watcher) listed(containers []Container) {
	w.reachable, w.everListed = true, true
	w.local = w.withEvents(containers)
	w.update(func(s *Snapshot) { s.LastList = time.Now() })
	if w.cfg.Fleet != nil {
		w.cfg.Fleet.Publish(w.local)
	}
}

// FirstListTimeout bounds the engine list of a new watcher's first
// config load (Prime). A variable for tests.
var FirstListTimeout = 2 * time.Second

// Prime lists the engine once, within FirstListTimeout, for the config
// load that created the watcher (before Start), and makes the route set
// of that list the one the config starts with. The loop's first list then
// finds it served and reloads nothing: a process's first start causes no
// config reload, which would cancel the config's work in flight (the TLS
// app's certificate obtains: certmagic logs each as a failed job) and
// close the idle connections of clients. Without an answer in time, the
// config starts with the state file's route set, or none (discovery
// starting), and the loop's first list applies through a reload, as
// before. It reports whether the engine answered.
func (w *Watcher) Prime() bool {
	ctx, cancel := context.WithTimeout(w.ctx, FirstListTimeout)
	began := time.Now()
	containers, err := w.engine.List(ctx)
	cancel()
	if err != nil {
		return false
	}
	w.pubMu.Lock()
	if w.pub == nil && !w.stateTried {
		// the state file's vanished routes and other hosts' containers
		// (the fleet's seed), not its route set: the list replaces it
		w.stateTried = true
		w.readStateLocked(false)
	}
	w.pubMu.Unlock()
	w.seedFleet()
	w.listed(containers)
	if !w.prepare() {
		return false
	}
	w.log.Info("listed the engine for the first config load: it starts with the discovered routes",
		zap.String("server", w.cfg.Server), zap.Int("routes", len(w.plan.Routes)),
		zap.Int("services", w.plan.Services), zap.Duration("duration", time.Since(began)))
	return true
}

// build merges this host's last list with the other hosts' containers
// (fleet), regenerates the routes and applies them if they changed.
func (w *Watcher) build() {
	if !w.prepare() || w.plan.Hash == w.applied {
		return
	}
	w.apply(*w.plan, w.containers, false)
}

// prepare is build without the apply: it makes the regenerated routes
// the loop's plan and the route set of the next config load. It reports
// whether the routes could be generated (the plan is unchanged if not).
func (w *Watcher) prepare() bool {
	containers := w.local
	if w.cfg.Fleet != nil {
		containers = append(slices.Clip(containers), w.cfg.Fleet.Remote()...)
	}
	ds := Discover(containers, w.cfg.Labels)
	w.logLabelErrors(ds)
	outOfScope := 0
	if len(w.cfg.Labels.Scope) > 0 {
		for _, c := range containers {
			if Enabled(c.Labels) && !InScope(c.Labels, w.cfg.Labels.Scope) {
				outOfScope++
			}
		}
	}
	plan, err := BuildRoutes(ds, w.cfg.Build)
	if err == nil {
		if w.vanished == nil {
			w.vanished = vanishedMap(w.stateVanishedRoutes())
		}
		trackVanished(w.cfg.Server, w.vanished, w.plan, &plan, w.cfg.ForgetAfter, time.Now())
	}
	if err != nil {
		w.m.errors.WithLabelValues("build").Inc()
		w.log.Error("generating routes", zap.Error(err))
		w.update(func(s *Snapshot) { s.LastError = err.Error() })
		return false
	}
	for _, warn := range plan.Warnings {
		if !w.warned[warn] {
			w.log.Warn("route conflict", zap.String("detail", warn))
		}
	}
	w.warned = map[string]bool{}
	for _, warn := range plan.Warnings {
		w.warned[warn] = true
	}
	states := map[string]int{}
	w.polled = false
	routedHere := false
	for _, d := range ds {
		states[d.State]++
		w.polled = w.polled || d.Container.Health != ""
		routedHere = routedHere || d.State == StateRouted && d.Container.Node == ""
	}
	w.stopPolled = routedHere && w.engine.StopsUnannounced()
	for _, st := range []string{StateRouted, StateInvalid, StateStarting, StateUnhealthy, StateStopping, StateLocalOnly} {
		w.m.containers.WithLabelValues(st).Set(float64(states[st]))
	}
	w.update(func(s *Snapshot) {
		s.Containers, s.Warnings, s.Routes, s.Hash = ds, plan.Warnings, len(plan.Routes)-len(plan.Vanished), plan.Hash
		s.EngineReachable, s.FromStateFile, s.Vanished = w.reachable, false, plan.Vanished
		s.OutOfScope = outOfScope
	})
	// (setPools adds the canary conflicts to the snapshot's warnings)
	w.plan, w.containers, w.fromState = &plan, containers, false
	w.setPools(&plan)
	w.publish(&plan)
	return true
}

// setPools publishes the plan's replicas to the routes, with the canary
// splits of services that run releases, logging each service whose pool
// changed.
func (w *Watcher) setPools(plan *Plan) {
	splits, warnings := w.canary.splits(plan.Versions)
	if len(warnings) > 0 {
		w.update(func(s *Snapshot) { s.Warnings = append(slices.Clip(s.Warnings), warnings...) })
	}
	setPools(w.cfg.Server, plan.Pools, splits, func(svc string, now, before []string) {
		w.log.Info("service replicas changed", zap.String("server", w.cfg.Server),
			zap.String("service", svc), zap.Strings("upstreams", now), zap.Strings("before", before))
	})
}

func (w *Watcher) apply(plan Plan, containers []Container, fromState bool) {
	start := time.Now()
	changed, err := w.applier.ApplyRoutes(w.ctx, w.cfg.Server, plan.Routes)
	if err != nil {
		if w.ctx.Err() != nil {
			return
		}
		w.m.errors.WithLabelValues("apply").Inc()
		w.m.applies.WithLabelValues("error").Inc()
		w.log.Error("applying discovered routes", zap.String("server", w.cfg.Server), zap.Error(err))
		w.update(func(s *Snapshot) { s.LastError = "apply: " + err.Error() })
		return
	}
	w.applied = plan.Hash
	w.notePlacement()
	w.m.routes.Set(float64(len(plan.Routes)))
	if changed {
		d := time.Since(start)
		w.m.applyDuration.Observe(d.Seconds())
		w.m.applies.WithLabelValues("changed").Inc()
		w.log.Info("discovered routes applied", zap.String("server", w.cfg.Server),
			zap.Int("routes", len(plan.Routes)), zap.Int("services", plan.Services),
			zap.Int("upstreams", plan.Upstreams), zap.Duration("duration", d),
			zap.Bool("from_state_file", fromState))
	} else {
		w.m.applies.WithLabelValues("unchanged").Inc()
	}
	w.update(func(s *Snapshot) { s.AppliedHash, s.LastApply, s.LastError = plan.Hash, time.Now(), "" })
	if fromState || w.cfg.StateFile == "" || w.written == plan.Hash {
		return
	}
	err = WriteState(w.cfg.StateFile, State{
		Written: time.Now().UTC(), Server: w.cfg.Server, Hash: plan.Hash,
		Containers: containers, Routes: plan.Routes, Pools: plan.Pools, Vanished: plan.Vanished,
	})
	if err != nil {
		w.m.errors.WithLabelValues("state_file").Inc()
		w.log.Error("writing state_file", zap.String("path", w.cfg.StateFile), zap.Error(err))
		return
	}
	w.written = plan.Hash
}

// notePlacement logs, once each, where the server's site policies do not
// cover the discovered routes (when the applier can tell: the admin
// client), and keeps them in the snapshot.
func (w *Watcher) notePlacement() {
	pc, ok := w.applier.(interface{ PlacementWarnings() []string })
	if !ok {
		return
	}
	warnings := pc.PlacementWarnings()
	seen := make(map[string]bool, len(warnings))
	for _, msg := range warnings {
		seen[msg] = true
		if !w.placementLogged[msg] {
			w.log.Warn("site policies do not cover discovered routes", zap.String("server", w.cfg.Server), zap.String("detail", msg))
		}
	}
	w.placementLogged = seen
	w.update(func(s *Snapshot) { s.Placement = warnings })
}

// seedFleet hands the fleet the other hosts' containers of the state
// file (the last route set that applied: read by the first config load,
// else here), so that a restarted gateway routes them from its first
// build, before its bucket watch delivers them, or while NATS is
// unreachable.
func (w *Watcher) seedFleet() {
	if w.cfg.Fleet == nil || w.cfg.StateFile == "" {
		return
	}
	w.pubMu.Lock()
	tried, cs := w.stateTried, w.stateContainers
	w.pubMu.Unlock()
	if !tried {
		st, err := ReadState(w.cfg.StateFile)
		if err != nil || st.Server != w.cfg.Server {
			return
		}
		cs = st.Containers
	}
	w.cfg.Fleet.Seed(cs)
}

// readStateLocked reads the state file (w.pubMu held); with serve, it
// makes its route set the one config loads run: the routes are
// regenerated from the stored containers with the current options
// (falling back to the stored routes), and the services' replicas go into
// their pools. Without serve (Prime, which lists the engine) it keeps
// only what the first build takes from it: the vanished routes and the
// other hosts' containers.
func (w *Watcher) readStateLocked(serve bool) {
	if w.cfg.StateFile == "" {
		return
	}
	st, err := ReadState(w.cfg.StateFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.m.errors.WithLabelValues("state_file").Inc()
			w.log.Error("reading state_file", zap.String("path", w.cfg.StateFile), zap.Error(err))
		} else if serve {
			w.log.Info("no state_file yet: until the first container list applies, requests that no route matches get 503 discovery_starting",
				zap.String("path", w.cfg.StateFile))
		}
		return
	}
	ds := Discover(st.Containers, w.cfg.Labels)
	plan, err := BuildRoutes(ds, w.cfg.Build)
	if err != nil || st.Server != w.cfg.Server {
		plan = Plan{Routes: st.Routes, Hash: HashRoutes(st.Routes), Pools: st.Pools, Vanished: st.Vanished}
	} else {
		trackVanished(w.cfg.Server, vanishedMap(st.Vanished), nil, &plan, w.cfg.ForgetAfter, time.Now())
	}
	w.stateVanished = plan.Vanished
	w.statePlan, w.stateContainers = &plan, st.Containers
	if !serve {
		return
	}
	w.log.Info("serving the routes of state_file until the engine is listed",
		zap.String("path", w.cfg.StateFile), zap.Time("written", st.Written), zap.Int("routes", len(plan.Routes)))
	w.pub = &servingSet{routes: plan.Routes, hash: plan.Hash, known: true}
	w.update(func(s *Snapshot) {
		s.Containers, s.Warnings, s.Routes, s.Hash, s.FromStateFile = ds, plan.Warnings, len(plan.Routes)-len(plan.Vanished), plan.Hash, true
		s.Vanished = plan.Vanished
	})
	w.setPools(&plan)
}

// stateVanishedRoutes returns the vanished routes the state file held.
func (w *Watcher) stateVanishedRoutes() []VanishedRoute {
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	return w.stateVanished
}

func vanishedMap(vs []VanishedRoute) map[string]VanishedRoute {
	m := make(map[string]VanishedRoute, len(vs))
	for _, v := range vs {
		if c, err := Canonical(v.Match); err == nil {
			m[string(c)] = v
		}
	}
	return m
}

// adoptState makes the state file's plan, if it was read and nothing was
// listed since, the loop's plan; it reports whether it did.
func (w *Watcher) adoptState() bool {
	if w.plan != nil || w.everListed {
		return false
	}
	w.pubMu.Lock()
	p, cs := w.statePlan, w.stateContainers
	w.pubMu.Unlock()
	if p == nil {
		return false
	}
	w.plan, w.containers, w.fromState = p, cs, true
	w.written = p.Hash
	return true
}

// logLabelErrors logs one line per container whose label errors are new or
// changed, naming the container and the labels.
func (w *Watcher) logLabelErrors(ds []Discovered) {
	seen := make(map[string]string, len(ds))
	for _, d := range ds {
		if len(d.Errors) == 0 || d.Container.Node != "" {
			continue // another host's gateway logs its containers' errors
		}
		msgs := make([]string, len(d.Errors))
		labels := make([]string, len(d.Errors))
		for i, e := range d.Errors {
			msgs[i] = e.Error()
			labels[i] = e.Label
		}
		text := strings.Join(msgs, "; ")
		seen[d.Container.ID] = text
		if w.logged[d.Container.ID] == text {
			continue
		}
		w.m.errors.WithLabelValues("labels").Inc()
		w.log.Error("container skipped: invalid labels",
			zap.String("container", d.Container.Name), zap.String("id", shortID(d.Container.ID)),
			zap.Strings("labels", labels), zap.String("error", text))
	}
	w.logged = seen
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
