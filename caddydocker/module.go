// Package caddydocker is the gateway's service discovery: the `docker` app
// follows a Docker (or Podman) engine, turns the labels of opted-in
// containers into routes and applies them to one HTTP server through
// Caddy's admin API.
package caddydocker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/internal/adminaddr"
	"github.com/apigate/gateway/internal/natsconn"
)

func init() {
	caddy.RegisterModule(App{})
}

// watchers holds the running watchers, keyed by the app's configuration, so
// that a watcher survives config reloads (including the ones it causes).
var watchers = caddy.NewUsagePool()

// App is the `docker` app: service discovery from container labels.
type App struct {
	// Host is the engine's API address: unix:///run/podman/podman.sock,
	// unix:///var/run/docker.sock or tcp://host:port. Default: the
	// DOCKER_HOST environment variable, then unix:///var/run/docker.sock.
	Host string `json:"host,omitempty"`

	// Debounce is the minimum time between two re-lists of the engine: an
	// isolated event is handled at once, a burst of events at most once per
	// debounce. Default: 100ms.
	Debounce caddy.Duration `json:"debounce,omitempty"`

	// ResyncInterval is the interval of the periodic full re-list that
	// catches missed events. Default: 30s.
	ResyncInterval caddy.Duration `json:"resync_interval,omitempty"`

	// StateFile is where the last route set that applied is written
	// (atomically). It is applied at start when the engine is unreachable.
	// Default: docker/routes-<server>.json under Caddy's data directory.
	StateFile string `json:"state_file,omitempty"`

	// Server is the name of the HTTP server (as in the `servers` global
	// option's `name`, or the key under apps.http.servers) that receives
	// the discovered routes, in front of its own routes. Default: the only
	// HTTP server, when there is exactly one.
	Server string `json:"server,omitempty"`

	// Admin is the address of Caddy's admin endpoint through which routes
	// are applied, as in the `admin` global option (host:port, or
	// unix//path for a socket). Default: this config's own admin address
	// (its `admin` global option; Caddy's default when it has none). Set it
	// only when the admin API must be reached at another address than the
	// one it listens on.
	Admin string `json:"admin,omitempty"`

	// JWTAuth is the jwt_auth handler (its JSON config) placed in routes
	// that require auth. Without it, containers whose routers require auth
	// (the default) are skipped with a label error.
	JWTAuth json.RawMessage `json:"jwt_auth,omitempty"`

	// RBAC is the base rbac handler config (e.g. its roles_claim); a
	// router's auth.roles label adds `require any <roles>` to it.
	RBAC json.RawMessage `json:"rbac,omitempty"`

	// Permission is the permission handler placed in routes with
	// permission=true.
	Permission json.RawMessage `json:"permission,omitempty"`

	// Audit is the audit handler placed in routes with audit=true (the
	// default). Default: {"handler":"audit"}.
	Audit json.RawMessage `json:"audit,omitempty"`

	// Transport is the reverse_proxy transport of discovered routes.
	// Default: HTTP with a keepalive pool tuned for a gateway (see docs).
	Transport json.RawMessage `json:"transport,omitempty"`

	// StreamCloseDelay is how long a WebSocket or other streaming
	// connection through a discovered route stays open after a reload
	// unloads the config it was opened on. Every container change is a
	// reload, so without it one container's deploy would cut the streams
	// of every other route. The connection is closed when the delay ends
	// (clients reconnect to the current config). 0 closes streams at
	// once, as Caddy does by default. Default: 1h.
	StreamCloseDelay *caddy.Duration `json:"stream_close_delay,omitempty"`

	// Scope are labels a container must carry (all of them) for this
	// gateway to route it, beside gateway.enable=true: "<label>=<value>",
	// or "<label>" for the label with any value. Several gateways (or
	// several Compose projects) on one engine each route their own, e.g.
	// "com.docker.compose.project=shop" or "gateway.instance=edge".
	// Default: none (every opted-in container).
	Scope []string `json:"scope,omitempty"`

	// ForgetAfter is how long the routes of a service that is gone (its
	// last container stopped, or its labels no longer claim them) keep
	// answering 404 {"error":"no_route"} in the docker_routes handlers, so
	// that its requests do not reach the routes after the handler (a
	// site's catch-all `handle`, say) meanwhile. 0 forgets them at once.
	// Default: 24h.
	ForgetAfter *caddy.Duration `json:"forget_after,omitempty"`

	// Fleet shares discovered containers with the gateways on other hosts
	// through a JetStream KV bucket, so that each routes the union.
	Fleet *FleetOptions `json:"fleet,omitempty"`

	// RateLimitSync is how often the gateways exchange the counts of the
	// rate_limit labels' limits, when they are shared: with the
	// `storage nats` global option (through it) or a fleet (through a
	// bucket <fleet bucket>_rate_limit on the fleet's NATS), a label's
	// limit holds for the whole fleet, as caddy-ratelimit's distributed
	// mode does (read and write intervals). 0 turns sharing off (each
	// gateway counts alone). Default: 250ms.
	RateLimitSync *caddy.Duration `json:"rate_limit_sync,omitempty"`

	key     string
	watcher *Watcher
	logger  *zap.Logger
	auditor Auditor

	// handlers are this config's docker_routes handlers.
	handlers *attached
}

// attached are a config's docker_routes handlers. They attach while the
// http app provisions, which may be before the docker app has finished
// provisioning (pending) or after (ready); all of them run the one route
// set taken at the end of the docker app's provisioning.
type attached struct {
	mu      sync.Mutex
	ready   bool
	pending []*RoutesHandler
	set     servingSet
	served  servedState
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "docker",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision sets defaults, builds the route options and gets (or creates)
// the watcher for this configuration. A new watcher lists the engine once
// (within FirstListTimeout), so that the config starts with its routes; it
// never contacts the admin API.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger(a)
	a.handlers = new(attached)
	if a.Host == "" {
		a.Host = DefaultHost()
	}
	if a.Debounce == 0 {
		a.Debounce = caddy.Duration(100 * time.Millisecond)
	}
	if a.ResyncInterval == 0 {
		a.ResyncInterval = caddy.Duration(30 * time.Second)
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if err := a.resolveServer(ctx); err != nil {
		return err
	}
	if a.StateFile == "" {
		a.StateFile = filepath.Join(caddy.AppDataDir(), "docker", "routes-"+a.Server+".json")
	}
	network, address, err := a.adminEndpoint(ctx)
	if err != nil {
		return err
	}

	build := BuildOptions{Server: a.Server, Transport: a.Transport, StreamCloseDelay: DefaultStreamCloseDelay}
	if a.StreamCloseDelay != nil {
		build.StreamCloseDelay = time.Duration(*a.StreamCloseDelay)
	}
	if build.JWTAuth, err = withHandler(a.JWTAuth, "jwt_auth"); err != nil {
		return err
	}
	if build.Permission, err = withHandler(a.Permission, "permission"); err != nil {
		return err
	}
	if build.Audit, err = withHandler(a.Audit, "audit"); err != nil {
		return err
	}
	rbacBase, err := withHandler(a.RBAC, "rbac")
	if err != nil {
		return err
	}
	build.RBAC = rbacBuilder(rbacBase)
	labels := LabelOptions{HaveJWT: len(build.JWTAuth) > 0, HavePermission: len(build.Permission) > 0}
	for _, sc := range a.Scope {
		l, err := ParseScope(sc)
		if err != nil {
			return fmt.Errorf("docker: %w", err)
		}
		labels.Scope = append(labels.Scope, l)
	}

	if err := globalMetrics().register(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("docker: registering metrics: %w", err)
	}
	// Canary rollbacks and promotions are audit events of this config's
	// audit app, when it has one.
	if v, err := ctx.AppIfConfigured("audit"); err == nil {
		if au, ok := v.(Auditor); ok {
			a.auditor = au
		}
	} else if !errors.Is(err, caddy.ErrNotConfigured) {
		return fmt.Errorf("docker: %w", err)
	}

	var natsOpts natsconn.Options
	if a.Fleet != nil {
		if natsOpts, err = a.Fleet.natsOptions(natsconn.ConfigStorage(ctx)); err != nil {
			return err
		}
		if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
			return fmt.Errorf("docker: registering metrics: %w", err)
		}
	}
	if build.RateLimitCounts, err = a.rateLimitCounts(ctx, natsOpts); err != nil {
		return err
	}

	cfgJSON, err := json.Marshal(a)
	if err != nil {
		return err
	}
	natsJSON, err := json.Marshal(natsOpts)
	if err != nil {
		return err
	}
	cfgJSON = append(cfgJSON, natsJSON...)
	sum := sha256.Sum256(append(cfgJSON, network+" "+address...))
	a.key = hex.EncodeToString(sum[:])
	logger := a.logger
	val, loaded, err := watchers.LoadOrNew(a.key, func() (caddy.Destructor, error) {
		engine, err := NewDockerEngine(a.Host)
		if err != nil {
			return nil, err
		}
		wc := WatcherConfig{
			Server:    a.Server,
			Engine:    a.Host,
			Debounce:  time.Duration(a.Debounce),
			Resync:    time.Duration(a.ResyncInterval),
			StateFile: a.StateFile,
			Build:     build,
			Labels:    labels,
		}
		wc.ForgetAfter = DefaultForgetAfter
		if a.ForgetAfter != nil {
			wc.ForgetAfter = time.Duration(*a.ForgetAfter)
		}
		if a.Fleet != nil {
			conn, release, err := natsconn.Get(natsOpts)
			if err != nil {
				_ = engine.Close()
				return nil, fmt.Errorf("fleet: %w", err)
			}
			f, err := NewFleet(a.Fleet.config(), conn, logger.Named("fleet"))
			if err != nil {
				release()
				_ = engine.Close()
				return nil, fmt.Errorf("fleet: %w", err)
			}
			wc.Fleet, wc.OnStop = f, release
		}
		w := NewWatcher(wc, engine, NewAdminClient(network, address), logger)
		return watcherDestructor{w}, nil
	})
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	a.watcher = val.(watcherDestructor).Watcher
	if !loaded {
		// A new watcher (a process's first config, or new docker
		// options): start with the engine's current routes, so that no
		// reload follows the start (Watcher.Prime).
		a.watcher.Prime()
	}
	return a.loadHandlers()
}

// loadHandlers takes the route set this config's docker_routes handlers
// run (the watcher's current one; at a first start, the state file's) and
// loads it into the handlers that attached while this app provisioned.
func (a *App) loadHandlers() error {
	set := a.watcher.Serving()
	hs := a.handlers
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.set, hs.ready = set, true
	pending := hs.pending
	hs.pending = nil
	for _, h := range pending {
		if err := a.loadLocked(h); err != nil {
			return err
		}
	}
	return nil
}

// attach gives a docker_routes handler its routes, now or (while this app
// is still provisioning) at the end of its provisioning.
func (a *App) attach(h *RoutesHandler) error {
	hs := a.handlers
	if hs == nil {
		return fmt.Errorf("docker_routes: the docker app is not provisioned")
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if !hs.ready {
		hs.pending = append(hs.pending, h)
		return nil
	}
	return a.loadLocked(h)
}

func (a *App) loadLocked(h *RoutesHandler) error {
	if h.server != a.Server {
		return fmt.Errorf("docker_routes: it is in the routes of server %q, but the docker app routes to server %q (its `server` option): discovered routes can only run in that server", h.server, a.Server)
	}
	hs := a.handlers
	h.load(hs.set)
	if h.CatchAll {
		hs.served.catchAll = true
	} else {
		hs.served.handlers++
	}
	return nil
}

// natsOptions returns the fleet's NATS connection options: its own
// servers, else those (with credentials) of this config's `storage nats`
// (storage looks it up).
func (o *FleetOptions) natsOptions(storage func() natsconn.OptionsProvider) (natsconn.Options, error) {
	c := o.Config
	c.AddServers(o.NATS...)
	opts, err := c.Resolve(nil, storage)
	if err != nil {
		return opts, fmt.Errorf("docker: fleet: %w", err)
	}
	return opts, nil
}

// DefaultRateLimitSync is RateLimitSync's default.
const DefaultRateLimitSync = 250 * time.Millisecond

// rateLimitCounts returns the counts block of the rate_limit labels'
// quota handlers (caddyquota.Counts): shared by the fleet through
// NATS, with the leases of the quota's fleet, whenever the gateways have
// NATS to count through (`storage nats`, whose connection it takes, or a
// fleet, with its servers), in the bucket <fleet bucket>_rate_limit,
// written every rate_limit_sync; else each gateway counts alone.
// natsOpts are the fleet's connection options (none without a fleet).
func (a *App) rateLimitCounts(ctx caddy.Context, natsOpts natsconn.Options) (json.RawMessage, error) {
	sync := DefaultRateLimitSync
	if a.RateLimitSync != nil {
		sync = time.Duration(*a.RateLimitSync)
	}
	_, storage := ctx.Storage().(natsconn.OptionsProvider)
	return a.countsBlock(storage, sync, natsOpts)
}

// countsBlock is rateLimitCounts' block, given whether the config has
// `storage nats` (whose connection the handlers then take).
func (a *App) countsBlock(storage bool, sync time.Duration, natsOpts natsconn.Options) (json.RawMessage, error) {
	if sync <= 0 || !storage && a.Fleet == nil {
		return json.RawMessage(`{}`), nil
	}
	bucket := DefaultFleetBucket
	fleet := &caddyquota.FleetConfig{SyncInterval: caddy.Duration(sync)}
	if a.Fleet != nil {
		if a.Fleet.Bucket != "" {
			bucket = a.Fleet.Bucket
		}
		fleet.Node = a.Fleet.Node
	}
	fleet.Bucket = bucket + "_rate_limit"
	if !storage {
		// the fleet's own connection, the whole NATS connection block
		// (with `storage nats`, the quota handler takes its connection)
		fleet.Config = natsOpts.Config()
	}
	return json.Marshal(caddyquota.Counts{Fleet: fleet})
}

// Validate checks the configuration.
func (a *App) Validate() error {
	if a.Debounce < 0 {
		return fmt.Errorf("docker: invalid debounce %q: must not be negative", time.Duration(a.Debounce))
	}
	if a.ResyncInterval < 0 || (a.ResyncInterval > 0 && time.Duration(a.ResyncInterval) < time.Second) {
		return fmt.Errorf("docker: invalid resync_interval %q: must be at least 1s", time.Duration(a.ResyncInterval))
	}
	if a.Host != "" && !strings.Contains(a.Host, "://") {
		return fmt.Errorf("docker: invalid host %q: expected unix:///path/to.sock or tcp://host:port", a.Host)
	}
	if f := a.Fleet; f != nil {
		if _, err := f.config().withDefaults(); err != nil {
			return fmt.Errorf("docker: fleet: %w", err)
		}
	}
	if a.RateLimitSync != nil && *a.RateLimitSync < 0 {
		return fmt.Errorf("docker: invalid rate_limit_sync %s: must not be negative (0 or off: each gateway counts alone)", time.Duration(*a.RateLimitSync))
	}
	if a.StreamCloseDelay != nil && *a.StreamCloseDelay < 0 {
		return fmt.Errorf("docker: invalid stream_close_delay %s: must not be negative", time.Duration(*a.StreamCloseDelay))
	}
	for _, sc := range a.Scope {
		if _, err := ParseScope(sc); err != nil {
			return fmt.Errorf("docker: %w", err)
		}
	}
	if a.ForgetAfter != nil && *a.ForgetAfter < 0 {
		return fmt.Errorf("docker: invalid forget_after %s: must not be negative", time.Duration(*a.ForgetAfter))
	}
	return nil
}

// Start starts watching (first start) or asks the running watcher to check
// that the reloaded config still holds its routes. It returns at once: the
// engine and the admin API are only contacted from the watcher's goroutine.
func (a *App) Start() error {
	hs := a.handlers
	hs.mu.Lock()
	st := hs.served
	st.set = hs.set
	hs.mu.Unlock()
	setServed(a.Server, st)
	setCurrent(a.Server, a.watcher)
	a.watcher.SetAuditor(a.auditor)
	a.watcher.Start()
	return nil
}

// Stop does nothing on a config reload: the watcher outlives reloads, and
// Cleanup releases it. When the process exits, it stops the watcher at
// once, first of all the shutdown: no more routes are applied through the
// admin API (a new process of this gateway may already listen there) and
// the fleet entry, marked restarting, stops heart-beating (so a new
// process of this node is not taken for a namesake), while the HTTP
// servers drain.
func (a *App) Stop() error {
	if caddy.Exiting() && a.watcher != nil {
		a.watcher.Stop()
	}
	return nil
}

// Cleanup releases this config's reference to the watcher; the last
// reference stops it.
func (a *App) Cleanup() error {
	if a.key != "" {
		_, _ = watchers.Delete(a.key)
	}
	return nil
}

// Ready reports whether this config's discovered routes are loaded (the
// state file's, or a listing of the engine): until then the gateway_ready
// handler answers 503 "starting". The route set a config runs is fixed at
// its load, and the first listing applies through a reload, so a config
// that is not ready is replaced by one that is.
func (a *App) Ready() (bool, string) {
	hs := a.handlers
	if hs == nil {
		return false, "not provisioned"
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if !hs.set.known {
		return false, "discovered routes not loaded yet (no state file, engine not listed yet)"
	}
	return true, ""
}

// Snapshot returns what the app discovered: the containers with their parsed
// labels and label errors, the route set and the engine's reachability.
func (a *App) Snapshot() Snapshot {
	if a.watcher == nil {
		return Snapshot{Server: a.Server}
	}
	return a.watcher.Snapshot()
}

// resolveServer defaults Server to the only HTTP server and checks that it
// exists.
func (a *App) resolveServer(ctx caddy.Context) error {
	httpAppIface, err := ctx.AppIfConfigured("http")
	if err != nil || httpAppIface == nil {
		if a.Server == "" {
			return fmt.Errorf("docker: no http app in this config, so there is no server to route to")
		}
		return nil
	}
	httpApp, ok := httpAppIface.(*caddyhttp.App)
	if !ok {
		return nil
	}
	names := make([]string, 0, len(httpApp.Servers))
	for n := range httpApp.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	if a.Server == "" {
		a.Server, err = onlyServer(names)
		return err
	}
	if _, ok := httpApp.Servers[a.Server]; !ok {
		return fmt.Errorf("docker: invalid server %q: not an HTTP server of this config (servers: %v; name servers with the `servers { name ... }` global option)", a.Server, names)
	}
	return nil
}

// onlyServer is the server the docker app routes to when its server
// option is empty: the config's only HTTP server.
func onlyServer(names []string) (string, error) {
	sort.Strings(names)
	if len(names) != 1 {
		return "", fmt.Errorf("docker: set server to one of the HTTP servers %v", names)
	}
	return names[0], nil
}

// adminEndpoint returns the admin API's network and address: the Admin
// field, else this config's own admin address. A config that turns the
// admin API off cannot run discovery.
func (a *App) adminEndpoint(ctx caddy.Context) (string, string, error) {
	ep, err := adminaddr.For(ctx, a.Admin, a.logger)
	if errors.Is(err, adminaddr.ErrDisabled) {
		return "", "", fmt.Errorf("docker: discovery needs the admin API, through which it applies the routes it finds, but %w: remove `admin off` (or give the admin API an address, e.g. `admin localhost:2019`), or remove the docker app", err)
	}
	if err != nil {
		return "", "", fmt.Errorf("docker: invalid admin: %w", err)
	}
	return ep.Network, ep.Address, nil
}

// withHandler returns raw with "handler": name set (raw may hold the
// handler's config with or without it); nil stays nil.
func withHandler(raw json.RawMessage, name string) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("docker: invalid %s: must be a JSON object: %w", name, err)
	}
	if h, ok := obj["handler"]; ok && string(h) != `"`+name+`"` {
		return nil, fmt.Errorf("docker: invalid %s: handler is %s, expected %q", name, h, name)
	}
	obj["handler"] = json.RawMessage(`"` + name + `"`)
	return json.Marshal(obj)
}

// rbacBuilder returns the function that builds a router's rbac handler:
// the rbac module's own Caddyfile parser applied to `require any <roles>`,
// on top of the app's rbac base config. Without the rbac module (in tests),
// DefaultRBAC.
func rbacBuilder(base json.RawMessage) func([]string) (json.RawMessage, error) {
	return func(roles []string) (json.RawMessage, error) {
		mod, err := caddy.GetModule("http.handlers.rbac")
		if err != nil {
			if len(base) == 0 {
				return DefaultRBAC(roles)
			}
			return nil, fmt.Errorf("module http.handlers.rbac is not compiled in")
		}
		inst := mod.New()
		if len(base) > 0 {
			if err := json.Unmarshal(base, inst); err != nil {
				return nil, fmt.Errorf("rbac base config: %w", err)
			}
		}
		u, ok := inst.(caddyfile.Unmarshaler)
		if !ok {
			return DefaultRBAC(roles)
		}
		tokens, err := caddyfile.Tokenize([]byte("rbac {\n\trequire any "+strings.Join(roles, " ")+"\n}\n"), "docker-labels")
		if err != nil {
			return nil, err
		}
		if err := u.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)); err != nil {
			return nil, err
		}
		return caddyconfig.JSONModuleObject(inst, "handler", "rbac", nil), nil
	}
}

// FleetOptions configure discovery across hosts (docs/caddydocker.md).
type FleetOptions struct {
	// The NATS connection (the gateway's one NATS connection block:
	// servers, creds, nkey, user, password, token, tls, name; and the
	// older spellings creds_file, tls_ca, tls_cert, tls_key). Without
	// servers: the connection of this config's `storage nats`, shared.
	natsconn.Config
	// NATS is the older spelling of servers (its entries come first).
	NATS []string `json:"nats,omitempty"`
	// Bucket is the JetStream KV bucket. Default: gateway_routes.
	Bucket string `json:"bucket,omitempty"`
	// Advertise is the address (host or IP) at which other hosts reach
	// this host's published container ports. Required.
	Advertise string `json:"advertise,omitempty"`
	// TTL is how long a host's containers stay routed elsewhere after its
	// gateway stops heart-beating. Default: 15s.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// Node is this host's name in the bucket. Default: the host name.
	Node string `json:"node,omitempty"`
	// RestartGrace is how long the other gateways keep routing this
	// host's containers after this gateway stops gracefully (they keep
	// running while it restarts), unless it is back sooner. 0 withdraws
	// them at once. Default: 1m. A killed gateway's containers stay for
	// ttl.
	RestartGrace *caddy.Duration `json:"restart_grace,omitempty"`
}

// config is the Fleet's configuration.
func (o *FleetOptions) config() FleetConfig {
	c := FleetConfig{Node: o.Node, Advertise: o.Advertise, Bucket: o.Bucket, TTL: time.Duration(o.TTL)}
	if o.RestartGrace != nil {
		c.RestartGrace = time.Duration(*o.RestartGrace)
		if c.RestartGrace == 0 {
			c.RestartGrace = -1 // withdraw at Stop
		}
	}
	return c
}

type watcherDestructor struct{ *Watcher }

func (w watcherDestructor) Destruct() error {
	w.Stop()
	clearCurrent(w.Watcher)
	return nil
}

var (
	currentMu sync.RWMutex
	current   = map[string]*Watcher{}
)

func setCurrent(server string, w *Watcher) {
	currentMu.Lock()
	current[server] = w
	currentMu.Unlock()
}

func clearCurrent(w *Watcher) {
	currentMu.Lock()
	for k, v := range current {
		if v == w {
			delete(current, k)
		}
	}
	currentMu.Unlock()
}

// Current returns the snapshot of the running docker app that routes to
// server ("" = any one), and whether there is one. It is the read-only
// accessor for status pages: the containers with their parsed labels and
// label errors.
func Current(server string) (Snapshot, bool) {
	currentMu.RLock()
	defer currentMu.RUnlock()
	if server != "" {
		w, ok := current[server]
		if !ok {
			return Snapshot{}, false
		}
		return w.Snapshot(), true
	}
	keys := make([]string, 0, len(current))
	for k := range current {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return Snapshot{}, false
	}
	return current[keys[0]].Snapshot(), true
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.Validator    = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
