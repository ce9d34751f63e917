// Package caddyaudit records one audit event per request and delivers the
// events in batches to HTTP webhooks, NATS (core or JetStream) and files,
// without losing any silently: bounded queues per sink, an optional disk
// spool, backpressure, and counted, logged drops.
package caddyaudit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/fieldedits"
	"github.com/apigate/gateway/internal/natsconn"

	"github.com/apigate/gateway/internal/urls"
)

func init() {
	caddy.RegisterModule(App{})
	caddy.RegisterModule(Handler{})
}

// workers are shared between configs, keyed by their full configuration,
// so an unchanged sink keeps its queue (and in-flight events) across
// config reloads; a changed or removed one is drained when the last config
// using it is cleaned up.
var workerPool = caddy.NewUsagePool()

type pooledWorker struct{ *worker }

func (p pooledWorker) Destruct() error {
	p.worker.stop()
	return nil
}

// App is the audit app: the sinks that audit events are delivered to.
type App struct {
	// QueueSize is the capacity, in events, of each sink's in-memory queue.
	// Default: 65536.
	QueueSize int `json:"queue_size,omitempty"`
	// SpoolDir, when set, is a directory where events go when a sink's
	// queue is full (and at shutdown, when they could not be delivered in
	// time); they are replayed in order when the sink recovers and after a
	// restart. Each sink has its own subdirectory.
	SpoolDir string `json:"spool_dir,omitempty"`
	// BlockTimeout is how long a request waits for room in a full queue
	// when there is no spool, before its event is counted as dropped and
	// logged. Default: 1s.
	BlockTimeout caddy.Duration `json:"block_timeout,omitempty"`
	// ShutdownTimeout bounds how long stopping (or reloading away) a sink
	// may take to deliver what is queued. Default: 5s.
	ShutdownTimeout caddy.Duration `json:"shutdown_timeout,omitempty"`
	// Durability is "memory" (default): events wait for their sink in a
	// memory queue, and go to the spool only when it is full; or "disk":
	// every event is written to the sink's spool (in the file, so the
	// kernel keeps it if the process dies) before the request finishes,
	// and the sink delivers from there. disk needs spool_dir.
	Durability string `json:"durability,omitempty"`
	// SyncInterval is how often spooled events are fsynced: a power loss
	// loses at most this window of them. Default: 200ms.
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`
	// SpoolMaxSize bounds each sink's spool, in bytes; beyond it the sink
	// is full (see on_full). Default: 0, until the disk is full.
	SpoolMaxSize int64 `json:"spool_max_size,omitempty"`
	// AlertAfter is the age of a sink's oldest undelivered event that is
	// logged as a warning. Default: 1m.
	AlertAfter caddy.Duration `json:"alert_after,omitempty"`
	// Chain, when set, links the events into a tamper-evident chain with
	// signed checkpoints (see package auditchain).
	Chain *ChainConfig `json:"chain,omitempty"`
	// Sinks are where events are delivered; each has its own queue.
	Sinks []SinkConfig `json:"sinks,omitempty"`
	// Node names this gateway in the JetStream message ids of its events
	// (<node>/<request_id>, so that JetStream's de-duplication only ever
	// merges retries of one event), in the node field of every event, and
	// in chain_start events. Give each gateway of a fleet its own.
	// Default: the host name.
	Node string `json:"node,omitempty"`

	// plans are the sinks Provision checked, for Start to acquire;
	// chainCfg is the chain's config with placeholders expanded.
	plans    []sinkPlan
	chainCfg *ChainConfig

	// starting makes start run once (nil: nothing to start, as for an
	// App made without Provision); the fields after it are set by start.
	starting  *starting
	workers   []*worker
	keys      []string
	chain     *chain
	chainKey  string
	rejecting []*worker // sinks with on_full reject
	rejects   bool      // a sink has on_full reject (known from Provision)
	logger    *zap.Logger
}

// starting runs an App's start once, from Start or from the first event
// recorded before it.
type starting struct {
	once sync.Once
	err  error
	done atomic.Bool
}

// sinkPlan is one sink as Provision checked it: its pool key and the
// settings Start opens it with.
type sinkPlan struct {
	key  string
	sc   SinkConfig
	wc   workerConfig
	node string
	nats natsconn.Options // a nats sink's connection
}

// SinkConfig configures one sink.
type SinkConfig struct {
	// Type is "http", "nats" or "file".
	Type string `json:"type"`
	// Name labels the sink in metrics, logs and Stats. Default: the type
	// and the URL's host (or the file path), without credentials.
	Name string `json:"name,omitempty"`
	// URL is the webhook URL (http) or the NATS server URLs, comma
	// separated (nats).
	URL string `json:"url,omitempty"`
	// Path is the JSON-lines file (file).
	Path string `json:"path,omitempty"`
	// BatchSize is the most events per batch. Default: 500.
	BatchSize int `json:"batch_size,omitempty"`
	// FlushInterval is the longest a batch waits to fill. Default: 200ms.
	FlushInterval caddy.Duration `json:"flush_interval,omitempty"`
	// Timeout bounds one delivery attempt. Default: 5s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxRetries is how many times a failed batch is retried before it is
	// spooled (with spool_dir) or dropped (counted and logged). Default: 0,
	// retry until delivered or until shutdown.
	MaxRetries int `json:"max_retries,omitempty"`
	// QueueSize overrides the app's queue_size for this sink.
	QueueSize int `json:"queue_size,omitempty"`
	// Headers are added to each webhook request (http). Global
	// placeholders such as {env.AUDIT_TOKEN} are expanded.
	Headers http.Header `json:"headers,omitempty"`
	// Subject is the NATS subject (nats). Default: "gateway.audit".
	Subject string `json:"subject,omitempty"`
	// JetStream publishes with acknowledgements (nats).
	JetStream bool `json:"jetstream,omitempty"`
	// Stream, when set, is a JetStream stream created for Subject if it
	// does not exist (implies jetstream).
	Stream string `json:"stream,omitempty"`
	// The NATS connection of a nats sink (the gateway's one NATS
	// connection block: servers, creds, nkey, user, password, token, tls;
	// and the older spellings creds_file, tls_ca, tls_cert, tls_key).
	// Servers add to URL. The block's name is the sink's Name: set, it is
	// also the sink's NATS client name.
	natsconn.Config
	// OnFull is what happens when the sink has no room for an event (its
	// queue is full and there is no spool, or its spool is full): "block"
	// (default) waits up to block_timeout for room, then drops the event;
	// "drop_oldest" drops the oldest queued event (or the oldest spool
	// segment not being delivered) to make room; "reject" answers new
	// requests on routes with an audit handler 503 while the sink is full,
	// and blocks for the requests already admitted. Every action is
	// counted (gateway_audit_full_total) and logged.
	OnFull string `json:"on_full,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "audit", New: func() caddy.Module { return new(App) }}
}

// Provision checks the sinks and the chain key and sets them up for
// Start. It opens nothing: `caddy validate` (and a load that fails after
// provisioning) provisions and cleans up without starting, and must leave
// the audit trail as it was (no file, spool or chain event written).
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering audit metrics: %w", err)
	}
	for _, sc := range a.Sinks {
		if sc.Type == "nats" {
			// The shared connections' own metrics (connected, reconnects).
			if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
				return fmt.Errorf("registering NATS metrics: %w", err)
			}
			break
		}
	}
	a.starting = new(starting)
	repl := caddy.NewReplacer()
	a.SpoolDir = repl.ReplaceAll(a.SpoolDir, "")
	a.Node = strings.TrimSpace(repl.ReplaceAll(a.Node, ""))
	if a.Node == "" {
		a.Node, _ = os.Hostname()
	}
	if a.Node == "" {
		a.Node = "gateway"
	}
	names := map[string]bool{}
	for i := range a.Sinks {
		sc := a.Sinks[i].expand(repl)
		err := sc.validate()
		if err != nil {
			return fmt.Errorf("sink %d: %w", i, err)
		}
		name := sc.defaultName()
		if names[name] {
			return fmt.Errorf("sink %d: duplicate sink name %q (set a distinct name)", i, name)
		}
		names[name] = true
		wc := a.workerConfig(sc, name)
		var nats natsconn.Options
		if sc.Type == "nats" {
			if nats, err = sc.natsOptions(repl); err != nil {
				return fmt.Errorf("sink %d: %w", i, err)
			}
		}
		keyb, _ := json.Marshal(struct {
			S    SinkConfig
			W    workerConfig
			Node string
			NATS natsconn.Options
		}{sc, wc, a.Node, nats})
		a.plans = append(a.plans, sinkPlan{key: string(keyb), sc: sc, wc: wc, node: a.Node, nats: nats})
		a.rejects = a.rejects || wc.OnFull == onFullReject
	}
	if a.Chain != nil {
		cc := *a.Chain
		cc.KeyFile = repl.ReplaceAll(cc.KeyFile, "")
		cc.node = a.Node
		// the key must load now, so that validate reports a bad one
		if _, _, err := cc.poolKey(); err != nil {
			return err
		}
		a.chainCfg = &cc
	}
	return nil
}

// Start opens (or joins, across reloads) one worker per sink, and the
// chain, which records its chain_start when it is new.
func (a *App) Start() error { return a.start() }

// start runs once per config, from Start or from the first event
// recorded before it: Caddy starts apps in no fixed order, so the HTTP
// app may serve requests before this app's Start.
func (a *App) start() error {
	st := a.starting
	if st == nil {
		return nil
	}
	st.once.Do(func() {
		st.err = a.open()
		st.done.Store(true)
	})
	return st.err
}

// started reports whether start has run (one atomic load: the request
// path calls it).
func (a *App) started() bool { return a.starting == nil || a.starting.done.Load() }

func (a *App) open() error {
	for _, p := range a.plans {
		v, _, err := workerPool.LoadOrNew(p.key, func() (caddy.Destructor, error) {
			sink, err := newSink(p)
			if err != nil {
				return nil, err
			}
			w, err := newWorker(p.wc, sink, a.logger.Named("sink"))
			if err != nil {
				sink.Close()
				return nil, err
			}
			return pooledWorker{w}, nil
		})
		if err != nil {
			return fmt.Errorf("sink %s: %w", p.wc.Name, err)
		}
		a.keys = append(a.keys, p.key)
		a.workers = append(a.workers, v.(pooledWorker).worker)
		if p.wc.OnFull == onFullReject {
			a.rejecting = append(a.rejecting, v.(pooledWorker).worker)
		}
	}
	if a.chainCfg != nil {
		c, key, err := acquireChain(*a.chainCfg, a.workers, a.logger.Named("chain"))
		if err != nil {
			return err
		}
		a.chain, a.chainKey = c, key
	}
	return nil
}

func (a *App) workerConfig(sc SinkConfig, name string) workerConfig {
	wc := workerConfig{
		Name: name, Type: sc.Type,
		QueueSize:       a.QueueSize,
		BatchSize:       sc.BatchSize,
		FlushInterval:   time.Duration(sc.FlushInterval),
		BlockTimeout:    time.Duration(a.BlockTimeout),
		MaxRetries:      sc.MaxRetries,
		ShutdownTimeout: time.Duration(a.ShutdownTimeout),
		Disk:            a.Durability == durabilityDisk,
		SyncInterval:    time.Duration(a.SyncInterval),
		SpoolMaxSize:    a.SpoolMaxSize,
		OnFull:          sc.OnFull,
		AlertAfter:      time.Duration(a.AlertAfter),
	}
	if sc.QueueSize > 0 {
		wc.QueueSize = sc.QueueSize
	}
	if wc.BatchSize <= 0 && sc.Type == "nats" {
		wc.BatchSize = 100
	}
	if a.SpoolDir != "" {
		wc.SpoolDir = filepath.Join(a.SpoolDir, spoolSubdir(sc))
	}
	wc.setDefaults()
	return wc
}

// spoolSubdir names a sink's spool directory from what identifies its
// destination, so that it stays the same across restarts and tuning
// changes.
func spoolSubdir(sc SinkConfig) string {
	// a nats sink's servers given as servers (not url) stand for the url,
	// so that a url keeps the spool it had before servers existed
	dest := sc.URL
	if dest == "" {
		dest = strings.Join(sc.Servers, ",")
	}
	h := sha256.Sum256([]byte(sc.Type + "\x00" + dest + "\x00" + sc.Path + "\x00" + sc.Subject + "\x00" + sc.Name))
	return sc.Type + "-" + hex.EncodeToString(h[:6])
}

func (sc SinkConfig) expand(repl *caddy.Replacer) SinkConfig {
	sc.URL = repl.ReplaceAll(sc.URL, "")
	sc.Path = repl.ReplaceAll(sc.Path, "")
	sc.Subject = repl.ReplaceAll(sc.Subject, "")
	if sc.Type == "nats" && sc.Subject == "" {
		sc.Subject = "gateway.audit"
	}
	if len(sc.Headers) > 0 {
		h := make(http.Header, len(sc.Headers))
		for k, vs := range sc.Headers {
			for _, v := range vs {
				h.Add(k, repl.ReplaceAll(v, ""))
			}
		}
		sc.Headers = h
	}
	return sc
}

func (sc SinkConfig) validate() error {
	switch sc.Type {
	case "http":
		if err := urls.CheckHTTP("http sink url", sc.URL); err != nil {
			return err
		}
	case "nats":
		if strings.TrimSpace(sc.URL) == "" && len(sc.Servers) == 0 {
			return errors.New("nats sink needs a server url")
		}
		if strings.ContainsAny(sc.Subject, " \t*>") {
			return fmt.Errorf("invalid nats subject %q: must not contain spaces or wildcards", sc.Subject)
		}
	case "file":
		if sc.Path == "" {
			return errors.New("file sink needs a path")
		}
	default:
		return fmt.Errorf("invalid sink type %q: must be http, nats or file", sc.Type)
	}
	if err := checkDurations(namedDuration{"flush_interval", sc.FlushInterval}, namedDuration{"timeout", sc.Timeout}); err != nil {
		return err
	}
	switch {
	case sc.BatchSize < 0:
		return fmt.Errorf("invalid batch_size %d: must be positive", sc.BatchSize)
	case sc.MaxRetries < 0:
		return fmt.Errorf("invalid max_retries %d: must be 0 (forever) or positive", sc.MaxRetries)
	case sc.QueueSize < 0:
		return fmt.Errorf("invalid queue_size %d: must be positive", sc.QueueSize)
	}
	switch sc.OnFull {
	case "", onFullBlock, onFullDropOldest, onFullReject:
	default:
		return fmt.Errorf("invalid on_full %q: must be block, drop_oldest or reject", sc.OnFull)
	}
	return nil
}

func (sc SinkConfig) defaultName() string {
	if sc.Name != "" {
		return sc.Name
	}
	switch sc.Type {
	case "file":
		return "file:" + sc.Path
	case "nats":
		first := ""
		if servers := natsconn.SplitServers(append([]string{sc.URL}, sc.Servers...)...); len(servers) > 0 {
			first = servers[0]
		}
		return "nats:" + urls.Redact(first) + "/" + sc.Subject
	}
	return sc.Type + ":" + urls.Redact(sc.URL)
}

// natsOptions are a nats sink's connection: its url and servers, the
// connection block's settings, and its name (when set) as client name.
func (sc SinkConfig) natsOptions(repl *caddy.Replacer) (natsconn.Options, error) {
	c := sc.Config
	c.Servers = append([]string{sc.URL}, c.Servers...)
	c.Name = sc.Name
	return c.Options(repl)
}

// newSink opens p's sink; the app's node goes in NATS message ids.
func newSink(p sinkPlan) (Sink, error) {
	sc := p.sc
	switch sc.Type {
	case "http":
		return newHTTPSink(sc.URL, sc.Headers, time.Duration(sc.Timeout)), nil
	case "nats":
		return newNATSSink(p.nats, p.node, sc.Subject, sc.JetStream, sc.Stream, time.Duration(sc.Timeout))
	case "file":
		return newFileSink(sc.Path)
	}
	return nil, fmt.Errorf("invalid sink type %q", sc.Type)
}

type namedDuration struct {
	name string
	d    caddy.Duration
}

// checkDurations returns an error naming the first negative duration.
func checkDurations(ds ...namedDuration) error {
	for _, nd := range ds {
		if nd.d < 0 {
			return fmt.Errorf("invalid %s %q: must be positive", nd.name, time.Duration(nd.d))
		}
	}
	return nil
}

// Validate checks the app-level settings.
func (a *App) Validate() error {
	durations := []namedDuration{{"block_timeout", a.BlockTimeout}, {"shutdown_timeout", a.ShutdownTimeout},
		{"sync_interval", a.SyncInterval}, {"alert_after", a.AlertAfter}}
	if a.Chain != nil {
		durations = append(durations, namedDuration{"checkpoint_interval", a.Chain.CheckpointInterval})
	}
	if err := checkDurations(durations...); err != nil {
		return err
	}
	switch {
	case a.QueueSize < 0:
		return fmt.Errorf("invalid queue_size %d: must be positive", a.QueueSize)
	case a.SpoolMaxSize < 0:
		return fmt.Errorf("invalid spool_max_size %d: must be positive", a.SpoolMaxSize)
	case a.SpoolMaxSize > 0 && a.SpoolDir == "":
		return errors.New("spool_max_size needs spool_dir")
	case a.Chain != nil && a.Chain.KeyFile == "":
		return errors.New("chain needs an Ed25519 private key file")
	}
	switch a.Durability {
	case "", durabilityMemory:
	case durabilityDisk:
		if a.SpoolDir == "" {
			return errors.New("durability disk needs spool_dir: the directory the events are written to")
		}
	default:
		return fmt.Errorf("invalid durability %q: must be memory or disk", a.Durability)
	}
	return nil
}

// durability modes.
const (
	durabilityMemory = "memory"
	durabilityDisk   = "disk"
)

// Stop is a no-op: requests may still be finishing while the HTTP app
// stops, so the sinks are released in Cleanup, after every app stopped.
func (a *App) Stop() error { return nil }

// Cleanup releases this config's sinks; a sink no longer used by any
// config delivers what it holds (within shutdown_timeout), spools or
// counts the rest, and stops.
func (a *App) Cleanup() error {
	if a.chainKey != "" {
		// The last config using the chain records its final checkpoint
		// while the sinks still run.
		if _, err := chains.Delete(a.chainKey); err != nil {
			a.logger.Error("ending audit chain", zap.Error(err))
		}
		a.chainKey = ""
	}
	for _, k := range a.keys {
		if _, err := workerPool.Delete(k); err != nil {
			a.logger.Error("stopping audit sink", zap.Error(err))
		}
	}
	// a.workers stays: requests of this config that are still running
	// (streams kept open across the reload) record through it, and a
	// stopped worker passes their events to its successor.
	a.keys = nil
	return nil
}

// Record hands ev to every sink (copying it) and to the Recent ring.
func (a *App) Record(ev *Event) {
	if ev.Node == "" && ev.Kind == "" {
		ev.Node = a.Node
	}
	remember(ev)
	if !a.started() {
		if err := a.start(); err != nil {
			a.logger.Error("audit event not recorded: the audit app did not start",
				zap.String("request_id", ev.RequestID), zap.Error(err))
			return
		}
	}
	if a.chain != nil {
		a.chain.record(ev, a.workers)
		return
	}
	for _, w := range a.workers {
		w.Enqueue(ev)
	}
}

// full returns the first sink with on_full reject that has no room.
func (a *App) full() *worker {
	if !a.started() && a.start() != nil {
		return nil
	}
	for _, w := range a.rejecting {
		if w.isFull() {
			return w
		}
	}
	return nil
}

// Handler records an audit event for every request that passes through it,
// after the rest of the chain has answered (denials included).
type Handler struct {
	// Route names the route in events.
	Route string `json:"route,omitempty"`
	// RequestIDHeader, when set, records this request header's value (as
	// the client or a proxy in front sent it) in the event's
	// client_request_id field, for correlation. The event's request_id is
	// always the gateway's own, Caddy's {http.request.uuid}: a client
	// cannot choose it, so it cannot make two requests one event.
	RequestIDHeader string `json:"request_id_header,omitempty"`
	// IncludeHeaders, IncludeClaims and IncludeQuery add request headers
	// (as the client sent them), claims of the verified token and query
	// parameters to the event, under "extra". Values are cut at 4 KiB.
	IncludeHeaders []Include `json:"include_headers,omitempty"`
	IncludeClaims  []Include `json:"include_claims,omitempty"`
	IncludeQuery   []Include `json:"include_query,omitempty"`
	// RedactHeaders are headers whose values are never recorded, besides
	// Authorization, Cookie and Proxy-Authorization (always).
	RedactHeaders []string `json:"redact_headers,omitempty"`

	app    *App
	extra  *extraSpec
	logger *zap.Logger
	// errorChains holds each server's error routes (handle_errors),
	// compiled once: *caddyhttp.Server -> caddyhttp.Handler.
	errorChains *sync.Map
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.audit", New: func() caddy.Module { return new(Handler) }}
}

// Provision finds the audit app (loading an empty one when the config has
// none, in which case events only reach Recent).
func (h *Handler) Provision(ctx caddy.Context) error {
	v, err := ctx.App("audit")
	if err != nil {
		return fmt.Errorf("loading audit app: %w", err)
	}
	h.app = v.(*App)
	h.logger = ctx.Logger()
	h.errorChains = new(sync.Map)
	if h.extra, err = h.provisionExtra(); err != nil {
		return err
	}
	if h.extra.empty() {
		h.extra = nil
	}
	if len(h.app.Sinks) == 0 {
		ctx.Logger().Warn("audit handler used but the audit app has no sink; events are not delivered anywhere")
	}
	return nil
}

// RequestFieldEdits reports that ServeHTTP changes no request header field
// (fieldedits.Declarer): it only reads them.
func (h *Handler) RequestFieldEdits() []string { return nil }

// ServeHTTP runs the chain, then records the event.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.app.rejects {
		if full := h.app.full(); full != nil {
			return full.reject(w, r)
		}
	}
	start := time.Now()
	// What the client sent: handlers further down (strip_prefix, uri,
	// rewrite) change the request in place.
	method, host, path := r.Method, r.Host, r.URL.Path
	var extra Fields
	if h.extra != nil {
		extra = h.extra.fromRequest(r)
	}
	rec := &recorder{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	err := next.ServeHTTP(rec, r)
	status := rec.status
	if err != nil {
		status = errorStatus(err)
		var handled bool
		if handled, err = h.runErrorRoutes(rec, r, err); handled && rec.status != 0 {
			// what the error routes answered
			status = rec.status
		}
	}
	if status == 0 {
		status = http.StatusOK
	}
	ev := Event{
		Time:       start,
		Route:      h.Route,
		Method:     method,
		Host:       host,
		Path:       path,
		Status:     status,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
		BytesOut:   rec.bytes,
		Roles:      identity.Roles(r),
	}
	if h.RequestIDHeader != "" {
		// Recorded for correlation, never the event's id: a client
		// that repeats an id must not make its events look like
		// retries of one (JetStream would store them once).
		ev.ClientRequestID = clip(r.Header.Get(h.RequestIDHeader))
	}
	// Already generated (and put in the access log) by an earlier
	// {http.request.uuid}: read it without the replacer's log-field
	// bookkeeping.
	if id, ok := caddyhttp.GetVar(r.Context(), "uuid").(fmt.Stringer); ok {
		ev.RequestID = id.String()
	}
	if ev.RequestID == "" {
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			ev.RequestID, _ = repl.GetString("http.request.uuid")
		}
	}
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		ev.RemoteIP = ip
	} else if host, _, serr := net.SplitHostPort(r.RemoteAddr); serr == nil {
		ev.RemoteIP = host
	} else {
		ev.RemoteIP = r.RemoteAddr
	}
	id, _ := identity.FromRequest(r)
	if id != nil {
		ev.Subject, ev.Auth, ev.CredentialID = id.Subject, id.Method, id.CredentialID
		if id.Method == identity.MethodOIDCSession {
			ev.AuthSource = identity.MethodOIDCSession
		}
	}
	ev.Decision, ev.Reason, ev.DecidedBy = decide(r, status, id)
	ev.PermissionCache = identity.PermissionCache(r)
	ev.Plan = identity.PlanOf(r)
	ev.OpenAPIViolation = identity.OpenAPIViolationOf(r)
	if h.extra != nil {
		ev.Extra = h.extra.addClaims(extra, r).sorted()
	}
	h.app.Record(&ev)
	return err
}

// errorStatus is the status Caddy answers an error with.
func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// runErrorRoutes answers err with the server's error routes (a site's
// handle_errors) through rec, as Caddy's server would once the error had
// left the handler chain, so that the event counts the bytes they write
// (the body of a denial restyled by handle_errors) and has the status
// they answer. It reports whether the server has error routes; when it
// does the error is answered here and it returns a nil error, so the
// server does not answer it a second time. A server without error routes
// writes no body for an error: err is returned for the server to answer.
//
// What Caddy's server does before its error routes is done here too: the
// error on the request (caddyhttp.HTTPErrorConfig.WithError, with the
// {http.error.*} placeholders), and the method and URI the client sent
// put back on the request (handlers such as rewrite change them in place;
// the server does this after the handlers too); an error from the
// error routes themselves is logged and answered with err's status. (A
// JSON config's subroute with its own errors, between the server and this
// handler, has answered its errors before they reach it.)
func (h *Handler) runErrorRoutes(rec *recorder, r *http.Request, err error) (bool, error) {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil || srv.Errors == nil || len(srv.Errors.Routes) == 0 {
		return false, err
	}
	// in place, as the server does: the placeholders ({uri}, {method})
	// read this request
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil && r.URL != nil {
		r.Method, r.RemoteAddr, r.RequestURI = orig.Method, orig.RemoteAddr, orig.RequestURI
		*r.URL = *orig.URL
	}
	er := srv.Errors.WithError(r, err)
	if err2 := h.errorChain(srv).ServeHTTP(rec, er); err2 != nil {
		h.logger.Error("error handling handler error", zap.Error(err2), zap.String("first_error", err.Error()),
			zap.String("method", er.Method), zap.String("uri", er.RequestURI))
		if rec.status == 0 {
			rec.WriteHeader(errorStatus(err))
		}
	}
	return true, nil
}

// errorChain returns srv's error routes, compiled once per server.
func (h *Handler) errorChain(srv *caddyhttp.Server) caddyhttp.Handler {
	if h.errorChains == nil { // a Handler made without Provision
		return srv.Errors.Routes.Compile(errorRoutesEnd)
	}
	if c, ok := h.errorChains.Load(srv); ok {
		return c.(caddyhttp.Handler)
	}
	c, _ := h.errorChains.LoadOrStore(srv, srv.Errors.Routes.Compile(errorRoutesEnd))
	return c.(caddyhttp.Handler)
}

// errorRoutesEnd ends the error routes as Caddy's own end of them does: a
// request no error route answered gets the error's status.
var errorRoutesEnd caddyhttp.Handler = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	err, _ := r.Context().Value(caddyhttp.ErrorCtxKey).(error)
	w.WriteHeader(errorStatus(err))
	return nil
})

// The decisions of events.
const (
	DecisionAllow     = "allow"
	DecisionDeny      = "deny"
	DecisionWouldDeny = "would_deny"
)

// decide derives the decision, the reason and decided_by from what the
// duties recorded (identity.Denial, WouldDeny, DecidedBy) and the status:
//   - a recorded denial: deny, its reason, the denying duty and rule;
//   - 429, 401, 403 with none recorded (rate_limit, an upstream): deny, a
//     reason from the status, no decided_by (no duty named itself);
//   - a recorded would-be denial (dry run): would_deny, its reason and
//     the duty and rule that would have denied (the first one);
//   - else allow, decided_by the last duty that allowed: the last one that
//     recorded itself (rbac, permission), else the identity source that
//     set the identity (jwt_auth, api_key, client_cert_auth), else none.
func decide(r *http.Request, status int, id *identity.Identity) (decision, why, decidedBy string) {
	by, reason := identity.Denial(r)
	switch {
	case by != "" || reason != "":
		if reason == "" {
			reason = by
		}
		decidedBy = identity.DecidedBy(r)
		if decidedBy == "" {
			decidedBy = by
		}
		return DecisionDeny, reason, decidedBy
	case status == http.StatusTooManyRequests:
		return DecisionDeny, "rate limited", ""
	case status == http.StatusUnauthorized:
		return DecisionDeny, "unauthorized", ""
	case status == http.StatusForbidden:
		return DecisionDeny, "forbidden", ""
	}
	if wby, wreason := identity.WouldDeny(r); wby != "" {
		return DecisionWouldDeny, wreason, wby
	}
	if decidedBy = identity.DecidedBy(r); decidedBy == "" && id != nil {
		decidedBy = identitySource(id.Method)
	}
	return DecisionAllow, "", decidedBy
}

// identitySource returns the module that sets identities of a method.
func identitySource(method string) string {
	switch method {
	case identity.MethodJWT:
		return "jwt_auth"
	case identity.MethodAPIKey:
		return "api_key"
	case identity.MethodClientCert:
		return "client_cert_auth"
	case identity.MethodOIDCSession:
		return "oidc_login"
	}
	return ""
}

// recorder notes the status and the body size of a response.
type recorder struct {
	caddyhttp.ResponseWriterWrapper
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.status = code
	}
	r.ResponseWriterWrapper.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriterWrapper.Write(b)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom keeps the sendfile fast path of the wrapped writer while
// counting bytes.
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriterWrapper.ReadFrom(src)
	r.bytes += n
	return n, err
}

// Interface guards
var (
	_ caddy.App                   = (*App)(nil)
	_ caddy.Provisioner           = (*App)(nil)
	_ caddy.Validator             = (*App)(nil)
	_ caddy.CleanerUpper          = (*App)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ fieldedits.Declarer         = (*Handler)(nil)
)
