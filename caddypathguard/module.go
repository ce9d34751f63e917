// Package caddypathguard is a Caddy HTTP handler that keeps the path an
// upstream receives the one the gateway's matchers judged.
//
// Caddy's path matchers decode and clean the path they match on, but
// reverse_proxy forwards the path as the client wrote it, and the service
// behind re-derives its own: a servlet container drops ";..." from each
// segment, IIS reads "\" as "/", some applications decode twice, some
// stop at a NUL. A request for "/public/..;/admin/x" then passes the
// open /public route's (absent) duties and is served as /admin/x.
// path_guard refuses such request targets (reject, the default), or
// forwards the path the matchers saw (normalize). The rules are in
// pathguard.go, which imports nothing of Caddy.
package caddypathguard

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
)

func init() {
	caddy.RegisterModule(PathGuard{})
}

// The modes of path_guard.
const (
	// ModeReject answers 400 for a path that is not normal.
	ModeReject = "reject"
	// ModeNormalize forwards the normalized path; what it cannot
	// normalize safely is refused as in reject.
	ModeNormalize = "normalize"
)

// ErrorCode is the "error" of path_guard's 400: {"error":"ambiguous_path"}.
const ErrorCode = "ambiguous_path"

// PathGuard refuses request paths that the services behind the gateway
// could read differently from the gateway's matchers, or rewrites them
// to the form the matchers saw. Every refusal is a 400 through the
// gateway's denial (a site's handle_errors can restyle it; otherwise the
// JSON {"error":"ambiguous_path","reason":...}), recorded for audit with
// decided_by "path_guard".
type PathGuard struct {
	// Mode is "reject" (the default) or "normalize". reject answers 400
	// for dot segments (plain or percent-encoded), dot segments with ";"
	// parameters, backslashes (and %5C), encoded slashes (%2F), double
	// encodings of those (%252e), NUL and other control bytes, invalid
	// or overlong UTF-8, and Unicode look-alikes of "/", "\" and dot
	// segments. normalize resolves dot segments (RFC 3986 5.2.4), merges
	// slashes and decodes percent-encoded unreserved characters, and
	// forwards that path; the rest is refused as in reject.
	Mode string `json:"mode,omitempty"`

	// KeepEncodedSlash lets %2F stand inside a segment, for APIs that
	// use it ("/projects/group%2Fproject"), as long as the parts it
	// separates are ordinary segments (not empty, not dot segments).
	KeepEncodedSlash bool `json:"keep_encoded_slash,omitempty"`

	// RejectParams refuses ";" parameters on any segment, not only on dot
	// segments: a servlet container (Tomcat, Spring) reads "/admin;x/y" as
	// "/admin/y", which a route for "/admin/*" does not match.
	RejectParams bool `json:"reject_params,omitempty"`

	rules     Rules
	normalize bool
	logger    *zap.Logger
	counters  counters
}

// decider is path_guard's decided_by: the module alone.
var decider = identity.NewDecider("path_guard", "")

// CaddyModule returns the Caddy module information.
func (PathGuard) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.path_guard",
		New: func() caddy.Module { return new(PathGuard) },
	}
}

// Provision sets the default mode and registers the metric.
func (h *PathGuard) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Mode == "" {
		h.Mode = ModeReject
	}
	h.setup()
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	h.counters = newCounters()
	return nil
}

func (h *PathGuard) setup() {
	h.rules = Rules{KeepEncodedSlash: h.KeepEncodedSlash, RejectParams: h.RejectParams}
	h.normalize = h.Mode == ModeNormalize
}

// Validate checks the mode.
func (h *PathGuard) Validate() error {
	switch h.Mode {
	case "", ModeReject, ModeNormalize:
		return nil
	}
	return fmt.Errorf("invalid mode %q: must be %s or %s", h.Mode, ModeReject, ModeNormalize)
}

// ServeHTTP passes a normal path on, normalizes it (normalize mode) or
// answers 400.
func (h *PathGuard) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	u := r.URL
	if !h.normalize {
		if reason := h.rules.CheckURL(u.RawPath, u.Path); reason != "" {
			return h.reject(w, r, reason)
		}
		h.counters.passed.Inc()
		return next.ServeHTTP(w, r)
	}
	out, decoded, changed, reason := h.rules.NormalizeURL(u.RawPath, u.Path)
	if reason != "" {
		return h.reject(w, r, reason)
	}
	if !changed {
		h.counters.passed.Inc()
		return next.ServeHTTP(w, r)
	}
	if decoded {
		u.Path, u.RawPath = out, ""
	} else if path, err := url.PathUnescape(out); err == nil {
		// (out is p's own escapes, some decoded: always valid)
		u.Path, u.RawPath = path, out
		if (&url.URL{Path: path}).EscapedPath() == out {
			u.RawPath = "" // the default encoding: no RawPath, as net/url has it
		}
	} else {
		return h.reject(w, r, ReasonEscape)
	}
	// As Caddy's rewrite handler does: the request line the chain and
	// the logs see follows the URL (reverse_proxy sends URL.EscapedPath).
	r.RequestURI = u.RequestURI()
	h.counters.normalized.Inc()
	if ce := h.logger.Check(zapcore.DebugLevel, "path normalized"); ce != nil {
		ce.Write(zap.String("path", u.Path))
	}
	return next.ServeHTTP(w, r)
}

// reject records the denial for audit and answers 400 (see deny.Respond).
func (h *PathGuard) reject(w http.ResponseWriter, r *http.Request, reason string) error {
	h.counters.rejected.Inc()
	identity.SetDenialBy(r, decider, reason)
	if ce := h.logger.Check(zapcore.DebugLevel, "ambiguous path refused"); ce != nil {
		ce.Write(zap.String("reason", reason), zap.String("uri", r.RequestURI))
	}
	return deny.Respond(w, r, http.StatusBadRequest, ErrorCode, reason)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*PathGuard)(nil)
	_ caddy.Validator             = (*PathGuard)(nil)
	_ caddyhttp.MiddlewareHandler = (*PathGuard)(nil)
)
