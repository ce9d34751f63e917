package fastpath

import (
	"net/http"
	"unsafe" // go:linkname

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// The one place the fast path reaches into Caddy's unexported code. The
// plan proxies with reverse_proxy's own upstreams, and the state Caddy
// keeps about them (requests in flight per host, recent failures,
// in-flight counts for the admin API, dynamic hosts) is only written by
// these unexported functions of the pinned Caddy (v2.11.9). Calling them,
// rather than keeping a copy of that state, keeps one count that both
// paths update and that Caddy's selection policies, health checks and
// admin API read. TestCaddyInternals (and, for the metrics route below,
// TestMetrics) fails when an update of Caddy changes what one does; the
// build fails first when a name goes away.

//go:linkname hostCountRequest github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.(*Host).countRequest
func hostCountRequest(h *reverseproxy.Host, delta int) error

//go:linkname handlerCountFailure github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.(*Handler).countFailure
func handlerCountFailure(h *reverseproxy.Handler, upstream *reverseproxy.Upstream)

//go:linkname handlerProvisionUpstream github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.Handler.provisionUpstream
func handlerProvisionUpstream(h reverseproxy.Handler, upstream *reverseproxy.Upstream, dynamic bool)

//go:linkname incInFlightRequest github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.incInFlightRequest
func incInFlightRequest(address string)

//go:linkname decInFlightRequest github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.decInFlightRequest
func decInFlightRequest(address string)

// Caddy's own HTTP metrics (the `metrics` option) are counted by a wrapper
// of each top-level route, made per request by Caddy's route chain. The
// plan makes one per route at compile time, with a "next" that resumes the
// plan, so both paths count the same series with the same code.

//go:linkname newMetricsInstrumentedRoute github.com/caddyserver/caddy/v2/modules/caddyhttp.newMetricsInstrumentedRoute
func newMetricsInstrumentedRoute(ctx caddy.Context, handler string, next caddyhttp.Handler, m *caddyhttp.Metrics) unsafe.Pointer

//go:linkname metricsRouteServeHTTP github.com/caddyserver/caddy/v2/modules/caddyhttp.(*metricsInstrumentedRoute).ServeHTTP
func metricsRouteServeHTTP(route unsafe.Pointer, w http.ResponseWriter, r *http.Request) error

// Caddy's HTTP placeholders are a replacer provider made by
// addHTTPVarsToReplacer for one request; the plan makes it once per
// request state, for the state's shadow request (refilled per request),
// instead of once per request as caddyhttp.PrepareRequest would.

//go:linkname addHTTPVarsToReplacer github.com/caddyserver/caddy/v2/modules/caddyhttp.addHTTPVarsToReplacer
func addHTTPVarsToReplacer(repl *caddy.Replacer, req *http.Request, w http.ResponseWriter)
