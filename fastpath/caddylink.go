package fastpath

import (
	_ "unsafe" // go:linkname

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// The one place the fast path reaches into Caddy's unexported code. The
// plan proxies with reverse_proxy's own upstreams, and the state Caddy
// keeps about them (requests in flight per host, recent failures,
// in-flight counts for the admin API, dynamic hosts) is only written by
// these unexported functions of the pinned Caddy (v2.11.9). Calling them,
// rather than keeping a copy of that state, keeps one count that both
// paths update and that Caddy's selection policies, health checks and
// admin API read. TestCaddyInternals fails when an update of Caddy changes
// any of them (the build fails first when a name goes away).

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
