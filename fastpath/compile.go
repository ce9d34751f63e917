package fastpath

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyh1"
	"github.com/apigate/gateway/internal/fieldedits"
)

// serverReasons are the server's options the plan does not honour, named
// as the config names them: each keeps the whole server on Caddy's path
// (an option is never ignored). Every other option, handler and matcher
// runs on the plan. It reads only the server's options, so it decides the
// same from a provisioned server and from one read from JSON (Report).
func serverReasons(srv *caddyhttp.Server) []string {
	var r []string
	if len(srv.ExpectedUnderscoreHeaders) > 0 {
		r = append(r, "expected_underscore_headers")
	}
	if len(srv.ExpectedDotHeaders) > 0 {
		r = append(r, "expected_dot_headers")
	}
	if len(srv.Protocols) > 0 && !slices.Contains(srv.Protocols, "h1") {
		r = append(r, "protocols without h1")
	}
	return r
}

// compileServer compiles srv's routes into a plan, for a server without
// serverReasons; it reports why not otherwise.
func compileServer(ctx caddy.Context, srv *caddyhttp.Server, app *caddyhttp.App, logger *zap.Logger) (*plan, string) {
	if r := serverReasons(srv); len(r) > 0 {
		return nil, strings.Join(r, "; ")
	}
	c := compiler{ctx: ctx, logger: logger}
	p := &plan{
		srv:       srv,
		name:      srv.Name(),
		strictSNI: srv.StrictSNIHost != nil && *srv.StrictSNIHost,
		trusted:   hasTrustedProxies(srv),
		altSvc:    altSvc(srv, app),
	}
	// Caddy's server logs through the http app's logger (so that a custom
	// log including http.log.access.* gets the records)
	httpLogger := caddy.Log().Named("http")
	if app != nil {
		httpLogger = ctx.Logger(app)
	}
	p.errLogger = httpLogger.Named("log.error")
	p.logger = httpLogger
	p.rateTimeouts = srv.ReadMinRate > 0 || srv.WriteMinRate > 0
	if srv.Logs != nil {
		p.access = newAccessLog(srv.Logs, httpLogger)
		if srv.Logs.Trace {
			p.trace = httpLogger.Named("log.trace")
		}
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
	p.pureMatchers = !c.foreignMatcher
	return p, ""
}

// readOnlyMatchers reports whether every matcher of sets is one of
// Caddy's own, which read the request and never change its header.
func readOnlyMatchers(sets caddyhttp.MatcherSets) bool { return matchersAmong(sets, readOnlyIDs) }

// fieldFreeMatchers reports whether every matcher of sets is one of
// Caddy's that never read the request's header map itself (a placeholder
// in their values reads it through the replacer, which fills it:
// exchange.fieldPlaceholder), so that the map need not be filled before
// they run. Not among them: header, header_regexp, expression, file, and
// protocol (its grpc reads Content-Type).
func fieldFreeMatchers(sets caddyhttp.MatcherSets) bool { return matchersAmong(sets, fieldFreeIDs) }

var (
	readOnlyIDs = idSet("http.matchers.host", "http.matchers.path", "http.matchers.path_regexp",
		"http.matchers.method", "http.matchers.query", "http.matchers.header",
		"http.matchers.header_regexp", "http.matchers.protocol", "http.matchers.remote_ip",
		"http.matchers.client_ip", "http.matchers.expression", "http.matchers.tls",
		"http.matchers.vars", "http.matchers.vars_regexp", "http.matchers.file")
	fieldFreeIDs = idSet("http.matchers.host", "http.matchers.path", "http.matchers.path_regexp",
		"http.matchers.method", "http.matchers.query",
		"http.matchers.remote_ip", "http.matchers.client_ip", "http.matchers.tls",
		"http.matchers.vars", "http.matchers.vars_regexp")
)

func idSet(ids ...string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// matchersAmong reports whether every matcher of sets (those a not matcher
// holds too) is a module whose ID is in ids.
func matchersAmong(sets caddyhttp.MatcherSets, ids map[string]bool) bool {
	for _, set := range sets {
		for _, m := range set {
			switch m := m.(type) {
			case *caddyhttp.MatchNot:
				if !matchersAmong(m.MatcherSets, ids) {
					return false
				}
				continue
			case caddy.Module:
				if ids[string(m.CaddyModule().ID)] {
					continue
				}
			}
			return false
		}
	}
	return true
}

// fieldSets is sets with each matcher that may read the request's header
// map (not fieldFreeMatchers') wrapped in fillFirst, so that the map is
// filled only when such a matcher is reached, and each set's matchers in
// an order that reaches them last: first those that read neither the map
// nor a placeholder (host, path, method, ...), then vars and vars_regexp
// (whose placeholders may read it, fieldPlaceholder), then the wrapped
// ones. A set's answer is the AND of its matchers; Caddy runs them in the
// order of a map's iteration (MatcherSets.FromInterface), which it does
// not promise, so this is one of Caddy's orders, and a request a route's
// path refuses does not fill the map for the route's header or vars
// matcher. sets itself when every matcher is of the first kind.
func fieldSets(sets caddyhttp.MatcherSets) caddyhttp.MatcherSets {
	all0 := true
	for _, set := range sets {
		for _, m := range set {
			all0 = all0 && matcherRank(m) == 0
		}
	}
	if all0 {
		return sets
	}
	out := make(caddyhttp.MatcherSets, len(sets))
	for i, set := range sets {
		out[i] = make(caddyhttp.MatcherSet, 0, len(set))
		for rank := 0; rank < 3; rank++ {
			for _, m := range set {
				if matcherRank(m) != rank {
					continue
				}
				if rank == 2 {
					m = fillFirst{caddyhttp.MatcherSet{m}}
				}
				out[i] = append(out[i], m)
			}
		}
	}
	return out
}

// matcherRank is where fieldSets puts m in its set: 0, it reads neither
// the header map nor a placeholder; 1, vars and vars_regexp; 2, it may
// read the map.
func matcherRank(m any) int {
	if !fieldFreeMatchers(caddyhttp.MatcherSets{{m}}) {
		return 2
	}
	if mod, ok := m.(caddy.Module); ok {
		switch mod.CaddyModule().ID {
		case "http.matchers.vars", "http.matchers.vars_regexp":
			return 1
		}
	}
	return 0
}

// fillFirst is a matcher that may read the request's header map, run as
// Caddy's MatcherSet runs it (m holds it alone) after the map is filled
// (exchange.header, found through the request's context).
type fillFirst struct{ m caddyhttp.MatcherSet }

func (f fillFirst) MatchWithError(r *http.Request) (bool, error) {
	if ex, ok := r.Context().Value(exchangeKey{}).(*exchange); ok {
		ex.header()
	}
	return f.m.MatchWithError(r)
}

type compiler struct {
	ctx    caddy.Context
	logger *zap.Logger
	// foreignMatcher: a route has a matcher that is not one of Caddy's
	// (which read a request, never change it): see plan.pureMatchers
	foreignMatcher bool
}

func (c *compiler) routes(list caddyhttp.RouteList) ([]*route, string) {
	out := make([]*route, 0, len(list))
	for i := range list {
		r := &list[i]
		rt := &route{group: r.Group, sets: fieldSets(r.MatcherSets), terminal: r.Terminal}
		if !readOnlyMatchers(r.MatcherSets) {
			c.foreignMatcher = true
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
		return &subroute{h: h, routes: routes}, ""
	case interface{ Subroute() *caddyhttp.Subroute }: // a handler running routes of its own (docker_routes)
		return c.handler(h.Subroute())
	case *reverseproxy.Handler:
		return c.proxy(h)
	}
	// Any other handler module runs as Caddy's route chain calls it: its
	// provisioned instance, on the request as Caddy's server prepares one,
	// with the plan's writer and a "next" that goes on with the plan.
	return declaredEdits(&delegated{h: h}), ""
}

// declaredEdits notes the request header fields d's module may change,
// when it says (fieldedits.Declarer) or is known to change none.
func declaredEdits(d *delegated) *delegated {
	switch m := d.h.(type) {
	case fieldedits.Declarer:
		d.declared = true
		for _, n := range m.RequestFieldEdits() {
			d.edits = append(d.edits, textproto.CanonicalMIMEHeaderKey(n))
		}
	default:
		// caddy-ratelimit (v0.1.0) reads the request's fields and
		// changes none
		d.declared = moduleID(d.h) == "http.handlers.rate_limit"
	}
	return d
}

// proxy compiles a reverse_proxy handler: the plan's own proxy step for
// what it runs step for step as Caddy does, else Caddy's handler itself
// (called as Caddy's route chain calls it; at Caddy's cost for that
// handler, with the plan's savings around it).
func (c *compiler) proxy(h *reverseproxy.Handler) (step, string) {
	t, _ := h.Transport.(*caddyh1.Transport)
	if ppt, ok := h.Transport.(reverseproxy.ProxyProtocolTransport); ok && ppt.ProxyProtocolEnabled() {
		return caddyProxy(h, "reverse_proxy transport with proxy_protocol"), ""
	}
	if clt, ok := h.Transport.(reverseproxy.ContentLengthRequiredTransport); ok && clt.RequiresContentLength() {
		return caddyProxy(h, "reverse_proxy transport "+moduleName(h.Transport)), ""
	}
	switch {
	case len(h.HandleResponse) > 0:
		return caddyProxy(h, "reverse_proxy handle_response"), ""
	case h.RequestBuffers != 0:
		return caddyProxy(h, "reverse_proxy request_buffers"), ""
	case h.ResponseBuffers != 0:
		return caddyProxy(h, "reverse_proxy response_buffers"), ""
	case h.FlushInterval > 0:
		return caddyProxy(h, "reverse_proxy flush_interval"), ""
	case h.Rewrite != nil:
		return caddyProxy(h, "reverse_proxy rewrite"), ""
	case len(h.TrustedProxies) > 0:
		return caddyProxy(h, "reverse_proxy trusted_proxies"), ""
	case h.CB != nil:
		return caddyProxy(h, "reverse_proxy circuit breaker"), ""
	case h.LoadBalancing == nil || h.LoadBalancing.SelectionPolicy == nil:
		return caddyProxy(h, "reverse_proxy without a selection policy"), ""
	}
	for _, set := range h.LoadBalancing.RetryMatch {
		for _, m := range set {
			if _, ok := m.(*caddyhttp.MatchExpression); ok {
				// (an expression may read the response: reverse_proxy
				// retries on it, which the plan does not)
				return caddyProxy(h, "reverse_proxy retry_match "+moduleName(m)), ""
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
			return caddyProxy(h, "reverse_proxy dynamic upstreams "+id), ""
		}
		p.dynamic = h.DynamicUpstreams
		p.caching, _ = h.DynamicUpstreams.(reverseproxy.CachingUpstreamSource)
	}
	for _, u := range h.Upstreams {
		if strings.Contains(u.Dial, "{") {
			return caddyProxy(h, "reverse_proxy upstream with placeholders ("+u.Dial+")"), ""
		}
		di, err := parseDial(u.Dial)
		if err != nil {
			return caddyProxy(h, fmt.Sprintf("reverse_proxy upstream %s: %v", u.Dial, err)), ""
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
	_, headerPolicy := h.LoadBalancing.SelectionPolicy.(*reverseproxy.HeaderHashSelection)
	p.plain = t != nil && p.reqOps == nil && !headerPolicy && len(h.LoadBalancing.RetryMatch) == 0
	p.fieldFree = p.plain && p.dynamic == nil && fieldFreePolicy(h.LoadBalancing.SelectionPolicy)
	if tph, ok := h.Transport.(reverseproxy.RequestHeaderOpsTransport); ok {
		if ops := tph.RequestHeaderOps(); ops != nil {
			if err := ops.Provision(c.ctx); err != nil {
				return caddyProxy(h, "reverse_proxy transport header operations: "+err.Error()), ""
			}
			p.transOps = ops
			p.plain = false
		}
	}
	p.fieldFree = p.fieldFree && p.transOps == nil
	return p, ""
}

// fieldFreePolicy reports whether sel is one of Caddy's selection policies
// that read none of the request's header fields (header and cookie do).
func fieldFreePolicy(sel reverseproxy.Selector) bool {
	switch sel.(type) { // (as Caddy provisions them: values or pointers)
	case reverseproxy.RandomSelection, *reverseproxy.RandomSelection,
		reverseproxy.RandomChoiceSelection, *reverseproxy.RandomChoiceSelection,
		reverseproxy.LeastConnSelection, *reverseproxy.LeastConnSelection,
		*reverseproxy.RoundRobinSelection, *reverseproxy.WeightedRoundRobinSelection,
		reverseproxy.FirstSelection, *reverseproxy.FirstSelection,
		reverseproxy.IPHashSelection, *reverseproxy.IPHashSelection,
		reverseproxy.ClientIPHashSelection, *reverseproxy.ClientIPHashSelection,
		reverseproxy.URIHashSelection, *reverseproxy.URIHashSelection,
		*reverseproxy.QueryHashSelection:
		return true
	}
	return false
}

// caddyProxy is reverse_proxy's own handler as a step, with why the plan's
// proxy step does not take it (for the debug log).
func caddyProxy(h *reverseproxy.Handler, why string) step {
	return &delegated{h: h, why: why}
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
