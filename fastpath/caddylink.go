package fastpath

import (
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe" // go:linkname

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap/zapcore"
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

// inFlightRequests is the table incInFlightRequest and decInFlightRequest
// keep (address -> *atomic.Int64), which the admin API reads.
//
//go:linkname inFlightRequests github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.inFlightRequests
var inFlightRequests sync.Map

// incInFlight is incInFlightRequest without its allocation when the
// address has requests in flight already (Caddy's makes a counter for
// LoadOrStore on every call): under load the entry is there.
func incInFlight(address string) {
	if v, ok := inFlightRequests.Load(address); ok {
		if c, ok := v.(*atomic.Int64); ok {
			c.Add(1)
			return
		}
	}
	incInFlightRequest(address)
}

//go:linkname decInFlightRequest github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy.decInFlightRequest
func decInFlightRequest(address string)

// decInFlight is decInFlightRequest, except that the entry of a static
// upstream (keep) stays in the table at zero: Caddy's deletes it, so the
// next request made a new counter and a new table entry (two allocations
// per request on a connection whose requests come one at a time). The
// admin API lists an address only while its count is above zero, and the
// static upstreams are few, so a kept entry changes nothing else.
func decInFlight(address string, keep bool) {
	if !keep {
		decInFlightRequest(address)
		return
	}
	if v, ok := inFlightRequests.Load(address); ok {
		if c, ok := v.(*atomic.Int64); ok {
			c.Add(-1)
		}
	}
}

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

// Whether a request comes from a trusted proxy, and the client's address
// it names (trusted_proxies, client_ip_headers, trusted_proxies_strict,
// trusted_proxies_unix): Caddy's prepareRequest decides it per request
// with this function, and so does the plan, so that {client_ip}, the
// client_ip matcher, X-Forwarded-* and everything keyed on the client's
// address are the same on both paths.

//go:linkname determineTrustedProxy github.com/caddyserver/caddy/v2/modules/caddyhttp.determineTrustedProxy
func determineTrustedProxy(r *http.Request, s *caddyhttp.Server) (bool, string)

// hasTrustedProxies reports whether the server has trusted_proxies: its
// provisioned IP source (Caddy clears TrustedProxiesRaw once it loaded
// the module, so the raw config cannot tell). A server whose field cannot
// be read is treated as having one (the decision is then made per request,
// as Caddy makes it). TestCaddyInternals checks the field against the
// pinned Caddy.
func hasTrustedProxies(s *caddyhttp.Server) bool {
	f := reflect.ValueOf(s).Elem().FieldByName("trustedProxies")
	if !f.IsValid() || f.Kind() != reflect.Interface {
		return true
	}
	return !f.IsNil() || s.TrustedProxiesUnix
}

// extraLogFields are the fields handlers added to the request's access log
// record (log_append; caddyhttp.ExtraLogFields.Add and Set), which Caddy
// keeps in an unexported field and writes in logRequest. The plan writes
// the record itself, so it reads them. TestCaddyInternals checks the
// layout against the pinned Caddy.
func extraLogFields(e *caddyhttp.ExtraLogFields) []zapcore.Field {
	return (*struct{ fields []zapcore.Field })(unsafe.Pointer(e)).fields
}

// A request's replacer is made anew per request on Caddy's path; the plan
// keeps one per request state and resets it: the providers a request
// added (jwt_auth's claims, ...) dropped, its values (Set) cleared. Caddy
// offers no reset, so these read its fields (caddy.Replacer: providers,
// static, mapMutex, in this order). TestCaddyInternals checks them against
// the pinned Caddy.
type replacerLayout struct {
	providers []struct{ tab, data unsafe.Pointer } // []replacementProvider
	static    map[string]any
	mapMutex  *sync.RWMutex
}

// replacerProviders is how many providers r has.
func replacerProviders(r *caddy.Replacer) int {
	return len((*replacerLayout)(unsafe.Pointer(r)).providers)
}

// resetReplacer drops the providers after the first n and every value.
func resetReplacer(r *caddy.Replacer, n int) {
	l := (*replacerLayout)(unsafe.Pointer(r))
	if n <= len(l.providers) {
		clear(l.providers[n:])
		l.providers = l.providers[:n]
	}
	clear(l.static)
}
