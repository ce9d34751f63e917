package fastpath

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/http/httpguts"

	"github.com/apigate/gateway/caddyh1"
	"github.com/apigate/gateway/internal/h1wire"
)

// proxyStep is Caddy's reverse_proxy handler run on the plan, with its
// provisioned instance: the same upstreams and their Host state (requests
// in flight, passive health failures), the same selection policy and
// dynamic upstream source, the same h1 connection pools, retries as
// lb_retries, lb_try_duration and lb_try_interval set them, and the same
// header operations. Each step below follows reverseproxy.Handler in the
// pinned Caddy release (ServeHTTP, prepareRequest, addForwardedHeaders,
// proxyLoopIteration, reverseProxy, finalizeResponse, copyResponse,
// tryAgain, statusError); what it leaves out is per-request work whose
// result nobody reads (placeholders no config string uses, debug logs when
// debug logging is off).
type proxyStep struct {
	h         *reverseproxy.Handler
	transport *caddyh1.Transport // nil: another transport, called as Caddy calls it
	transOps  *headers.HeaderOps // the transport's own header operations (HTTPS: Host)
	dynamic   reverseproxy.UpstreamSource
	caching   reverseproxy.CachingUpstreamSource
	lb        *reverseproxy.LoadBalancing
	passive   *reverseproxy.PassiveHealthChecks
	reqOps    *headers.HeaderOps
	respOps   *headers.RespHeaderOps
	// plain: the step may send a client's fields as they came (no
	// header_up, no transport header operations, a selection policy and
	// retry matchers that read no field the proxy adds), prepare's plain
	// lane
	plain bool
	// fieldFree: on the plain lane, nothing of the step reads the
	// request's header map (a selection policy that reads no field, no
	// dynamic upstreams), so the map need not be filled (exchange.header)
	fieldFree bool
	logger    *zap.Logger

	static map[*reverseproxy.Upstream]dialInfo
	dials  sync.Map // dial address -> dialInfo, for dynamic upstreams
	ndials int
	mu     sync.Mutex
}

// dialInfo is reverseproxy.DialInfo without the upstream.
type dialInfo struct {
	network, address, host, port string
}

func parseDial(dial string) (dialInfo, error) {
	addr, err := caddy.ParseNetworkAddress(dial)
	if err != nil {
		return dialInfo{}, fmt.Errorf("upstream %s: invalid dial address %s: %v", dial, dial, err)
	}
	if n := addr.PortRangeSize(); n != 1 {
		return dialInfo{}, fmt.Errorf("upstream %s: dial address must represent precisely one socket: %s represents %d", dial, dial, n)
	}
	return dialInfo{
		network: addr.Network,
		address: addr.JoinHostPort(0),
		host:    addr.Host,
		port:    strconv.Itoa(int(addr.StartPort)),
	}, nil
}

func (p *proxyStep) dialInfo(u *reverseproxy.Upstream) (dialInfo, error) {
	if di, ok := p.static[u]; ok {
		return di, nil
	}
	if v, ok := p.dials.Load(u.Dial); ok {
		return v.(dialInfo), nil
	}
	di, err := parseDial(u.Dial)
	if err != nil {
		return di, err
	}
	p.mu.Lock()
	if p.ndials < 4096 { // bounded: dynamic sources name few replicas
		p.dials.Store(u.Dial, di)
		p.ndials++
	}
	p.mu.Unlock()
	return di, nil
}

// errNoUpstream has the text of reverse_proxy's own.
var errNoUpstream = errors.New("no upstreams available")

// proxyState is a connection's reusable state for proxying: the outgoing
// request with its URL and header, and the connection's 1xx forwarding.
type proxyState struct {
	ex     *exchange
	out    http.Request
	tmpl   http.Request // carries the context with the 1xx trace
	url    url.URL
	hdr    http.Header
	opsHdr http.Header
	trace  httptrace.ClientTrace
	curW   http.ResponseWriter
	xfh    []string
	ph     phState
	body   nopCloserIfNotRead
	ctx    outCtx
	// reuse holds the h1 transport's response (with its header map and
	// body reader) for the request in hand: none made per request
	reuse caddyh1.Reuse
	taken []namedValues // scratch: the taken map's fields (takeHeader)
	// res is the upstream's response in hand, and emptyTo the writer
	// takeHeader gave its map to empty (LazyHeader): fillUp fills it
	res     *http.Response
	emptyTo headerHolder
	// plainHead is the head whose fields WriteFields writes upstream
	// (the plain lane, prepare), with the fields addForwarded would add
	plainHead *reqHead
	fwd       forwarded
}

// forwarded is what addForwarded adds to a request that has no
// X-Forwarded-* field (the plain lane writes them itself).
type forwarded struct {
	on      bool   // X-Forwarded-Proto and -Host are added
	xff     string // X-Forwarded-For ("": none)
	proto   string
	host    string
	viaBody string // Via
}

var (
	emptyValue   = []string{""}
	teTrailers   = []string{"trailers"}
	protoHTTP    = []string{"http"}
	protoHTTPS   = []string{"https"}
	via11        = []string{"1.1 Caddy"}
	via10        = []string{"1.0 Caddy"}
	via20        = []string{"2.0 Caddy"}
	viaResponse1 = "1.1 Caddy"
	viaResponse0 = "1.0 Caddy"
	viaRequest2  = "2.0 Caddy" // (an HTTP/2 request's, upstream)
)

func (ps *proxyState) init(ex *exchange) {
	ps.ex = ex
	ps.hdr = make(http.Header, 16)
	ps.trace.Got1xxResponse = ps.got1xx
	ps.ctx = outCtx{exCtx: &ex.ctx, trace: httptrace.WithClientTrace(context.Background(), &ps.trace)}
	ps.tmpl = *(&http.Request{}).WithContext(&ps.ctx)

}

// end forgets the request.
func (ps *proxyState) end() {
	ps.curW = nil
	ps.out.Body = nil
	ps.ph = phState{}
	ps.res, ps.emptyTo = nil, nil
}

// fillUp fills the upstream's header map (ph.header, res.Header) when the
// transport left it empty (caddyh1.Reuse.LazyHeader), for a reader of the
// map: the transport fills it from its list before takeHeader takes it,
// the writer from its list of fields after.
func (ps *proxyState) fillUp() {
	if ps.res == nil {
		return
	}
	if ps.emptyTo != nil {
		ps.emptyTo.fillMap()
		ps.emptyTo = nil
		return
	}
	ps.reuse.FillHeader(ps.res)
}

// got1xx forwards an informational response to the client, as
// reverse_proxy's trace does.
func (ps *proxyState) got1xx(code int, header textproto.MIMEHeader) error {
	rw := ps.curW
	if rw == nil {
		return nil
	}
	h := rw.Header()
	own := h.Clone()
	up := http.Header(header).Clone()
	stripHopByHop(up)
	copyHeader(h, up)
	rw.WriteHeader(code)
	clear(h)
	maps.Copy(h, own)
	return nil
}

// prepare makes the request for the upstream from r, as reverse_proxy's
// cloneRequest and prepareRequest do. With plain (the plain lane), the
// client's fields go upstream as they came (WriteFields), not through a
// copy of the header map: the caller vouches that r's header is the one
// begin made from the head and that nothing reads or changes the copy.
func (ps *proxyState) prepare(r *http.Request, derived, plain bool) *http.Request {
	var out *http.Request
	if derived { // a request a handler made: its own context, with the trace
		out = r.WithContext(httptrace.WithClientTrace(r.Context(), &ps.trace))
	} else {
		out = &ps.out
		*out = ps.tmpl
		out.Method = r.Method
		out.Proto, out.ProtoMajor, out.ProtoMinor = r.Proto, r.ProtoMajor, r.ProtoMinor
		out.Body = r.Body
		out.ContentLength = r.ContentLength
		out.TransferEncoding = r.TransferEncoding
		out.Host = r.Host
		out.RemoteAddr = r.RemoteAddr
		out.RequestURI = r.RequestURI
		out.TLS = r.TLS
	}
	ps.url = *r.URL
	ps.url.Scheme, ps.url.Host = "", ""
	if ps.url.User != nil {
		u := *ps.url.User
		ps.url.User = &u
	}
	out.URL = &ps.url
	if plain && ps.preparePlain(r, out) {
		tookPlain()
		return out
	}
	ps.reuse.Fields = nil
	ps.ex.header()
	// the client's fields but the hop-by-hop ones, in one pass (the
	// fields the Connection field names go after it, as reverse_proxy's
	// removeConnectionHeaders then its hop-by-hop loop)
	// The copy also notes the fields the steps below look up, so that
	// an absent one costs no lookup (five lookups were ~600 instructions a
	// request, callgrind).
	hdr := ps.hdr
	clear(hdr)
	var seen uint8
	conn := false
	for k, v := range r.Header {
		if isHopHeader(k) {
			switch k {
			case "Connection":
				conn = true
			case "Te":
				if httpguts.HeaderValuesContainsToken(v, "trailers") {
					hdr["Te"] = teTrailers
				}
			}
			continue
		}
		switch k {
		case "User-Agent":
			seen |= seenUA
		case "Via":
			seen |= seenVia
		case "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host":
			seen |= seenXF
		}
		hdr[k] = v
	}
	out.Header = hdr
	out.Trailer = nil

	if out.ContentLength == 0 {
		out.Body = nil
	}
	out.Close = false
	if seen&seenUA == 0 {
		hdr["User-Agent"] = emptyValue
	}
	if conn { // (what it removes stays seen: a lookup finds it gone)
		removeListed(hdr, r.Header["Connection"])
	}
	ps.addForwarded(out, seen&seenXF != 0)
	var v []string
	ok := false
	if seen&seenVia != 0 {
		v, ok = hdr["Via"]
	}
	if ok {
		hdr["Via"] = append(v[:len(v):len(v)], strconv.Itoa(out.ProtoMajor)+"."+strconv.Itoa(out.ProtoMinor)+" Caddy")
	} else if out.ProtoMajor == 2 {
		hdr["Via"] = via20
	} else if out.ProtoMinor == 1 {
		hdr["Via"] = via11
	} else {
		hdr["Via"] = via10
	}
	return out
}

// preparePlain is prepare's plain lane: for a request from the head in
// hand whose fields reverse_proxy would send unchanged (no hop-by-hop
// field, no Via, X-Forwarded-* or Pragma: reqHead.reworked), the
// upstream request shares the client's header map (read, never written:
// the selection policy, the transport's framing and replay rules) and
// the transport writes the fields from the head (WriteFields), with the
// ones reverse_proxy adds. It reports false for another head.
func (ps *proxyState) preparePlain(r, out *http.Request) bool {
	h := &ps.ex.st.head
	if h.reworked || h.pragmaNoCache {
		return false
	}
	for _, name := range ps.ex.edits {
		if !plainEdit(name, r.Header[name]) {
			return false
		}
	}
	out.Header = r.Header
	out.Trailer = nil
	if out.ContentLength == 0 {
		out.Body = nil
	}
	out.Close = false
	// addForwarded, for a request without X-Forwarded-* fields
	c := ps.ex.st.c
	trusted, _ := ps.ex.vars[caddyhttp.TrustedProxyVarKey].(bool)
	unix := out.RemoteAddr == "@"
	f := &ps.fwd
	*f = forwarded{viaBody: viaResponse1}
	if out.ProtoMajor == 2 {
		f.viaBody = viaRequest2
	} else if out.ProtoMinor == 0 {
		f.viaBody = viaResponse0
	}
	if !(unix && !trusted || !unix && !c.ipOK) {
		f.on = true
		if !unix {
			f.xff = c.xff[0]
		}
		f.proto, f.host = "http", out.Host
		if out.TLS != nil {
			f.proto = "https"
		}
	}
	ps.plainHead = h
	ps.reuse.Fields = ps
	return true
}

// plainEdit reports whether the plain lane can write a field a handler
// changed (fieldedits) from the request's map: one reverse_proxy or the
// transport does not treat apart, with a valid name and values (the map's
// copy refuses an invalid one).
func plainEdit(name string, values []string) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Upgrade", "User-Agent", "Cache-Control":
		return false
	}
	if isHopHeader(name) || !h1wire.ValidToken(name) {
		return false
	}
	if strings.HasPrefix(name, "X-Forwarded-") || name == "Via" || name == "Pragma" {
		return false
	}
	for _, v := range values {
		if !h1wire.ValidFieldValue(v) {
			return false
		}
	}
	return true
}

// WriteFields writes the plain lane's fields upstream (caddyh1.FieldWriter):
// the client's, as prepare's copy and the transport's write would (Host
// and the framing fields are the transport's, the first User-Agent only,
// no name with "_" or "." as Caddy's server drops them) but those a
// handler changed, then those as the handler left them in the request's
// map, then X-Forwarded-For, -Proto, -Host and Via.
func (ps *proxyState) WriteFields(bw *bufio.Writer) {
	var out h1wire.Fields
	out.Start(bw)
	ua := false
	edits := ps.ex.edits
	for i := range ps.plainHead.fields {
		f := &ps.plainHead.fields[i]
		if len(edits) > 0 && slices.Contains(edits, f.name) {
			continue
		}
		switch f.name {
		case "Host", "Content-Length", "Transfer-Encoding":
			continue
		case "User-Agent":
			if ua {
				continue
			}
			ua = true
			if f.value == "" {
				continue
			}
		}
		if strings.IndexByte(f.name, '_') >= 0 || strings.IndexByte(f.name, '.') >= 0 {
			continue
		}
		out.Add(f.name, h1wire.TrimOWS(f.value))
	}
	hdr := ps.ex.shadow.Header
	for i, name := range edits {
		if slices.Contains(edits[:i], name) {
			continue
		}
		for _, v := range hdr[name] {
			out.Add(name, h1wire.TrimOWS(v))
		}
	}
	fw := &ps.fwd
	if fw.xff != "" {
		out.Add("X-Forwarded-For", fw.xff)
	}
	if fw.on {
		out.Add("X-Forwarded-Proto", fw.proto)
		out.Add("X-Forwarded-Host", fw.host)
	}
	out.Add("Via", fw.viaBody)
	out.Done()
}

// Field answers for the plain lane's request (caddyh1.FieldWriter) what
// its header map would: the map's first value of name once the map is
// filled (it then holds what a handler changed), else the head's.
func (ps *proxyState) Field(name string) (string, bool) {
	if ps.ex.hdrFilled {
		v, ok := ps.ex.hdr[name]
		if len(v) == 0 {
			return "", ok
		}
		return v[0], true
	}
	return ps.plainHead.firstValue(name, true)
}

// the fields of the client's request prepare looks up (seen: present,
// or may be)
const (
	seenUA uint8 = 1 << iota
	seenVia
	seenXF // any X-Forwarded-* field
)

// addForwarded is reverse_proxy's addForwardedHeaders: from a trusted
// proxy (trusted_proxies), X-Forwarded-For grows and the proxy's
// X-Forwarded-Proto and X-Forwarded-Host are kept; from anyone else they
// are replaced. xf is false when out's header has no X-Forwarded-* field.
func (ps *proxyState) addForwarded(out *http.Request, xf bool) {
	hdr := out.Header
	c := ps.ex.st.c
	trusted, _ := ps.ex.vars[caddyhttp.TrustedProxyVarKey].(bool)
	unix := out.RemoteAddr == "@"
	if unix && !trusted || !unix && !c.ipOK {
		if xf {
			delete(hdr, "X-Forwarded-For")
			delete(hdr, "X-Forwarded-Proto")
			delete(hdr, "X-Forwarded-Host")
		}
		return
	}
	if !xf {
		if !unix {
			hdr["X-Forwarded-For"] = c.xff
		}
		if out.TLS == nil {
			hdr["X-Forwarded-Proto"] = protoHTTP
		} else {
			hdr["X-Forwarded-Proto"] = protoHTTPS
		}
		ps.setXFH(hdr, out.Host)
		return
	}
	if v, ok := hdr["X-Forwarded-For"]; !(ok && v == nil) {
		switch {
		case trusted && len(v) > 0 && strings.Join(v, ", ") != "":
			prior := strings.Join(v, ", ")
			if !unix {
				prior += ", " + c.xff[0]
			}
			hdr["X-Forwarded-For"] = []string{prior}
		case !unix:
			hdr["X-Forwarded-For"] = c.xff
		}
	}
	if v, ok := hdr["X-Forwarded-Proto"]; !(ok && v == nil) {
		switch {
		case trusted && len(v) > 0 && v[len(v)-1] != "":
			hdr["X-Forwarded-Proto"] = v[len(v)-1:]
		case out.TLS == nil:
			hdr["X-Forwarded-Proto"] = protoHTTP
		default:
			hdr["X-Forwarded-Proto"] = protoHTTPS
		}
	}
	if v, ok := hdr["X-Forwarded-Host"]; !(ok && v == nil) {
		if trusted && len(v) > 0 && v[len(v)-1] != "" {
			hdr["X-Forwarded-Host"] = v[len(v)-1:]
		} else {
			ps.setXFH(hdr, out.Host)
		}
	}
}

// setXFH sets X-Forwarded-Host to host, in a slice kept while the host
// stays the same.
func (ps *proxyState) setXFH(hdr http.Header, host string) {
	if len(ps.xfh) != 1 || ps.xfh[0] != host {
		ps.xfh = []string{host}
	}
	hdr["X-Forwarded-Host"] = ps.xfh
}

func (p *proxyStep) module() caddyhttp.MiddlewareHandler { return p.h }

func (p *proxyStep) serve(ex *exchange, w http.ResponseWriter, next *cont) error {
	r := ex.req
	ps := &ex.px
	derived := r != &ex.shadow
	// the plain lane: nothing but the plan's own steps, matchers that
	// change no request and handlers that name the fields they change
	// ran, so r's header is the head's but for those
	plain := plainLane(p.plain && !derived && !ex.fieldsChanged && ex.plan.pureMatchers)
	if !p.fieldFree { // (the selection policy reads fields; prepare fills the map off the plain lane)
		ex.header()
	}
	out := ps.prepare(r, derived, plain)
	reqHost, reqHeader := out.Host, out.Header
	ps.curW = w
	if out.Body != nil {
		// as reverse_proxy: a transport that closes the body after a dial
		// error must not close it for the next attempt
		ps.body = nopCloserIfNotRead{ReadCloser: out.Body}
		out.Body = &ps.body
	}

	// (the request's clock reading: its start, unless a handler ran
	// before this step, whose time is not the upstream's)
	start := ex.clock
	if ex.delegatedRan || start.IsZero() {
		start = time.Now()
		ex.clock = start
	}
	ps.reuse.Now = start
	var proxyErr error
	retries := 0
	for {
		var done bool
		done, proxyErr = p.attempt(ex, out, w, proxyErr, start, retries, reqHeader, reqHost)
		if done {
			break
		}
		retries++
	}
	ph := &ps.ph
	ph.duration, ph.retries, ph.done = ex.clock.Sub(start), retries, true
	if proxyErr != nil {
		return statusError(proxyErr)
	}
	return nil
}

// phState is what reverse_proxy's placeholders name for the request in
// hand ({http.reverse_proxy.upstream.address}, status_code, header.*, ...).
// reverse_proxy sets them on the replacer as it goes; the plan records
// them here and the state's replacer finds them through placeholder, so a
// request pays for a placeholder only when a config string uses it.
type phState struct {
	selected                 bool // an upstream was chosen
	di                       dialInfo
	requests, maxReqs, fails int
	gotHead                  bool // a response head arrived
	latency                  time.Duration
	status                   int
	statusText               string
	header                   http.Header
	// the fields finalize removed from header (takeHeader, keepHead),
	// and whether it put its own Via first (takeHeader)
	hop    [maxHopTaken]namedValues
	nhop   int
	viaOwn bool

	copied     bool // the body was copied
	upDuration time.Duration
	done       bool // the handler ended
	duration   time.Duration
	retries    int
}

const rpPrefix = "http.reverse_proxy."

// placeholder is the replacer provider of reverse_proxy's placeholders.
func (ps *proxyState) placeholder(key string) (any, bool) {
	if len(key) <= len(rpPrefix) || key[:len(rpPrefix)] != rpPrefix {
		return nil, false
	}
	ph := &ps.ph
	k := key[len(rpPrefix):]
	if ph.selected {
		switch k {
		case "upstream.address":
			return dialString(ph.di), true
		case "upstream.hostport":
			return ph.di.address, true
		case "upstream.host":
			return ph.di.host, true
		case "upstream.port":
			return ph.di.port, true
		case "upstream.requests":
			return ph.requests, true
		case "upstream.max_requests":
			return ph.maxReqs, true
		case "upstream.fails":
			return ph.fails, true
		}
	}
	if ph.gotHead {
		switch k {
		case "upstream.latency":
			return ph.latency, true
		case "upstream.latency_ms":
			return ph.latency.Seconds() * 1e3, true
		case "status_code":
			return ph.status, true
		case "status_text":
			return ph.statusText, true
		}
		if f, ok := strings.CutPrefix(k, "header."); ok {
			ps.fillUp()
			if vv, ok := ph.upstreamField(f); ok {
				return strings.Join(vv, ","), true
			}
		}
	}
	if ph.copied {
		switch k {
		case "upstream.duration":
			return ph.upDuration, true
		case "upstream.duration_ms":
			return ph.upDuration.Seconds() * 1e3, true
		}
	}
	if ph.done {
		switch k {
		case "duration":
			return ph.duration, true
		case "duration_ms":
			return ph.duration.Seconds() * 1e3, true
		case "retries":
			return ph.retries, true
		}
	}
	return nil, false
}

// upstreamField is the upstream's field f as its response head had it
// (after finalize's removal of the fields its Connection field names, as
// before a taken header).
func (ph *phState) upstreamField(f string) ([]string, bool) {
	for _, h := range ph.hop[:ph.nhop] {
		if h.name == f {
			return h.values, true
		}
	}
	vv, ok := ph.header[f]
	if ok && f == "Via" && ph.viaOwn {
		if vv = vv[1:]; len(vv) == 0 {
			return nil, false
		}
	}
	return vv, ok
}

// attempt is one iteration of reverse_proxy's proxy loop: it reports
// whether the loop is done, and the error to carry on.
func (p *proxyStep) attempt(ex *exchange, out *http.Request, w http.ResponseWriter, proxyErr error, start time.Time, retries int,
	reqHeader http.Header, reqHost string,
) (bool, error) {
	upstreams := p.h.Upstreams
	if p.dynamic != nil {
		if retries > 0 && p.caching != nil {
			if err := p.caching.ResetCache(out); err != nil {
				if ce := p.logger.Check(zapcore.ErrorLevel, "failed clearing dynamic upstream source's cache"); ce != nil {
					ce.Write(zap.Error(err))
				}
			}
		}
		dUpstreams, err := p.dynamic.GetUpstreams(out)
		if err != nil {
			if ce := p.logger.Check(zapcore.ErrorLevel, "failed getting dynamic upstreams; falling back to static upstreams"); ce != nil {
				ce.Write(zap.Error(err))
			}
		} else {
			upstreams = dUpstreams
			for _, u := range dUpstreams {
				handlerProvisionUpstream(*p.h, u, true)
			}
		}
	}

	upstream := p.lb.SelectionPolicy.Select(upstreams, out, w)
	if upstream == nil {
		if proxyErr == nil {
			proxyErr = caddyhttp.Error(http.StatusServiceUnavailable, errNoUpstream)
		}
		if !p.tryAgain(ex, start, retries, proxyErr, out) {
			return true, proxyErr
		}
		return false, proxyErr
	}
	di, err := p.dialInfo(upstream)
	if err != nil {
		return true, fmt.Errorf("making dial info: %v", err)
	}
	ph := &ex.px.ph
	ph.selected, ph.gotHead, ph.copied = true, false, false
	ph.di, ph.requests, ph.maxReqs, ph.fails = di, upstream.Host.NumRequests(), upstream.MaxRequests, upstream.Host.Fails()

	if p.transOps != nil || p.reqOps != nil {
		h := ex.px.opsHdr
		if h == nil {
			h = make(http.Header, len(reqHeader))
			ex.px.opsHdr = h
		}
		clear(h)
		copyHeader(h, reqHeader)
		out.Header = h
		out.Host = reqHost
		if p.transOps != nil {
			p.transOps.ApplyToRequest(out)
		}
		if p.reqOps != nil {
			p.reqOps.ApplyToRequest(out)
		}
	}
	// (reverse_proxy refuses an incremental request here only with request
	// buffers or a transport that needs a length, which compile leaves to
	// Caddy's path: so no step reads whether the client's request was
	// incremental. The normalisation below changes nothing in a request
	// that has no length and no body already: no lookup for it.)
	if !(out.ContentLength == 0 && out.Body == nil) && !requestHasContent(out) {
		ex.header() // (the plain lane's out.Header is the request's map)
		if isIncremental(out.Header) {
			out.ContentLength = 0
			out.Body = nil
		}
	}

	rtStart := start // (the first attempt starts when the step does)
	if retries > 0 {
		rtStart = time.Now()
		ex.clock = rtStart
		ex.px.reuse.Now = rtStart
	}
	proxyErr = p.roundTrip(ex, w, out, upstream, di, rtStart)
	if proxyErr == nil {
		return true, nil
	}
	if errors.Is(proxyErr, context.Canceled) {
		w.WriteHeader(499)
		return true, nil
	}
	var succ roundtripSucceeded
	if errors.As(proxyErr, &succ) {
		return true, succ.error
	}
	handlerCountFailure(p.h, upstream)
	if !p.tryAgain(ex, start, retries, proxyErr, out) {
		return true, proxyErr
	}
	return false, proxyErr
}

type roundtripSucceeded struct{ error }

func dialString(di dialInfo) string {
	if di.network == "" || di.network == "tcp" {
		return di.address
	}
	return di.network + "/" + di.address
}

// roundTrip is reverse_proxy's reverseProxy and finalizeResponse.
func (p *proxyStep) roundTrip(ex *exchange, rw http.ResponseWriter, req *http.Request,
	upstream *reverseproxy.Upstream, di dialInfo, start time.Time,
) error {
	_ = hostCountRequest(upstream.Host, 1)
	incInFlight(di.address)
	_, static := p.static[upstream]
	defer func() {
		_ = hostCountRequest(upstream.Host, -1)
		decInFlight(di.address, static)
	}()
	if (req.URL.Scheme == "http" && di.port == "80") || (req.URL.Scheme == "https" && di.port == "443") {
		req.URL.Host = di.host
	} else {
		req.URL.Host = di.address
	}

	var res *http.Response
	var err error
	ex.px.res, ex.px.emptyTo = nil, nil
	if p.transport != nil {
		// the response's map is built when something reads it (fillUp),
		// unless header_down edits it or the map mode asks for the maps
		ex.px.reuse.LazyHeader = p.respOps == nil && mayTakeHeader()
		res, err = p.transport.RoundTripReuse(req, di.network, di.address, &ex.px.reuse)
	} else {
		ctx := context.WithValue(ex.escape(req.Context()), dialInfoCtxKey, reverseproxy.DialInfo{
			Upstream: upstream, Network: di.network, Address: di.address, Host: di.host, Port: di.port,
		})
		res, err = p.h.Transport.RoundTrip(req.WithContext(ctx))
	}
	ex.clock = time.Now()
	duration := ex.clock.Sub(start)
	if err != nil {
		if ce := p.logger.Check(zapcore.DebugLevel, "upstream roundtrip"); ce != nil {
			ce.Write(zap.String("upstream", upstream.Dial), zap.Duration("duration", duration), zap.Error(err))
		}
		return err
	}
	if ce := p.logger.Check(zapcore.DebugLevel, "upstream roundtrip"); ce != nil {
		ce.Write(zap.String("upstream", upstream.Dial), zap.Duration("duration", duration), zap.Int("status", res.StatusCode))
	}
	if p.passive != nil {
		for _, bad := range p.passive.UnhealthyStatus {
			if caddyhttp.StatusCodeMatches(res.StatusCode, bad) {
				handlerCountFailure(p.h, upstream)
			}
		}
		if p.passive.UnhealthyLatency > 0 && duration >= time.Duration(p.passive.UnhealthyLatency) {
			handlerCountFailure(p.h, upstream)
		}
	}
	ph := &ex.px.ph
	ph.gotHead, ph.latency, ph.status, ph.statusText, ph.header = true, duration, res.StatusCode, res.Status, res.Header
	ex.px.res = res
	return p.finalize(ex, rw, req, res, start)
}

// finalize is reverse_proxy's finalizeResponse.
func (p *proxyStep) finalize(ex *exchange, rw http.ResponseWriter, req *http.Request, res *http.Response, start time.Time) error {
	names := upAll
	if p.respOps == nil { // (header_down may add any field)
		names = ex.px.upNamesOf(res)
	}
	incremental := false
	if names&upIncremental != 0 {
		ex.px.fillUp()
		incremental = isIncremental(res.Header)
	}
	if p.respOps != nil { // header_down sees the fields without the hop-by-hop ones
		ex.px.ph.keepHead(res.Header, true)
		stripHopByHop(res.Header)
	}

	rwHeader := rw.Header()
	// (reverse_proxy deletes the client's Server field, Caddy's own: the
	// copy below does, and takeHeader leaves it out of the map it gives,
	// which costs no map delete, ~330 instructions a request, callgrind)
	via := viaResponse1
	if res.ProtoMajor != 1 || res.ProtoMinor != 1 {
		via = strconv.Itoa(res.ProtoMajor) + "." + strconv.Itoa(res.ProtoMinor) + " Caddy"
		if res.ProtoMajor == 1 && res.ProtoMinor == 0 {
			via = viaResponse0
		}
	}
	if p.respOps != nil || len(res.Trailer) > 0 || !mayTakeHeader() || !ex.px.takeHeader(rw, rwHeader, res, via, names) {
		ex.px.fillUp()
		if p.respOps == nil { // (the copy skips the others: one pass fewer)
			ex.px.ph.keepHead(res.Header, false)
			removeConnectionHeaders(res.Header)
		}
		delete(rwHeader, "Server")
		p.copyHeader(rwHeader, res, req, via)
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		rwHeader.Add("Trailer", strings.Join(keys, ", "))
	}
	if sw, ok := rw.(interface{ stableHeader() }); ok {
		sw.stableHeader() // nothing here changes the header until the first write
	}
	rw.WriteHeader(res.StatusCode)

	err := p.copyResponse(rw, res.Body, p.flushInterval(&ex.px, res, incremental, names))
	errClose := res.Body.Close()
	if errClose != nil {
		if ce := p.logger.Check(zapcore.DebugLevel, "closed response body from upstream"); ce != nil {
			ce.Write(zap.Error(errClose))
		}
	}
	if err != nil {
		if ce := p.logger.Check(zapcore.WarnLevel, "aborting with incomplete response"); ce != nil {
			ce.Write(zap.String("upstream", req.URL.Host), zap.Error(err))
		}
		http.NewResponseController(rw).Flush()
		panic(http.ErrAbortHandler)
	}
	if len(res.Trailer) > 0 {
		http.NewResponseController(rw).Flush()
	}
	ph := &ex.px.ph
	ex.clock = time.Now()
	ph.copied, ph.upDuration = true, ex.clock.Sub(start)
	if len(res.Trailer) == 0 { // (no Header call: it would snapshot an uncommitted head)
		return nil
	}
	if len(res.Trailer) == announced {
		copyHeader(rw.Header(), res.Trailer)
		return nil
	}
	for k, vv := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vv {
			rw.Header().Add(k, v)
		}
	}
	return nil
}

// copyHeader is finalizeResponse's header work: the Via field, header_down
// and the upstream's fields but the hop-by-hop ones, added to the
// client's header.
func (p *proxyStep) copyHeader(rwHeader http.Header, res *http.Response, req *http.Request, via string) {
	if v, ok := rwHeader["Via"]; ok {
		rwHeader["Via"] = append(v[:len(v):len(v)], via)
	} else if via == viaResponse1 {
		rwHeader["Via"] = via11
	} else {
		rwHeader["Via"] = []string{via}
	}
	if p.respOps != nil && (p.respOps.Require == nil || p.respOps.Require.Match(res.StatusCode, res.Header)) {
		p.respOps.ApplyTo(res.Header, req.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer))
	}
	canonical := p.transport != nil // (h1's parser canonicalizes the names it reads)
	for k, vv := range res.Header {
		if len(vv) == 0 || isHopHeader(k) {
			continue
		}
		if !canonical {
			k = textproto.CanonicalMIMEHeaderKey(k)
		}
		if old, ok := rwHeader[k]; ok {
			rwHeader[k] = append(old[:len(old):len(old)], vv...)
		} else {
			rwHeader[k] = vv
		}
	}
}

// maxHopTaken is how many hop-by-hop fields an upstream's head may have
// for takeHeader to take it.
const maxHopTaken = 4

// takeHeader makes the upstream's header map the client's when no
// header_down or trailers ask for the copy: the h1 transport's response
// (caddyh1.Reuse) gives its map to the connection's or stream's writer
// for the writer's, instead of a copy field by field (the copy and its
// lookups were 4% of a bare proxied request's instructions, callgrind;
// with a handler's two fields in the client's header, ~4,000
// instructions, the fleet rate limit's profile). It removes the
// hop-by-hop fields and those the Connection field names, keeping them
// for the placeholders ({http.reverse_proxy.header.*} name the upstream's
// head as it came, as reverse_proxy sets them before finalizing), puts
// the Via field first, and then the fields a handler put in the client's
// header (rwHeader) before the upstream's of the same name, as the copy
// would have. It reports false, taking nothing, for any other writer,
// transport or head.
func (ps *proxyState) takeHeader(rw http.ResponseWriter, rwHeader http.Header, res *http.Response, via string, in upNames) bool {
	w, ok := rw.(headerHolder)
	if !ok {
		return false
	}
	held := w.heldHeader()
	if held == nil {
		return false
	}
	names, values, ok := ps.reuse.NameValues(res)
	if !ok {
		return false
	}
	up, ph := res.Header, &ps.ph
	// empty: the transport left the map empty (LazyHeader): the fields
	// are read from the list, and the map is the writer's to fill when
	// something reads it; else the map is edited as the list is
	empty := ps.reuse.HeaderPending(res)
	ph.nhop = 0
	if in&upHop != 0 { // (upNamesOf walked the names: most heads have none)
		for i, k := range names {
			if isHopHeader(k) && !ph.holdHopValues(k, values[i]) {
				return false
			}
		}
	}
	if in&upConnection != 0 && !ph.holdListedOf(names, values) { // the fields the Connection field names go too
		return false
	}
	if !empty {
		for _, h := range ph.hop[:ph.nhop] {
			delete(up, h.name)
		}
	}
	var v []string
	ok = false
	if in&upVia != 0 && !ph.held("Via") {
		if i := slices.Index(names, "Via"); i >= 0 && values[i] != nil {
			v, ok = values[i], true
		}
	}
	if ok {
		v = append([]string{via}, v...)
	} else if via == viaResponse1 {
		v = via11
	} else {
		v = []string{via}
	}
	if !empty {
		up["Via"] = v
	}
	ph.viaOwn = true
	// the map's fields as a list for the writer, which then does not
	// iterate the map (collectFields): the transport's list less the
	// fields taken out, Via as just set, and the handler's fields below
	fields := ps.taken[:0]
	for i, k := range names {
		if values[i] != nil && k != "Via" && !ph.held(k) {
			fields = append(fields, namedValues{k, values[i]})
		}
	}
	fields = append(fields, namedValues{"Via", v})
	checked := true // (the transport checked the upstream's fields: caddyh1's parseHead)
	// the handler's fields but Server (Caddy's, which reverse_proxy
	// deletes: finalize); a map of Server alone is not walked (a walk
	// starts at a random slot: ~300 instructions, callgrind)
	if n := len(rwHeader); n == 0 || n == 1 && rwHeader["Server"] != nil {
		rwHeader = nil
	}
	for k, vv := range rwHeader {
		if k == "Server" {
			continue
		}
		if checked && !fieldWritable(k, vv) {
			checked = false
		}
		// the upstream's field of the same name, found in the list
		// rather than looked up in the map (a handler's fields, such
		// as quota's RateLimit, are mostly new names)
		var old []string
		if k == "Via" {
			old = v
		} else if i := slices.Index(names, k); i >= 0 && !ph.held(k) {
			old = values[i]
		}
		if old != nil {
			vv = append(vv[:len(vv):len(vv)], old...)
			fields = setField(fields, k, vv)
		} else {
			fields = append(fields, namedValues{k, vv})
		}
		if !empty {
			up[k] = vv
		}
	}
	ps.taken = fields
	*held = ps.reuse.TakeHeader(res, *held)
	if empty {
		ps.emptyTo = w
	}
	w.gotHeader(checked, fields, empty)
	tookHeader()
	return true
}

// setField sets the values of the field named k in fields, or adds it.
func setField(fields []namedValues, k string, vv []string) []namedValues {
	for i := range fields {
		if fields[i].name == k {
			fields[i].values = vv
			return fields
		}
	}
	return append(fields, namedValues{k, vv})
}

// held reports whether holdHop took the field k out.
func (ph *phState) held(k string) bool {
	for _, h := range ph.hop[:ph.nhop] {
		if h.name == k {
			return true
		}
	}
	return false
}

// headerHolder is a response writer whose header map takeHeader may
// replace with the upstream's.
type headerHolder interface {
	// heldHeader is the writer's map, or nil when it is no longer the
	// writer's to give (after WriteHeader, or with a snapshot taken)
	heldHeader() *http.Header
	// gotHeader says that takeHeader gave the writer a map; checked:
	// each of its fields is fieldWritable; fields: the map's fields as a
	// list, valid until the request ends; empty: the map holds none of
	// them yet (the transport's LazyHeader), and is filled from fields
	// when something reads it (fillMap)
	gotHeader(checked bool, fields []namedValues, empty bool)
	// fillMap fills a map gotHeader said was empty
	fillMap()
}

func (w *respWriter) heldHeader() *http.Header {
	if w.snapTaken || w.wroteHeader {
		return nil
	}
	return &w.handlerHeader
}

func (w *respWriter) gotHeader(checked bool, fields []namedValues, empty bool) {
	w.fieldsChecked = checked
	w.got(w.handlerHeader, fields, empty)
}

func (w *respWriter) fillMap() { w.fill(w.handlerHeader) }

// takenMap is a writer's record of the map takeHeader gave it (both
// writers').
type takenMap struct {
	// takenFields: the map takeHeader gave, as a list of its fields
	// (nil: the writer walks the map); dropped when the map may change
	takenFields []namedValues
	// mapEmpty: takeHeader gave the map empty (the transport's
	// LazyHeader): takenFields are its fields, put in it when something
	// reads it (fill)
	mapEmpty bool
}

// got records the list of the map's fields, and whether the map, hdr,
// came empty; a list with a trailer field fills it at once (the trailer
// code reads the map).
func (t *takenMap) got(hdr http.Header, fields []namedValues, empty bool) {
	t.takenFields, t.mapEmpty = fields, empty
	if empty && trailerNamed(fields) {
		t.fill(hdr)
	}
}

// fill puts the listed fields in hdr when it came empty.
func (t *takenMap) fill(hdr http.Header) {
	if t.mapEmpty {
		t.mapEmpty = false
		fillFields(hdr, t.takenFields)
	}
}

// fillFields puts fields in hdr (an empty map).
func fillFields(hdr http.Header, fields []namedValues) {
	for _, f := range fields {
		hdr[f.name] = f.values
	}
}

// trailerNamed reports whether fields have one that announces or is a
// trailer ("Trailer", or a name with http.TrailerPrefix): the writers'
// trailer code reads their maps, so a map with such a field is never left
// empty (gotHeader).
func trailerNamed(fields []namedValues) bool {
	for _, f := range fields {
		if f.name == "Trailer" || strings.HasPrefix(f.name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// listFirst is the first value of the field k in fields ("": none).
func listFirst(fields []namedValues, k string) string {
	for _, f := range fields {
		if f.name == k {
			if len(f.values) > 0 {
				return f.values[0]
			}
			return ""
		}
	}
	return ""
}

// keepHead keeps the upstream's head as it came for the placeholders
// before finalize's copy path changes it: the fields its Connection field
// names, or, when whole (header_down may change any field) or when they
// are too many to hold, a copy of the head.
func (ph *phState) keepHead(up http.Header, whole bool) {
	ph.nhop = 0
	if !whole && ph.holdListed(up) {
		return
	}
	ph.nhop = 0
	ph.header = up.Clone()
}

// holdListed holds (holdHop) the fields up's Connection field names;
// false when they are too many.
func (ph *phState) holdListed(up http.Header) bool {
	for k := range listedFields(up["Connection"]) {
		if !ph.holdHop(up, k) {
			return false
		}
	}
	return true
}

// holdListedOf is holdListed after the hop-by-hop walk held the Connection
// field (holdHop), for a head whose names and values are the
// transport's list (NameValues, read instead of the map, which may be
// empty: LazyHeader): the Connection values are taken from what was held,
// and a listed field names does not hold is not looked up (two map lookups
// fewer a response from an upstream that says "Connection: keep-alive",
// ~300 instructions, callgrind).
func (ph *phState) holdListedOf(names []string, values [][]string) bool {
	var conn []string
	for _, h := range ph.hop[:ph.nhop] {
		if h.name == "Connection" {
			conn = h.values
			break
		}
	}
	if len(conn) == 1 && len(conn[0]) == len("keep-alive") && strings.EqualFold(conn[0], "keep-alive") {
		// (what most upstreams send: it names Keep-Alive alone, a
		// hop-by-hop field the walk held; reading the list was ~300
		// instructions, callgrind)
		return true
	}
	for k := range listedFields(conn) {
		if i := slices.Index(names, k); i >= 0 && !ph.holdHopValues(k, values[i]) {
			return false
		}
	}
	return true
}

// holdHop keeps up's field k, when present and not kept yet, for the
// placeholders; false (and nothing kept) when more than maxHopTaken.
func (ph *phState) holdHop(up http.Header, k string) bool {
	return ph.holdHopValues(k, up[k])
}

// holdHopValues is holdHop for the field k whose values are vv (nil: not
// in the head).
func (ph *phState) holdHopValues(k string, vv []string) bool {
	if vv == nil || ph.held(k) {
		return true
	}
	if ph.nhop == maxHopTaken {
		ph.nhop = 0
		return false
	}
	ph.hop[ph.nhop] = namedValues{name: k, values: vv}
	ph.nhop++
	return true
}

// upNames says which of the fields that finalize, takeHeader and
// flushInterval look up are in the upstream's head, from the transport's
// list of its names (caddyh1.Reuse.Names), so that a field the head does
// not have costs no map lookup (four lookups a proxied response, ~150
// instructions each in a head of eight fields, callgrind). upAll (look
// each up) when there is no list, or header_down may have added fields.
type upNames uint8

const (
	upIncremental upNames = 1 << iota
	upConnection
	upVia
	upContentType
	upHop         // a hop-by-hop field (isHopHeader), for takeHeader
	upAll upNames = 1<<iota - 1
)

// upNamesOf is upNames for res.
func (ps *proxyState) upNamesOf(res *http.Response) upNames {
	names, ok := ps.reuse.Names(res)
	if !ok {
		return upAll
	}
	var in upNames
	for _, k := range names {
		switch k {
		case "Incremental":
			in |= upIncremental
		case "Connection":
			in |= upConnection
		case "Via":
			in |= upVia
		case "Content-Type":
			in |= upContentType
		default:
			if isHopHeader(k) {
				in |= upHop
			}
		}
	}
	if in&upConnection != 0 {
		in |= upHop
	}
	return in
}

// flushInterval is reverse_proxy's.
func (p *proxyStep) flushInterval(ps *proxyState, res *http.Response, incremental bool, in upNames) time.Duration {
	if incremental {
		return -1
	}
	if in&upContentType != 0 && isEventStream(ps.upFirst(res, "Content-Type")) {
		return -1
	}
	if res.ContentLength == -1 {
		return -1
	}
	return time.Duration(p.h.FlushInterval)
}

// isEventStream reports whether ct is text/event-stream's media type.
// upFirst is the first value of the upstream's field k, as its head had
// it: from the transport's list when it has one (the map may be empty,
// LazyHeader, or be the writer's now), else from res.Header.
func (ps *proxyState) upFirst(res *http.Response, k string) string {
	if names, values, ok := ps.reuse.NameValues(res); ok {
		if i := slices.Index(names, k); i >= 0 && len(values[i]) > 0 {
			return values[i][0]
		}
		return ""
	}
	return headerGet(res.Header, k)
}

func isEventStream(ct string) bool {
	if len(ct) < len("text/event-stream") || !strings.EqualFold(ct[:len("text/event-stream")], "text/event-stream") {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

var streamBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

var errWritingDownstream = errors.New("writing")

// copyResponse is reverse_proxy's copyResponse and copyBuffer, for flush
// intervals 0 (no explicit flush) and -1 (after every write); a positive
// flush_interval keeps a server on Caddy's path.
func (p *proxyStep) copyResponse(dst http.ResponseWriter, src io.Reader, flushInterval time.Duration) error {
	flush := flushInterval < 0
	if b, ok := src.(interface{ Buffered() int }); flush && (!ok || b.Buffered() == 0) {
		// reverse_proxy flushes the head at once from a timer: it goes out
		// before the body when the body is not there yet (with the body in
		// hand, the handler's first write wins that race). A body that
		// cannot tell (another transport's: HTTP/2 upstreams) may never
		// come before the head is out (a client that sends its body only
		// once it has the head: Caddy's TestH2ToH2CStream)
		http.NewResponseController(dst).Flush()
	}
	bp := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(bp)
	buf := *bp
	for {
		nr, rerr := src.Read(buf)
		if rerr != nil && rerr != io.EOF && rerr != context.Canceled {
			if ce := p.logger.Check(zapcore.ErrorLevel, "reading from backend"); ce != nil {
				ce.Write(zap.Error(rerr))
			}
		}
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			if werr != nil {
				return fmt.Errorf("%w: %v", errWritingDownstream, werr)
			}
			if nr != nw {
				return io.ErrShortWrite
			}
			if flush {
				http.NewResponseController(dst).Flush()
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}

// tryAgain is reverse_proxy's LoadBalancing.tryAgain.
func (p *proxyStep) tryAgain(ex *exchange, start time.Time, retries int, proxyErr error, req *http.Request) bool {
	lb := p.lb
	if lb.TryDuration == 0 && lb.Retries == 0 {
		return false
	}
	if lb.TryDuration > 0 && time.Since(start) >= time.Duration(lb.TryDuration) {
		return false
	}
	if lb.Retries > 0 && retries >= lb.Retries {
		return false
	}
	if proxyErr != nil {
		var dialErr reverseproxy.DialError
		isDialError := errors.As(proxyErr, &dialErr)
		herr, isHandlerError := proxyErr.(caddyhttp.HandlerError)
		if !isDialError && (!isHandlerError || !errors.Is(herr, errNoUpstream)) {
			if lb.RetryMatch == nil && req.Method != http.MethodGet {
				return false
			}
			repl, _ := req.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if repl != nil {
				repl.Set("http.reverse_proxy.is_transport_error", true)
				defer repl.Delete("http.reverse_proxy.is_transport_error")
			}
			match, err := lb.RetryMatch.AnyMatchWithError(req)
			if err != nil {
				p.logger.Error("error matching request for retry", zap.Error(err))
				return false
			}
			if !match {
				return false
			}
		}
	}
	if lb.TryInterval == 0 {
		return true
	}
	timer := time.NewTimer(time.Duration(lb.TryInterval))
	select {
	case <-timer.C:
		return true
	case <-ex.st.c.l.done:
		timer.Stop()
		return false
	}
}

// statusError is reverse_proxy's.
func statusError(err error) error {
	status := http.StatusBadGateway
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		status = http.StatusGatewayTimeout
	}
	if errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "operation was canceled") {
		status = 499
	}
	return caddyhttp.Error(status, err)
}

func removeConnectionHeaders(h http.Header) { removeListed(h, h["Connection"]) }

// removeListed deletes from h the fields a Connection field's values
// (conn) name.
func removeListed(h http.Header, conn []string) {
	for k := range listedFields(conn) {
		delete(h, k)
	}
}

// listedFields yields the canonical names of the fields a Connection
// field's values (conn) name.
func listedFields(conn []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, f := range conn {
			for sf := range strings.SplitSeq(f, ",") {
				switch sf = textproto.TrimString(sf); {
				case sf == "":
					continue
				case strings.EqualFold(sf, "keep-alive"):
					// (the option most upstreams send: no
					// canonicalisation, which was 1.6% of a bare
					// request's instructions)
					sf = "Keep-Alive"
				case strings.EqualFold(sf, "close"):
					sf = "Close"
				default:
					sf = textproto.CanonicalMIMEHeaderKey(sf)
				}
				if !yield(sf) {
					return
				}
			}
		}
	}
}

// isIncremental is caddyhttp.IsIncremental without its cost when the field
// is absent: h.Values canonicalises the constant key on every call (four
// calls were 2.7% of a bare request's instructions).
func isIncremental(h http.Header) bool {
	if _, ok := h["Incremental"]; !ok {
		return false
	}
	return caddyhttp.IsIncremental(h)
}

func stripHopByHop(h http.Header) {
	removeConnectionHeaders(h)
	for k := range h {
		if isHopHeader(k) {
			delete(h, k)
		}
	}
}

// isHopHeader reports whether k is a hop-by-hop field reverse_proxy
// removes (its hopHeaders).
func isHopHeader(k string) bool {
	switch k {
	case "Alt-Svc", "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

func requestHasContent(r *http.Request) bool {
	if r.ContentLength > 0 {
		return true
	}
	if r.ContentLength == 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete, http.MethodTrace, http.MethodConnect:
		return false
	}
	return true
}

// dialInfoCtxKey is reverse_proxy's (an unexported name of an exported
// type): where its transports find the upstream to dial.
const dialInfoCtxKey caddy.CtxKey = "reverse_proxy.dial_info"

// nopCloserIfNotRead is reverse_proxy's bodyNopCloserIfNotRead: a body
// not read yet is not closed, so that another attempt can send it.
type nopCloserIfNotRead struct {
	io.ReadCloser
	read int // bytes read; -1 when the first read found EOF
}

func (b *nopCloserIfNotRead) Read(p []byte) (int, error) {
	if b.read == -1 {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if b.read == 0 && n == 0 && err == io.EOF {
		b.read = -1
	} else {
		b.read += n
	}
	return n, err
}

func (b *nopCloserIfNotRead) Close() error {
	if b.read == 0 {
		return nil
	}
	return b.ReadCloser.Close()
}
