package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/apigate/gateway/internal/deny"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/http/httpguts"
)

// A plan is a server's routes, compiled once per config load. Its steps
// hold the provisioned module instances of Caddy's own path (the same
// matchers, upstreams, pools and handlers), so nothing is configured,
// pooled or counted twice. Routing follows Caddy's compiled middleware
// chain exactly: the first matching route of a list runs its handlers,
// each with a "next" that is the rest of the route, then the rest of the
// list (unless the route is terminal), then what came after the list;
// routes of one group exclude each other.
type plan struct {
	srv       *caddyhttp.Server
	name      string
	routes    []*route
	errRoutes []*route // handle_errors; nil when the server has none
	strictSNI bool
	altSvc    []string // HTTP/3 advertisement; nil when HTTP/3 is off
	trusted   bool     // trusted_proxies (or trusted_proxies_unix) is set
	// pureMatchers: every matcher of the server's routes is one of
	// Caddy's, which never change a request (the proxy's plain lane)
	pureMatchers bool

	errLogger *zap.Logger // http.log.error
	access    *accessLog  // the server's access logs; nil without
	trace     *zap.Logger // http.log.trace, with the trace server option; nil without
	logger    *zap.Logger // the http app's (Caddy's server logs its own warnings there)

	// rateTimeouts: the server has a minimum read or write rate; its idle
	// timeouts are Caddy's own wrappers (idleTimeouts)
	rateTimeouts bool
}

// route is one compiled route.
type route struct {
	group string
	// sets are the provisioned matchers, each that may read the
	// request's header map wrapped to fill it first (fieldSets)
	sets     caddyhttp.MatcherSets
	steps    []step
	terminal bool

	// metrics is Caddy's instrumentation of this (top-level) route when
	// the config has `metrics`: a *caddyhttp.metricsInstrumentedRoute whose
	// next resumes the plan (metricsNext).
	metrics unsafe.Pointer
}

// step is one compiled handler: run it with what comes after it.
type step interface {
	serve(ex *exchange, w http.ResponseWriter, next *cont) error
	module() caddyhttp.MiddlewareHandler // the handler module it runs
}

// cont is what runs after a handler (Caddy's "next"): the rest of a
// route's handlers, the rest of a route list, or the end of the chain.
// It is a caddyhttp.Handler, so delegated handlers call it as their next.
type cont struct {
	ex     *exchange
	kind   contKind
	steps  []step
	routes []*route
	from   int
	next   *cont // after these steps or routes
}

type contKind uint8

const (
	contEnd      contKind = iota // emptyHandler, or errorEmptyHandler in error routes
	contSteps                    // steps[from:], then next
	contRoutes                   // routes[from:], then next
	contErrorEnd                 // errorEmptyHandler
)

// ServeHTTP lets a delegated handler call the rest of the chain; the
// request it passes on is the one the rest sees.
func (k *cont) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	k.ex.setReq(r)
	return k.run(w)
}

func (k *cont) run(w http.ResponseWriter) error {
	ex := k.ex
	switch k.kind {
	case contSteps:
		return ex.runSteps(w, k.steps, k.from, k.next)
	case contRoutes:
		return ex.runRoutes(w, k.routes, k.from, k.next)
	case contErrorEnd:
		if he, ok := ex.err.(caddyhttp.HandlerError); ok {
			w.WriteHeader(he.StatusCode)
		} else {
			w.WriteHeader(http.StatusInternalServerError)
		}
		return nil
	}
	caddyhttp.SetVar(ex.req.Context(), "unhandled", true)
	return nil
}

func (ex *exchange) runSteps(w http.ResponseWriter, steps []step, from int, next *cont) error {
	if from == len(steps) {
		return next.run(w)
	}
	if ex.plan.trace != nil {
		ex.plan.traceStep(steps[from])
	}
	return steps[from].serve(ex, w, ex.newCont(contSteps, steps, nil, from+1, next))
}

// runRoutes runs routes[from:] as Caddy's compiled route list does, then
// next.
func (ex *exchange) runRoutes(w http.ResponseWriter, routes []*route, from int, next *cont) error {
	for i := from; i < len(routes); i++ {
		rt := routes[i]
		if rt.group != "" && ex.groupDone(rt.group) {
			continue
		}
		ok, err := rt.sets.AnyMatchWithError(ex.req)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if rt.group != "" {
			ex.groups = append(ex.groups, rt.group)
		}
		var after *cont
		if rt.terminal {
			after = ex.endCont()
		} else {
			after = ex.newCont(contRoutes, nil, routes, i+1, next)
		}
		if rt.metrics != nil {
			ex.header() // (Caddy's metrics read the fields for the request's size)
			ex.resume = ex.newCont(contSteps, rt.steps, nil, 0, after)
			return metricsRouteServeHTTP(rt.metrics, w, ex.req)
		}
		return ex.runSteps(w, rt.steps, 0, after)
	}
	return next.run(w)
}

func (ex *exchange) groupDone(g string) bool {
	for _, d := range ex.groups {
		if d == g {
			return true
		}
	}
	return false
}

func (ex *exchange) endCont() *cont {
	if ex.inErrors {
		return ex.newCont(contErrorEnd, nil, nil, 0, nil)
	}
	return ex.newCont(contEnd, nil, nil, 0, nil)
}

// newCont takes a cont from the exchange's arena (reused per request).
func (ex *exchange) newCont(kind contKind, steps []step, routes []*route, from int, next *cont) *cont {
	var k *cont
	if ex.ncont < len(ex.conts) {
		k = ex.conts[ex.ncont]
	} else {
		k = new(cont)
		ex.conts = append(ex.conts, k)
	}
	ex.ncont++
	*k = cont{ex: ex, kind: kind, steps: steps, routes: routes, from: from, next: next}
	return k
}

// subroute is Caddy's subroute handler (handle, handle_path, route).
type subroute struct {
	h      *caddyhttp.Subroute
	routes []*route
}

func (s *subroute) module() caddyhttp.MiddlewareHandler { return s.h }

func (s *subroute) serve(ex *exchange, w http.ResponseWriter, next *cont) error {
	return ex.runRoutes(w, s.routes, 0, next)
}

// delegated runs a Caddy handler module as Caddy's route chain calls it:
// its provisioned instance, on the request as Caddy's server prepares it,
// with the plan's response writer and a "next" that goes on with the plan.
type delegated struct {
	h   caddyhttp.MiddlewareHandler
	why string // why the plan has no step of its own for it ("": none needed)
	// declared: the module names the request header fields it may change
	// (edits; none: it only reads them), so that the proxy's plain lane
	// stays open after it (fieldedits)
	declared bool
	edits    []string
}

func (d *delegated) module() caddyhttp.MiddlewareHandler { return d.h }

func (d *delegated) serve(ex *exchange, w http.ResponseWriter, next *cont) error {
	ex.header()
	ex.delegatedRan = true
	if !d.declared {
		ex.fieldsChanged = true
	} else if len(d.edits) > 0 {
		ex.edits = append(ex.edits, d.edits...)
	}
	return d.h.ServeHTTP(w, ex.req, next)
}

// exchange is the plan's state for the request a connection serves: the
// request as Caddy's handlers see it, made without net/http's per-request
// work. The shadow request, its URL, header map, vars and replacer are the
// state's, refilled for each request; its context (exCtx) answers what
// Caddy's server puts in a request's context, for the request in hand, so
// the shadow is a request prepared as Caddy prepares it (replacer with the
// HTTP placeholders, vars, original request, server) at no cost per
// request. A handler that passes a derived request on (WithContext, an
// error) makes that the request the rest of the chain sees.
type exchange struct {
	st   *state
	plan *plan

	ctx    exCtx        // the shadow's context
	tmpl   http.Request // carries ctx; copied into shadow
	shadow http.Request
	url    url.URL
	hdr    http.Header // the shadow's header map: filled on demand (header)
	vals   []string
	// hdrFilled: hdr holds this request's fields (header ran)
	hdrFilled bool
	vars      map[string]any
	repl      *caddy.Replacer // the request's, made on first use
	// replKeep is the replacer reset for each request; replBase the number
	// of its providers before a request adds any
	replKeep *caddy.Replacer
	replBase int
	// varsGone: vars went with a context that may outlive the request
	// (escape); the next request gets a new map
	varsGone bool
	// rpPlaceholders is reverse_proxy's placeholder provider (made once)
	rpPlaceholders caddy.ReplacerFunc
	groupM         map[string]struct{}
	extra          *caddyhttp.ExtraLogFields

	// access and error logs: the request as it came in, made when a record
	// is written; scratch space
	logReq       http.Request
	logHdr       http.Header
	logVals      []string
	logScratch   []*zap.Logger
	fieldScratch []zap.Field
	orig         struct {
		method, remoteAddr, requestURI string
		url                            url.URL
	}

	req  *http.Request // the request the chain sees now
	err  error         // the error being handled (error routes)
	gone goneState     // the client went away: the context's cancellation

	inErrors bool
	resume   *cont // what a metrics-instrumented route runs (metricsNext)
	groups   []string
	conts    []*cont
	ncont    int
	start    time.Time
	// clock is the request's latest reading of the clock: its start,
	// then each upstream answer's. What needs "now" within the request
	// (the Date field, the proxy's start, the upstream pool's idle ages,
	// the connection's next idle deadline) takes it rather than reading
	// the clock again: a bare proxied request reads it three times (its
	// start, the upstream's head, the end of the upstream's body).
	clock time.Time
	// delegatedRan: a handler module ran before the step in hand (the
	// proxy then reads the clock for its own start)
	delegatedRan bool
	// fieldsChanged: a handler module that may change any request
	// header field ran; edits: the fields the modules that ran named
	// (fieldedits). The proxy's plain lane reads them.
	fieldsChanged bool
	edits         []string

	px proxyState
}

func (ex *exchange) init(st *state) {
	ex.st = st
	// (8: a small map, one group, for the usual API request's few
	// fields; it grows once for a request with more and stays grown.
	// At 16 its clear and fill cost ~200 instructions more a request of
	// two fields, callgrind)
	ex.hdr = make(http.Header, 8)
	ex.vars = make(map[string]any, 8)
	ex.groupM = make(map[string]struct{}, 4)
	ex.ctx.ex = ex
	ex.tmpl = *(&http.Request{}).WithContext(&ex.ctx)
	ex.shadow = ex.tmpl
	ex.rpPlaceholders = ex.px.placeholder
	ex.px.init(ex)
}

// clear drops what the last request left that could hold memory or
// refer to a connection.
func (ex *exchange) clear() {
	ex.req, ex.err, ex.resume, ex.plan, ex.extra = nil, nil, nil, nil, nil
	ex.shadow = ex.tmpl
	clear(ex.hdr)
	ex.hdrFilled = false
	clear(ex.vals[:cap(ex.vals)])
	ex.resetVars()
	ex.repl = nil
	for _, k := range ex.conts[:ex.ncont] {
		*k = cont{}
	}
	ex.ncont = 0
	ex.px.end()
}

// resetVars empties vars for a new request, or makes a new map when the
// last one escaped.
func (ex *exchange) resetVars() {
	if ex.varsGone {
		ex.vars = make(map[string]any, 8)
		ex.varsGone = false
		return
	}
	clear(ex.vars)
}

// escapedCtx is the context of a request handed to a transport other than
// h1 (Caddy's http transport): net/http dials in the background with it,
// and the dial reads the request's vars and replacer (the proxy and
// PROXY protocol vars, the TLS server name) when it runs, which can be
// after the request ended and the exchange serves another (the race
// detector caught the dial reading vars as the next request cleared them,
// TestH2Spec on reverse_proxy with transport http). It answers them from
// this request's own, which the exchange gives up (escape). Other values
// are the exchange's.
type escapedCtx struct {
	context.Context
	vars map[string]any
	repl *caddy.Replacer
}

func (c *escapedCtx) Value(key any) any {
	switch key {
	case caddyhttp.VarsCtxKey:
		return c.vars
	case caddy.ReplacerCtxKey:
		return c.repl
	}
	return c.Context.Value(key)
}

// escape binds the request's vars and replacer to a context derived from
// parent, for a transport that may read it after the request: the
// exchange's next request gets new ones (a map and a replacer more on
// that path).
func (ex *exchange) escape(parent context.Context) context.Context {
	c := &escapedCtx{Context: parent, vars: ex.vars, repl: ex.replacer()}
	ex.varsGone = true
	ex.replKeep = nil // (ex.repl stays this request's)
	return c
}

// replacer returns the request's replacer, made on first use: handlers add
// providers to it (jwt_auth its claims) and values (Set), which belong to
// one request, so each request starts with none, as on Caddy's path. It
// has Caddy's HTTP placeholders ({http.request.*}, {http.vars.*},
// {http.response.header.*}, ...), which read the shadow request (refilled,
// never moved), and reverse_proxy's. The replacer is the state's, made
// once and reset for each request that asks for one (resetReplacer): no
// module keeps a request's replacer past the request.
func (ex *exchange) replacer() *caddy.Replacer {
	if ex.repl == nil {
		if ex.replKeep == nil {
			r := caddy.NewReplacer()
			r.Map(ex.fieldPlaceholder) // (before Caddy's, which reads the map)
			addHTTPVarsToReplacer(r, &ex.shadow, ex.writer())
			r.Map(ex.rpPlaceholders)
			ex.replKeep, ex.replBase = r, replacerProviders(r)
		} else {
			resetReplacer(ex.replKeep, ex.replBase)
		}
		// (Caddy's HTTP placeholders set it when they are made, and only
		// they read it: {http.request.duration}, {http.vars.start_time})
		ex.vars["start_time"] = ex.start
		ex.repl = ex.replKeep
	}
	return ex.repl
}

// fieldPlaceholder is a replacer provider that answers nothing: it fills
// the request's header map (header) when a placeholder that reads it is
// asked for ({http.request.header.*}, {http.request.cookie.*}), before
// Caddy's provider, after it in the replacer, reads the map.
func (ex *exchange) fieldPlaceholder(key string) (any, bool) {
	if !ex.hdrFilled && (strings.HasPrefix(key, "http.request.header.") || strings.HasPrefix(key, "http.request.cookie.")) {
		ex.header()
	}
	return nil, false
}

// exCtx is the context of the shadow request: a root context that answers,
// for the request in hand, the values net/http and Caddy's server put in a
// request's context (the local address, the server, the replacer, the
// vars, the original request, the route groups, the extra log fields),
// and that is canceled when the client goes away (gone.go).
type exCtx struct{ ex *exchange }

func (x *exCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// (Done, Err and AfterFunc: gone.go)

func (x *exCtx) Value(key any) any {
	ex := x.ex
	switch key {
	case caddy.ReplacerCtxKey:
		return ex.replacer()
	case caddyhttp.VarsCtxKey:
		return ex.vars
	case caddyhttp.ServerCtxKey:
		if ex.plan != nil {
			return ex.plan.srv
		}
	case caddyhttp.OriginalRequestCtxKey:
		o := &ex.orig
		return http.Request{Method: o.method, RemoteAddr: o.remoteAddr, RequestURI: o.requestURI, URL: &o.url}
	case routeGroupCtxKey:
		return ex.groupM
	case caddyhttp.ExtraLogFieldsCtxKey:
		if ex.extra == nil {
			ex.extra = new(caddyhttp.ExtraLogFields)
		}
		return ex.extra
	case http.LocalAddrContextKey:
		if ex.st.c != nil {
			return ex.st.c.localAddr
		}
	case exchangeKey{}:
		return ex
	}
	return nil
}

var (
	serverHeader    = []string{caddyhttp.ServerHeader}
	chunkedEncoding = []string{"chunked"}
	noCacheValue    = []string{"no-cache"}
)

// begin fills the shadow request from the parsed head, as net/http's
// readRequest would.
func (ex *exchange) begin(now time.Time) {
	c := ex.st.c
	h := &ex.st.head
	ex.plan = c.l.plan
	ex.start, ex.clock, ex.delegatedRan = now, now, false
	ex.fieldsChanged, ex.edits = false, ex.edits[:0]
	ex.err, ex.inErrors, ex.extra = nil, false, nil
	ex.groups = ex.groups[:0]
	clear(ex.groupM)
	ex.ncont = 0
	ex.repl = nil // a new one when asked for (replacer)
	if ex.st.h2 == nil {
		ex.gone.reset() // (an HTTP/2 stream's is reset when it opens: it may be reset before its handler runs)
	}

	ex.logReq.Header = nil // (made again when a record needs it)
	ex.url = url.URL{Path: h.path, RawPath: h.rawPath, RawQuery: h.rawQuery}
	if h.rawQuery == "" && strings.IndexByte(h.target, '?') >= 0 {
		ex.url.ForceQuery = true
	}
	if ex.hdrFilled || len(ex.hdr) > 0 {
		clear(ex.hdr)
	}
	ex.hdrFilled = false
	hdr := ex.hdr

	r := &ex.shadow
	*r = ex.tmpl
	r.Method = h.method
	r.URL = &ex.url
	r.Proto = h.proto
	r.ProtoMajor, r.ProtoMinor = h.protoVersion()
	r.Header = hdr
	r.Host = h.host
	r.RemoteAddr = c.remoteAddr
	r.RequestURI = h.target
	r.TLS = c.tlsState
	r.Close = h.close
	o := &ex.orig
	o.method, o.remoteAddr, o.requestURI, o.url = r.Method, r.RemoteAddr, r.RequestURI, ex.url

	if !lazyHeader() {
		ex.header()
	}

	ex.resetVars()
	if ex.plan.trusted {
		// trusted_proxies: Caddy's own decision (prepareRequest's), from
		// the request's headers, per request
		ex.header()
		trusted, ip := determineTrustedProxy(r, ex.plan.srv)
		ex.vars[caddyhttp.TrustedProxyVarKey] = trusted
		if ip == c.clientIP {
			ex.vars[caddyhttp.ClientIPVarKey] = c.clientIPAny
		} else {
			ex.vars[caddyhttp.ClientIPVarKey] = ip
		}
	} else {
		ex.vars[caddyhttp.TrustedProxyVarKey] = false
		ex.vars[caddyhttp.ClientIPVarKey] = c.clientIPAny
	}
	switch {
	case ex.st.h2 != nil:
		r.TLS = ex.st.h2.tls
		ex.st.h2.requestBody(r)
	case h.chunked:
		r.ContentLength = -1
		r.TransferEncoding = chunkedEncoding
		r.Body = &ex.st.body
	case h.contentLength > 0:
		r.ContentLength = h.contentLength
		r.Body = &ex.st.body
	default:
		r.Body = http.NoBody
	}
	ex.req = r
}

// header returns the request's header map, filled from the head the
// first time a request asks: the map is built for a request only when
// something other than the plan's own steps may read it (lanes.go, "the
// lazy map"). Every way into code that reads it calls header first: a
// matcher that may read fields (fillFirst, compile.go's fieldSets), a
// metrics-instrumented route,
// a handler module (delegated.serve), a placeholder of the request's
// fields (fieldPlaceholder), trusted_proxies (begin), and the proxy step
// unless its plain lane runs with a selection policy that reads no field
// (proxyStep.serve, prepare). The error routes are routes like the others;
// the access and error logs log the request from the head (loggedRequest).
func (ex *exchange) header() http.Header {
	if !ex.hdrFilled {
		ex.hdrFilled = true
		ex.vals = ex.st.head.fillHeader(ex.hdr, ex.vals, true)
	}
	return ex.hdr
}

// fillHeader fills hdr (cleared) with the head's fields as net/http's
// request header has them: Host and Transfer-Encoding out, a Pragma:
// no-cache without Cache-Control adding one. With dropDotted, fields whose
// names hold "_" or "." are left out, as Caddy's server drops them (they
// alias hyphenated ones once CGI-style backends fold them). vals is the
// scratch space the values' slices are cut from; it returns it.
func (h *reqHead) fillHeader(hdr http.Header, vals []string, dropDotted bool) []string {
	clear(hdr)
	vals = vals[:0]
	if cap(vals) < len(h.fields) {
		vals = make([]string, 0, len(h.fields)+8)
	}
	hasCC := false
	// the names put in so far, for the first few: a name not among them
	// goes in without a lookup first (caddyh1's parseHead does the same)
	var seen [16]string
	nseen := 0
	for i := range h.fields {
		f := &h.fields[i]
		if !h.mapped(f.name, dropDotted) {
			continue
		}
		if f.name == "Cache-Control" {
			hasCC = true
		}
		if nseen <= len(seen) && !slices.Contains(seen[:min(nseen, len(seen))], f.name) {
			if nseen < len(seen) {
				seen[nseen] = f.name
			}
			nseen++ // (past len(seen): more names than seen holds, look each up)
		} else if old, ok := hdr[f.name]; ok {
			hdr[f.name] = append(old, f.value)
			continue
		}
		vals = append(vals, f.value)
		hdr[f.name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if h.pragmaNoCache && !hasCC {
		hdr["Cache-Control"] = noCacheValue
	}
	return vals
}

// mapped reports whether fillHeader puts a head's field of this name in
// the map: not Host or Transfer-Encoding on HTTP/1 (net/http keeps them
// out), and with dropDotted none whose name holds "_" or "." (as Caddy's
// server drops them).
func (h *reqHead) mapped(name string, dropDotted bool) bool {
	if (name == "Host" || name == "Transfer-Encoding") && !h.h2 {
		return false
	}
	return !dropDotted || strings.IndexByte(name, '_') < 0 && strings.IndexByte(name, '.') < 0
}

// firstValue is the first value of the field name (canonical) that
// fillHeader would put in the map, and whether it would put one, without
// the map.
func (h *reqHead) firstValue(name string, dropDotted bool) (string, bool) {
	if !h.mapped(name, dropDotted) {
		return "", false
	}
	for i := range h.fields {
		if f := &h.fields[i]; f.name == name {
			return f.value, true
		}
	}
	if name == "Cache-Control" && h.pragmaNoCache {
		return noCacheValue[0], true
	}
	return "", false
}

// respOut is the response writer of the request an exchange serves: the
// HTTP/1 connection's (respWriter) or an HTTP/2 stream's (h2Writer).
type respOut interface {
	http.ResponseWriter
	FlushError() error
	handlerHdr() http.Header          // the handlers' header map
	logged() (status int, size int64) // what Caddy's access log recorder sees
}

func (ex *exchange) writer() respOut {
	if s := ex.st.h2; s != nil {
		return &s.w
	}
	return &ex.st.w
}

// bodyRead is how much of the request body the handlers read.
func (ex *exchange) bodyRead() int64 {
	if s := ex.st.h2; s != nil {
		return s.body.handlerRead
	}
	return ex.st.body.handlerRead
}

// routeGroupCtxKey is caddyhttp's (an unexported name of an exported type).
const routeGroupCtxKey caddy.CtxKey = "route_group"

func (ex *exchange) setReq(r *http.Request) {
	if r != nil {
		ex.req = r
	}
}

// result of serving a request
type result uint8

const (
	served result = iota
	handOff
	abort
)

// serve runs the plan for the request in c.head.
func (ex *exchange) serve(now time.Time) result {
	ex.begin(now)
	p := ex.plan
	w := ex.writer()
	hh := w.handlerHdr()
	hh["Server"] = serverHeader
	if p.altSvc != nil {
		hh["Alt-Svc"] = p.altSvc
	}
	var hw http.ResponseWriter = w
	var idleR *caddyhttp.IdleTimeoutReader
	var idleW *caddyhttp.IdleTimeoutWriter
	if ex.st.h2 == nil {
		w1 := &ex.st.w
		if p.srv.EnableFullDuplex {
			w1.fullDuplex = true // (Caddy's server asks for it on every HTTP/1 request)
		}
		if p.rateTimeouts {
			hw, idleR, idleW = ex.idleTimeouts(w1, now)
		}
	}
	logging := p.access != nil && p.access.shouldLog(ex.req.Host)
	err := ex.checkRequest()
	if err == nil {
		err = ex.runRoutes(hw, p.routes, 0, ex.endCont())
	}
	var duration time.Duration // (as Caddy's: before the error routes; read only when a log needs it)
	if logging || err != nil {
		duration = time.Since(now)
	}
	if err != nil {
		ex.handleError(hw, err, duration)
	}
	if logging {
		var writeErr error
		if d := p.srv.WriteTimeout; d > 0 && duration >= time.Duration(d) {
			// as Caddy: past the write timeout, flush, so that the record
			// has the write error
			writeErr = w.FlushError()
		}
		ex.logAccess(duration, writeErr)
	}
	if idleW != nil {
		idleW.HandlerDone()
	}
	if idleR != nil {
		idleR.HandlerDone()
	}
	if !ex.hdrFilled {
		tookLazy()
	}
	ex.st.c.l.stats.served.Add(1)
	if m := ex.st.c.l.metrics; m != nil {
		m.Inc()
	}
	ex.px.end()
	return served
}

// idleTimeouts wraps the request's body and the response writer in
// Caddy's own idle timeout reader and writer, as Caddy's server does, for
// a server with a minimum rate (read_body_idle / write_idle with a rate):
// they own the request's deadlines, handlers find them in the context
// (the timeouts handler overrides them). Other servers' idle timeouts are
// the engine's own (conn.go), with no allocation per request.
func (ex *exchange) idleTimeouts(w *respWriter, start time.Time) (http.ResponseWriter, *caddyhttp.IdleTimeoutReader, *caddyhttp.IdleTimeoutWriter) {
	srv, c, r := ex.plan.srv, ex.st.c, ex.req
	rc := http.NewResponseController(w)
	var hw http.ResponseWriter = w
	var ir *caddyhttp.IdleTimeoutReader
	var iw *caddyhttp.IdleTimeoutWriter
	if srv.ReadIdleTimeout > 0 {
		ir = &caddyhttp.IdleTimeoutReader{
			ReadCloser: r.Body,
			Ctrl:       rc,
			Deadline: caddyhttp.IdleDeadline{
				Start:        start,
				Timeout:      time.Duration(srv.ReadIdleTimeout),
				MinRate:      srv.ReadMinRate,
				HardDeadline: ex.st.hardRead,
			},
			Logger:        ex.plan.logger,
			DrainDeadline: r.ContentLength != 0,
		}
		r.Body = ir
		hw = &idleReadWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: hw}, reader: ir}
		c.ownReadDL = true
	}
	if srv.WriteIdleTimeout > 0 {
		iw = &caddyhttp.IdleTimeoutWriter{
			ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: hw},
			Ctrl:                  rc,
			Deadline: caddyhttp.IdleDeadline{
				Start:        start,
				Timeout:      time.Duration(srv.WriteIdleTimeout),
				MinRate:      srv.WriteMinRate,
				HardDeadline: ex.st.hardWrite,
			},
			MaxChunk: srv.MaxWriteChunk,
			Logger:   ex.plan.logger,
		}
		hw = iw
		c.ownWriteDL = true
	}
	ex.req = r.WithContext(caddyhttp.ContextWithIdleTimeouts(r.Context(), ir, iw))
	return hw, ir, iw
}

// idleReadWriter is Caddy's readDeadlineWriter: a read deadline a handler
// sets goes through the request's idle timeout reader.
type idleReadWriter struct {
	caddyhttp.ResponseWriterWrapper
	reader *caddyhttp.IdleTimeoutReader
}

func (w *idleReadWriter) SetReadDeadline(t time.Time) error { return w.reader.SetReadDeadline(t) }

// expectationFailed answers a request with an Expect other than
// 100-continue as net/http does, before any handler: 417, and the
// connection closes; the body is the fast path's problem.
func (ex *exchange) expectationFailed() result {
	w := &ex.st.w
	w.handlerHeader["Connection"] = []string{"close"}
	body := deny.SetFastPathProblem(w.handlerHeader, http.StatusExpectationFailed,
		"Expect other than 100-continue", ex.st.head.instance())
	w.WriteHeader(http.StatusExpectationFailed)
	w.Write(body)
	ex.st.c.l.stats.served.Add(1)
	return served
}

// delegate serves a request the plan does not take through Caddy's own
// server handler (Server.ServeHTTP: its routes, logs and error routes), on
// the fast path's connection and response writer: the request is made as
// net/http makes it from the head (head), with the body the connection
// reads.
func (ex *exchange) delegate(now time.Time, head []byte) result {
	c := ex.st.c
	h := &ex.st.head
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		c.refuse(refuse("request net/http does not read: "+err.Error()), h.instance())
		return abort
	}
	ex.plan = c.l.plan
	ex.start, ex.clock = now, now
	ex.gone.reset()
	req.RemoteAddr, req.TLS = c.remoteAddr, c.tlsState
	switch {
	case h.chunked:
		req.Body = &ex.st.body
	case h.contentLength > 0:
		req.Body = &ex.st.body
	default:
		req.Body = http.NoBody
	}
	w := &ex.st.w
	if req.RequestURI == "*" && req.Method == http.MethodOptions {
		// net/http answers "OPTIONS *" itself (its globalOptionsHandler)
		w.Header().Set("Content-Length", "0")
		if req.ContentLength != 0 {
			io.Copy(io.Discard, http.MaxBytesReader(w, req.Body, 4<<10))
		}
		c.l.stats.served.Add(1)
		return served
	}
	// (the exchange's context: the local address, and canceled when the
	// client goes away; Caddy's server puts its own values over it)
	req = req.WithContext(&ex.ctx)
	ex.plan.srv.ServeHTTP(w, req)
	c.l.stats.delegated.Add(1)
	delegatedTotal.WithLabelValues(ex.plan.name, h.delegate).Inc()
	return served
}

// checkRequest makes Caddy's checks before the routes (Server.serveHTTP
// and its enforcement handler).
func (ex *exchange) checkRequest() error {
	r := ex.req
	if len(r.Method) > 32 {
		return caddyhttp.HandlerError{StatusCode: http.StatusMethodNotAllowed}
	}
	if r.ProtoMinor == 1 && r.Host == "" {
		return caddyhttp.HandlerError{Err: errors.New("rfc9112 forbids empty Host"), StatusCode: http.StatusBadRequest}
	}
	host := r.Host
	if strings.IndexByte(host, ':') >= 0 { // (SplitHostPort allocates its error)
		if h, _, err := splitHostPort(host); err == nil {
			host = h
		}
	}
	if !httpguts.ValidHostHeader(r.Host) || (host != "" && strings.Trim(host, ".") == "") {
		return caddyhttp.HandlerError{Err: errors.New("invalid host"), StatusCode: http.StatusBadRequest}
	}
	if ex.plan.strictSNI && r.TLS != nil {
		if !strings.EqualFold(r.TLS.ServerName, host) {
			err := fmt.Errorf("strict host matching: TLS ServerName (%s) and HTTP Host (%s) values differ", r.TLS.ServerName, host)
			r.Close = true
			return caddyhttp.Error(http.StatusMisdirectedRequest, err)
		}
	}
	return nil
}

// handleError is the end of Caddy's Server.ServeHTTP: the server's error
// routes (handle_errors) answer, or an empty response with the status. The
// error is logged as Caddy logs it: http.log.error (per host logger names
// when the server has access logs), with the request as it came in and
// the duration.
func (ex *exchange) handleError(w http.ResponseWriter, err error, duration time.Duration) {
	p := ex.plan
	status, msg, fields := errValues(err)
	r := ex.req
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok {
		r.Method = orig.Method
		r.RemoteAddr = orig.RemoteAddr
		r.RequestURI = orig.RequestURI
		u := *orig.URL
		*r.URL = u
	}
	loggers := ex.errLoggers(r)
	if p.errRoutes != nil {
		r = p.srv.Errors.WithError(r, err)
		ex.setReq(r)
		ex.err, ex.inErrors = err, true
		if err2 := ex.runRoutes(w, p.errRoutes, 0, ex.endCont()); err2 == nil {
			ex.logError(loggers, zapcore.DebugLevel, msg, duration, fields)
		} else {
			ex.logError(loggers, zapcore.ErrorLevel, "error handling handler error", duration,
				append([]zap.Field{zap.String("error", err2.Error()), zap.Namespace("first_error"), zap.String("msg", msg)}, fields...))
			if he, ok := err.(caddyhttp.HandlerError); ok {
				w.WriteHeader(he.StatusCode)
			} else {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}
		return
	}
	lvl := zapcore.DebugLevel
	if status >= 500 {
		lvl = zapcore.ErrorLevel
	}
	ex.logError(loggers, lvl, msg, duration, fields)
	w.WriteHeader(status)
}

// errLoggers are the loggers of the request's error: http.log.error, or
// with access logs the names the request's host maps to.
func (ex *exchange) errLoggers(r *http.Request) []*zap.Logger {
	p := ex.plan
	if p.access == nil {
		return append(ex.logScratch[:0], p.errLogger)
	}
	return p.access.loggers(ex.logScratch[:0], p.errLogger, ex.vars, r.Host)
}

func (ex *exchange) logError(loggers []*zap.Logger, lvl zapcore.Level, msg string, duration time.Duration, fields []zap.Field) {
	var all []zap.Field
	for _, l := range loggers {
		ce := l.Check(lvl, msg)
		if ce == nil {
			continue
		}
		if all == nil {
			all = append([]zap.Field{
				zap.Object("request", (*loggedRequest)(ex)),
				zap.Duration("duration", duration),
			}, fields...)
		}
		ce.Write(all...)
	}
	clear(loggers)
}

// errValues is Caddy's errLogValues: the status, message and log fields of
// a handler error.
func errValues(err error) (int, string, []zap.Field) {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		msg := err.Error()
		if he.Err != nil {
			msg = he.Err.Error()
		}
		return he.StatusCode, msg, []zap.Field{
			zap.Int("status", he.StatusCode),
			zap.String("err_id", he.ID),
			zap.String("err_trace", he.Trace),
		}
	}
	return http.StatusInternalServerError, err.Error(), []zap.Field{zap.Error(err)}
}

// exchangeKey finds the exchange of a request in its context.
type exchangeKey struct{}

// metricsNext is the "next" of the plan's metrics-instrumented routes: it
// resumes the plan of the request's exchange where the route began, with
// the response writer that counts.
type metricsNext struct{}

func (metricsNext) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	ex := r.Context().Value(exchangeKey{}).(*exchange)
	k := ex.resume
	ex.resume = nil
	return k.ServeHTTP(w, r)
}
