package caddydocker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(RoutesHandler{})
}

// RoutesHandler is the `docker_routes` handler: the docker app's
// discovered routes, run where the handler stands in a server's routes.
// Placed in a site, the discovered routes run inside the site's policies
// (request_body, encode, header, basic_auth, the duties, ...), as the
// site's own routes do; a request that matches none of them goes on to
// the handlers after it, exactly as through a subroute.
//
// The handler holds no routes in the config: at every config load it runs
// the docker app's current route set, or when the process has none yet
// (a start), the state file's. So a started or restarted gateway routes
// from its first request, and any reload (`caddy reload`, POST /load)
// keeps the discovered routes. The docker app changes the route set by
// reloading the config through the admin API.
//
// While the docker app has no route set at all (no state file yet and no
// listing applied: a gateway's first start), the handler answers 503
// {"error":"discovery_starting"} with Retry-After: 1 to every request that
// reaches it, since it cannot tell yet which of them are discovered paths:
// the routes after it (a site's catch-all `respond 404`, say) would
// otherwise answer for a service that is about to be routed. Only the
// handler the docker app puts in front of a server that has none
// (PassWhileStarting) lets them through to the server's own routes, and
// the catch-all then answers for what they leave.
//
// With CatchAll set it is instead the server's last route: it answers
// 404 {"error":"no_route"}, or, while the docker app has no route set at
// all (no state file yet and no listing applied), 503
// {"error":"discovery_starting"} with Retry-After: 1. The docker app puts
// one at the end of its server's routes.
type RoutesHandler struct {
	// CatchAll makes the handler the server's catch-all route (see above).
	CatchAll bool `json:"catch_all,omitempty"`

	// PassWhileStarting lets requests through to the handlers after it
	// while the docker app has no route set yet, instead of answering 503
	// discovery_starting. The docker app sets it on the handler it puts in
	// front of a server's own routes (the default placement), so that
	// they answer during a first start; the catch-all answers the rest.
	PassWhileStarting bool `json:"pass_while_starting,omitempty"`

	sub    caddyhttp.Subroute
	ctx    caddy.Context
	server string
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (RoutesHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.docker_routes",
		New: func() caddy.Module { return new(RoutesHandler) },
	}
}

// Provision attaches the handler to this config's docker app, which gives
// it its routes (at once, or at the end of the app's own provisioning).
func (h *RoutesHandler) Provision(ctx caddy.Context) error {
	h.ctx, h.logger = ctx, ctx.Logger()
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return errors.New("docker_routes: must be in the routes of an HTTP server")
	}
	h.server = srv.Name()
	v, err := ctx.AppIfConfigured("docker")
	if errors.Is(err, caddy.ErrNotConfigured) {
		return errors.New("docker_routes: this config has no docker app: add the `docker` global option (docs/caddydocker.md)")
	}
	if err != nil {
		return fmt.Errorf("docker_routes: %w", err)
	}
	app, ok := v.(*App)
	if !ok {
		return fmt.Errorf("docker_routes: the docker app is %T", v)
	}
	return app.attach(h)
}

// ServeHTTP runs the discovered routes; a request none of them ends goes
// on to next.
func (h *RoutesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return h.sub.ServeHTTP(w, r, next)
}

// Subroute returns the routes the handler runs, provisioned. The fast
// path compiles them into its plan as it compiles a subroute.
func (h *RoutesHandler) Subroute() *caddyhttp.Subroute { return &h.sub }

// load provisions the routes the handler runs: the route set, or while it
// is not known the 503 (unless PassWhileStarting); a catch-all handler:
// its answer, by whether the route set is known. A route that
// fails to provision is left out with a logged error, so that one bad
// route never fails a config load.
func (h *RoutesHandler) load(set servingSet) {
	var raws []json.RawMessage
	switch {
	case h.CatchAll && set.known:
		raws = []json.RawMessage{noRouteRoute}
	case h.CatchAll, !set.known && !h.PassWhileStarting:
		raws = []json.RawMessage{startingRoute}
	default:
		raws = set.routes
	}
	routes := make(caddyhttp.RouteList, 0, len(raws))
	for _, raw := range raws {
		var rt caddyhttp.Route
		if err := json.Unmarshal(caddy.RemoveMetaFields(raw), &rt); err != nil {
			h.logger.Error("discovered route left out: invalid JSON", zap.String("route", RouteID(raw)), zap.Error(err))
			continue
		}
		if err := rt.Provision(h.ctx, nil); err != nil {
			h.logger.Error("discovered route left out: it does not provision", zap.String("route", RouteID(raw)), zap.Error(err))
			continue
		}
		routes = append(routes, rt)
	}
	h.sub.Routes = routes
}

// noRouteRoute and startingRoute are what the catch-all handler runs: 404
// no_route, and while the docker app has no route set yet, 503
// discovery_starting with Retry-After: 1.
var (
	noRouteRoute  = mustJSON(map[string]any{"handle": []map[string]any{problemAnswer(404, "no_route", NoRouteDetail, 0)}})
	startingRoute = mustJSON(map[string]any{"handle": []map[string]any{problemAnswer(503, "discovery_starting", DiscoveryStartingDetail, 1)}})
)

// servingSet is the route set the docker_routes handlers of one config
// load run. known is false while the docker app has none (no state file
// and no listing applied yet).
type servingSet struct {
	routes []json.RawMessage
	hash   string
	known  bool
}

// serving is what the running config of each server serves: the route
// set its docker_routes handlers loaded, and whether it has the handlers
// at all (a JSON config may have neither the routes handler nor the
// catch-all until the docker app adds them). The docker app of the config
// that started sets it (App.Start); the admin client and the status
// accessors read it.
var (
	servingMu sync.RWMutex
	serving   = map[string]servedState{}
)

type servedState struct {
	set      servingSet
	handlers int  // docker_routes handlers (not catch-all) in the server
	catchAll bool // the server ends with the catch-all handler
}

func setServed(server string, st servedState) {
	servingMu.Lock()
	serving[server] = st
	servingMu.Unlock()
}

func servedOf(server string) (servedState, bool) {
	servingMu.RLock()
	defer servingMu.RUnlock()
	st, ok := serving[server]
	return st, ok
}

// ServedRoutes returns the discovered routes the running config of server
// runs (in its docker_routes handlers), and false when the docker app
// has no route set yet. It is the read-only accessor for status pages:
// the routes are not in the config's JSON.
func ServedRoutes(server string) ([]json.RawMessage, bool) {
	st, ok := servedOf(server)
	if !ok || !st.set.known {
		return nil, false
	}
	return st.set.routes, true
}

// Interface guards
var (
	_ caddy.Provisioner           = (*RoutesHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*RoutesHandler)(nil)
)
