package fastpath

import (
	"fmt"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	maphandler "github.com/caddyserver/caddy/v2/modules/caddyhttp/map"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/rewrite"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyh1"
)

// compileServer compiles srv's routes into a plan, or says why the server
// stays on Caddy's path: the first module or option the plan does not
// support, named as the config names it.
func compileServer(ctx caddy.Context, srv *caddyhttp.Server, app *caddyhttp.App, logger *zap.Logger) (*plan, string) {
	switch {
	case srv.Logs != nil:
		return nil, "access logs (log)"
	case srv.TrustedProxiesRaw != nil:
		return nil, "trusted_proxies"
	case len(srv.ExpectedUnderscoreHeaders) > 0:
		return nil, "expected_underscore_headers"
	case len(srv.ExpectedDotHeaders) > 0:
		return nil, "expected_dot_headers"
	case srv.EnableFullDuplex:
		return nil, "enable_full_duplex"
	case srv.ReadMinRate > 0:
		return nil, "read_min_rate"
	case srv.WriteMinRate > 0:
		return nil, "write_min_rate"
	case !slices.Contains(srv.Protocols, "h1"):
		return nil, "protocols without h1"
	}
	c := compiler{ctx: ctx, logger: logger}
	p := &plan{
		srv:       srv,
		name:      srv.Name(),
		strictSNI: srv.StrictSNIHost != nil && *srv.StrictSNIHost,
		altSvc:    altSvc(srv, app),
		errLogger: caddy.Log().Named("http.log.error"),
	}
	var reason string
	if p.routes, reason = c.routes(srv.Routes); reason != "" {
		return nil, reason
	}
	if app != nil && app.Metrics != nil {
		// Caddy instruments each top-level route, named by its first
		// handler (subroutes and error routes are not instrumented).
		for i, rt := range p.routes {
			name := ""
			if hs := srv.Routes[i].Handlers; len(hs) > 0 {
				name = caddy.GetModuleName(hs[0])
			}
			rt.metrics = newMetricsInstrumentedRoute(ctx, name, metricsNext{}, app.Metrics)
		}
	}
	if srv.Errors != nil && len(srv.Errors.Routes) > 0 {
		if p.errRoutes, reason = c.routes(srv.Errors.Routes); reason != "" {
			return nil, reason + " (in handle_errors)"
		}
	}
	return p, ""
}

type compiler struct {
	ctx    caddy.Context
	logger *zap.Logger
}

func (c *compiler) routes(list caddyhttp.RouteList) ([]*route, string) {
	out := make([]*route, 0, len(list))
	for i := range list {
		r := &list[i]
		rt := &route{group: r.Group, sets: r.MatcherSets, terminal: r.Terminal}
		for _, set := range r.MatcherSets {
			for _, m := range set {
				if reason := matcherSupport(m); reason != "" {
					return nil, reason
				}
			}
		}
		for _, h := range r.Handlers {
			s, reason := c.handler(h)
			if reason != "" {
				return nil, reason
			}
			rt.steps = append(rt.steps, s)
		}
		out = append(out, rt)
	}
	return out, ""
}

// matcherSupport says why the plan does not run matcher m, or "".
func matcherSupport(m any) string {
	switch m := m.(type) {
	case *caddyhttp.MatchHost, caddyhttp.MatchHost, *caddyhttp.MatchPath, caddyhttp.MatchPath,
		*caddyhttp.MatchMethod, caddyhttp.MatchMethod, *caddyhttp.MatchHeader, caddyhttp.MatchHeader,
		*caddyhttp.MatchProtocol, caddyhttp.MatchProtocol, *caddyhttp.MatchExpression:
		return ""
	case *caddyhttp.MatchNot:
		return notSupport(m.MatcherSets)
	case caddyhttp.MatchNot:
		return notSupport(m.MatcherSets)
	}
	return "matcher " + moduleName(m)
}

func notSupport(sets caddyhttp.MatcherSets) string {
	for _, set := range sets {
		for _, m := range set {
			if reason := matcherSupport(m); reason != "" {
				return reason
			}
		}
	}
	return ""
}

// handler compiles one handler module.
func (c *compiler) handler(h caddyhttp.MiddlewareHandler) (step, string) {
	switch h := h.(type) {
	case *caddyhttp.Subroute:
		if h.Errors != nil && len(h.Errors.Routes) > 0 {
			return nil, "subroute errors"
		}
		routes, reason := c.routes(h.Routes)
		if reason != "" {
			return nil, reason
		}
		return &subroute{routes: routes}, ""
	case interface{ Subroute() *caddyhttp.Subroute }: // a handler running routes of its own (docker_routes)
		return c.handler(h.Subroute())
	case *reverseproxy.Handler:
		return c.proxy(h)
	case *caddyhttp.StaticResponse, *caddyhttp.StaticError, *headers.Handler, *rewrite.Rewrite,
		*caddyhttp.VarsMiddleware, *maphandler.Handler, *encode.Encode:
		return &delegated{h: h}, ""
	}
	if duties[moduleID(h)] {
		return &delegated{h: h}, ""
	}
	return nil, moduleName(h)
}

// duties are the gateway's handlers (and caddy-ratelimit's) that run on the
// plan as they are: the same provisioned instance and its shared state
// (verifier and token cache, keys file, policies, decision cache, audit
// sinks and chain, rate-limit zones), on the request as Caddy's server
// prepares it, so their decisions, placeholders, identity and audit events
// are those of Caddy's path. Named by module ID so that this package
// imports none of them.
var duties = map[string]bool{
	"http.handlers.audit":             true,
	"http.handlers.jwt_auth":          true,
	"http.handlers.api_key":           true,
	"http.handlers.client_cert_auth":  true,
	"http.handlers.rbac":              true,
	"http.handlers.permission":        true,
	"http.handlers.rate_limit":        true,
	"http.handlers.gateway_dashboard": true,
}

// proxy compiles a reverse_proxy handler.
func (c *compiler) proxy(h *reverseproxy.Handler) (step, string) {
	t, _ := h.Transport.(*caddyh1.Transport)
	if ppt, ok := h.Transport.(reverseproxy.ProxyProtocolTransport); ok && ppt.ProxyProtocolEnabled() {
		return nil, "reverse_proxy transport with proxy_protocol"
	}
	if clt, ok := h.Transport.(reverseproxy.ContentLengthRequiredTransport); ok && clt.RequiresContentLength() {
		return nil, "reverse_proxy transport " + moduleName(h.Transport)
	}
	switch {
	case len(h.HandleResponse) > 0:
		return nil, "reverse_proxy handle_response"
	case h.RequestBuffers != 0:
		return nil, "reverse_proxy request_buffers"
	case h.ResponseBuffers != 0:
		return nil, "reverse_proxy response_buffers"
	case h.FlushInterval > 0:
		return nil, "reverse_proxy flush_interval"
	case h.Rewrite != nil:
		return nil, "reverse_proxy rewrite"
	case len(h.TrustedProxies) > 0:
		return nil, "reverse_proxy trusted_proxies"
	case h.CB != nil:
		return nil, "reverse_proxy circuit breaker"
	case h.LoadBalancing == nil || h.LoadBalancing.SelectionPolicy == nil:
		return nil, "reverse_proxy without a selection policy"
	}
	for _, set := range h.LoadBalancing.RetryMatch {
		for _, m := range set {
			if _, ok := m.(*caddyhttp.MatchExpression); ok || matcherSupport(m) != "" {
				// (an expression may read the response: reverse_proxy
				// retries on it, which the plan does not)
				return nil, "reverse_proxy retry_match " + moduleName(m)
			}
		}
	}
	p := &proxyStep{
		h:         h,
		transport: t,
		lb:        h.LoadBalancing,
		logger:    caddy.Log().Named("http.handlers.reverse_proxy"),
		static:    map[*reverseproxy.Upstream]dialInfo{},
	}
	if h.DynamicUpstreams != nil {
		if id := moduleID(h.DynamicUpstreams); id != "http.reverse_proxy.upstreams.docker" {
			return nil, "reverse_proxy dynamic upstreams " + id
		}
		p.dynamic = h.DynamicUpstreams
		p.caching, _ = h.DynamicUpstreams.(reverseproxy.CachingUpstreamSource)
	}
	for _, u := range h.Upstreams {
		if strings.Contains(u.Dial, "{") {
			return nil, "reverse_proxy upstream with placeholders (" + u.Dial + ")"
		}
		di, err := parseDial(u.Dial)
		if err != nil {
			return nil, fmt.Sprintf("reverse_proxy upstream %s: %v", u.Dial, err)
		}
		p.static[u] = di
	}
	if h.HealthChecks != nil {
		p.passive = h.HealthChecks.Passive
	}
	if h.Headers != nil {
		p.reqOps = h.Headers.Request
		p.respOps = h.Headers.Response
	}
	if tph, ok := h.Transport.(reverseproxy.RequestHeaderOpsTransport); ok {
		if ops := tph.RequestHeaderOps(); ops != nil {
			if err := ops.Provision(c.ctx); err != nil {
				return nil, "reverse_proxy transport header operations: " + err.Error()
			}
			p.transOps = ops
		}
	}
	return p, ""
}

func moduleID(m any) string {
	if mod, ok := m.(caddy.Module); ok {
		return string(mod.CaddyModule().ID)
	}
	return fmt.Sprintf("%T", m)
}

// moduleName names a module as the reason for leaving a server on Caddy's
// path: its full ID (http.handlers.encode).
func moduleName(m any) string { return moduleID(m) }

// altSvc is the Alt-Svc value Caddy's server adds to HTTP/1 and HTTP/2
// responses when it serves HTTP/3 (quic-go's SetQUICHeaders): one entry per
// TLS port with h3 on, or nil.
func altSvc(srv *caddyhttp.Server, app *caddyhttp.App) []string {
	if len(srv.TLSConnPolicies) == 0 {
		return nil
	}
	httpPort := caddyhttp.DefaultHTTPPort
	if app != nil && app.HTTPPort != 0 {
		httpPort = app.HTTPPort
	}
	var parts []string
	for i, l := range srv.Listen {
		protos := srv.Protocols
		if srv.ListenProtocols != nil && i < len(srv.ListenProtocols) && srv.ListenProtocols[i] != nil {
			protos = srv.ListenProtocols[i]
		}
		if !slices.Contains(protos, "h3") {
			continue
		}
		na, err := caddy.ParseNetworkAddress(l)
		if err != nil || na.IsUnixNetwork() || na.IsFdNetwork() {
			continue
		}
		for off := uint(0); off < na.PortRangeSize(); off++ {
			port := int(na.StartPort + off)
			if port == httpPort || port == 0 {
				continue
			}
			parts = append(parts, fmt.Sprintf(`h3=":%d"; ma=2592000`, port))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return []string{strings.Join(parts, ",")}
}
