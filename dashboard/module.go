// Package dashboard is the gateway's dashboard: what is routed, with which
// duties, which containers discovery rejected and why, and how the duties
// are doing right now. It serves a small embedded web page and its JSON
// documents on Caddy's admin API (module admin.api.gateway, under
// /gateway/), and optionally on a site route (handler gateway_dashboard),
// where jwt_auth and rbac can protect it.
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/adminaddr"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
	caddy.RegisterModule(Handler{})
}

// AdminPath is where the admin module serves the dashboard's JSON
// documents: /gateway/overview, /gateway/routes, /gateway/containers,
// /gateway/counters and /gateway/events.
const AdminPath = "/gateway"

// AdminAPI is the admin.api.gateway module: the dashboard's JSON documents
// on Caddy's admin endpoint (localhost:2019 by default), protected like the
// rest of the admin API. Admin modules take no configuration.
//
// The page itself is not served here: Caddy's admin endpoint refuses
// requests that browsers make (a navigation carries Sec-Fetch-Mode but no
// Origin, which the admin API answers with 403; scripts and stylesheets are
// fetched in no-cors mode, which it answers with 400). The page is served by
// the gateway_dashboard handler on a site, bound to localhost or behind
// jwt_auth and rbac.
type AdminAPI struct {
	srv *Server
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.gateway",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision prepares the sources; nothing is read until a request comes.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.srv = &Server{Refresh: time.Second}
	own, ownErr := configAdmin(ctx, "")
	a.srv.Sources = caddySources(func(ctx context.Context) (adminaddr.Endpoint, error) {
		if ep, ok := ctx.Value(adminEndpointKey{}).(adminaddr.Endpoint); ok {
			return ep, nil // the one the request came in on
		}
		return own, ownErr
	})
	return nil
}

// configAdmin is the admin endpoint the dashboard reads routes from:
// override, else the admin address of the config that ctx provisions. An
// error (the config turns the admin API off) is reported when routes are
// read, not at load: the rest of the dashboard works without them.
func configAdmin(ctx caddy.Context, override string) (adminaddr.Endpoint, error) {
	ep, err := adminaddr.For(ctx, override, ctx.Logger())
	if errors.Is(err, adminaddr.ErrDisabled) {
		return ep, fmt.Errorf("the dashboard reads routes through the admin API, but %w", err)
	}
	return ep, err
}

type adminEndpointKey struct{}

// Routes returns the dashboard's admin routes.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{
		Pattern: AdminPath + "/",
		Handler: caddy.AdminHandlerFunc(a.serve),
	}}
}

func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	if ep, ok := requestAdminEndpoint(r); ok {
		r = r.WithContext(context.WithValue(r.Context(), adminEndpointKey{}, ep))
	}
	rel := strings.TrimPrefix(r.URL.Path, AdminPath)
	switch rel {
	case "/overview", "/routes", "/containers", "/counters", "/events", "/openapi":
		a.srv.Serve(w, r, "/api"+rel)
		return nil
	case "", "/":
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("the dashboard page is not served on the admin API, which refuses browsers: put the gateway_dashboard handler on a site bound to localhost (see docs/dashboard.md); JSON documents here: %s/overview, /routes, /containers, /counters, /events, /openapi", AdminPath)}
	}
	return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no dashboard document at %s (try %s/overview)", r.URL.Path, AdminPath)}
}

// Handler is the http.handlers.gateway_dashboard module: the same page and
// JSON on a site route, so it can sit behind jwt_auth and rbac. It answers
// requests under Path and passes the others on.
type Handler struct {
	// Path is the URL path prefix the dashboard is served under, as the
	// request reaches this handler (after any handle_path stripping).
	// Default: "/" (everything that reaches the handler).
	Path string `json:"path,omitempty"`

	// Refresh is how often the page polls for new data. Default: 1s.
	Refresh caddy.Duration `json:"refresh,omitempty"`

	// Admin is the address of Caddy's admin API, which the dashboard reads
	// the routes from, as in the `admin` global option. Default: this
	// config's own admin address (its `admin` global option; Caddy's
	// default when it has none).
	Admin string `json:"admin,omitempty"`

	srv *Server
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gateway_dashboard",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets defaults.
func (h *Handler) Provision(ctx caddy.Context) error {
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Refresh == 0 {
		h.Refresh = caddy.Duration(time.Second)
	}
	if err := h.Validate(); err != nil {
		return err
	}
	h.srv = &Server{Refresh: time.Duration(h.Refresh)}
	ep, err := configAdmin(ctx, h.Admin)
	if err != nil && !errors.Is(err, adminaddr.ErrDisabled) {
		return fmt.Errorf("gateway_dashboard: invalid admin: %v", err)
	}
	h.srv.Sources = caddySources(func(context.Context) (adminaddr.Endpoint, error) { return ep, err })
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if !strings.HasPrefix(h.Path, "/") {
		return fmt.Errorf("gateway_dashboard: invalid path %q: must start with /", h.Path)
	}
	if strings.ContainsAny(h.Path, "*?#") {
		return fmt.Errorf("gateway_dashboard: invalid path %q: a plain path prefix, without wildcards", h.Path)
	}
	if h.Refresh < 0 || (h.Refresh > 0 && time.Duration(h.Refresh) < 100*time.Millisecond) {
		return fmt.Errorf("gateway_dashboard: invalid refresh %q: must be at least 100ms", time.Duration(h.Refresh))
	}
	return nil
}

// ServeHTTP serves the dashboard under Path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	base := strings.TrimSuffix(h.Path, "/")
	p := r.URL.Path
	if base != "" && p == base {
		// The page uses relative URLs: it must be served at base + "/".
		target := originalPath(r) + "/"
		http.Redirect(w, r, target, http.StatusFound)
		return nil
	}
	if base != "" && !strings.HasPrefix(p, base+"/") {
		return next.ServeHTTP(w, r)
	}
	if !h.srv.Serve(w, r, strings.TrimPrefix(p, base)) {
		return next.ServeHTTP(w, r)
	}
	return nil
}

func originalPath(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		return strings.TrimSuffix(orig.URL.Path, "/")
	}
	return strings.TrimSuffix(r.URL.Path, "/")
}

// Interface guards
var (
	_ caddy.AdminRouter           = (*AdminAPI)(nil)
	_ caddy.Provisioner           = (*AdminAPI)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
