// Package caddyready is the gateway's readiness handler, gateway_ready:
// the answer a load balancer's health check reads to decide whether to send
// this gateway new connections.
package caddyready

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/runningconfig"
)

func init() {
	caddy.RegisterModule(Ready{})
}

// Readier is implemented by an app of the config whose work must be done
// before the gateway takes traffic: the docker app is not ready until its
// discovered routes are loaded. reason says what is missing.
type Readier interface {
	Ready() (ready bool, reason string)
}

// appsAsked are the apps gateway_ready asks, when the config has them.
var appsAsked = []string{"docker"}

// Ready is the `gateway_ready` handler. It answers 200 {"status":"ready"}
// while the gateway is ready, and 503 with Retry-After while it is not:
//
//   - starting: the config has not finished starting, or an app of it is
//     not ready yet (the docker app until its discovered routes are
//     loaded: the state file's, or the engine's first listing). Caddy
//     starts a config's apps one by one, in no fixed order, and a server
//     takes requests as soon as the http app has started: until every app
//     has started (the tls app manages its certificates, the other
//     servers listen) and Caddy runs the config, the answer is 503. At a
//     reload, the new config's servers answer so until it replaces the
//     old one;
//   - shutting down: from the moment the process begins to exit (SIGTERM,
//     `caddy stop`), and while a server's listener is closing after a
//     reload, for the whole of Caddy's `shutdown_delay`, during which the
//     server goes on serving every other request. A load balancer that
//     checks this route stops sending new connections before the listener
//     closes.
//
// The body is JSON: {"status":"ready"}, {"status":"starting","reason":..}
// or {"status":"shutting_down"}; a HEAD request gets the status alone.
type Ready struct {
	readiers []namedReadier
	// started reports whether this handler's config has started: Caddy
	// ran it (every app of it started) at some point, so that it stays
	// started after a reload replaced it, while its servers close.
	started func() bool
}

type namedReadier struct {
	app string
	r   Readier
}

// CaddyModule returns the Caddy module information.
func (Ready) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gateway_ready",
		New: func() caddy.Module { return new(Ready) },
	}
}

// Provision finds the apps of this config that hold readiness back.
func (h *Ready) Provision(ctx caddy.Context) error {
	running := runningconfig.Check(ctx)
	var started atomic.Bool
	h.started = func() bool {
		if !started.Load() && running() {
			started.Store(true)
		}
		return started.Load()
	}
	for _, name := range appsAsked {
		app, err := ctx.AppIfConfigured(name)
		if errors.Is(err, caddy.ErrNotConfigured) {
			continue
		}
		if err != nil {
			return err
		}
		if r, ok := app.(Readier); ok {
			h.readiers = append(h.readiers, namedReadier{name, r})
		}
	}
	return nil
}

// ServeHTTP answers the readiness of the gateway.
func (h *Ready) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	st := h.state(r)
	if st.Status != statusReady {
		w.Header().Set("Retry-After", strconv.Itoa(st.retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusOK
	if st.Status != statusReady {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	if r.Method == http.MethodHead {
		return nil
	}
	b, _ := json.Marshal(st)
	_, err := w.Write(append(b, '\n'))
	return err
}

const (
	statusReady        = "ready"
	statusStarting     = "starting"
	statusShuttingDown = "shutting_down"
)

// state is the answer's body.
type state struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`

	retryAfter int
}

func (h *Ready) state(r *http.Request) state {
	if caddy.Exiting() {
		return state{Status: statusShuttingDown, Reason: "the process is exiting", retryAfter: 1}
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if down, _ := repl.Get("http.shutting_down"); down == true {
			left, _ := repl.Get("http.time_until_shutdown")
			return state{Status: statusShuttingDown, Reason: "the listener closes after shutdown_delay", retryAfter: retrySeconds(left)}
		}
	}
	if !h.started() {
		return state{Status: statusStarting, Reason: "the config has not finished starting", retryAfter: 1}
	}
	for _, nr := range h.readiers {
		if ok, why := nr.r.Ready(); !ok {
			return state{Status: statusStarting, Reason: nr.app + ": " + why, retryAfter: 1}
		}
	}
	return state{Status: statusReady}
}

// retrySeconds is Retry-After for the time until the listener closes
// (whole seconds, at least 1).
func retrySeconds(left any) int {
	d, ok := left.(time.Duration)
	if !ok || d <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(d.Seconds())))
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Ready)(nil)
	_ caddyhttp.MiddlewareHandler = (*Ready)(nil)
)
