package fastpath

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apigate/gateway/internal/deny"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// An HTTP/2 stream: its request made from the header block, its handler
// run on a worker (workers.go), its body read as the windows allow, its
// end. The connection's side is h2.go, the response writer h2writer.go.

// h2stream is one stream, with the request state the plan serves it with.
type h2stream struct {
	st   state // the exchange and head; st.h2 is the stream
	sc   *h2conn
	id   uint32
	tls  *tls.ConnectionState
	w    h2Writer
	body h2Body

	declLen      int64 // the request's Content-Length (-1: unknown)
	remoteDone   bool  // END_STREAM received
	localDone    bool  // END_STREAM sent
	reset        bool  // RST_STREAM sent or received
	closedMap    bool  // out of the connection's streams
	lingering    bool  // the handler is done, the client still sends the body
	sendWin      int64
	recvWin      int64
	recvUnacked  int64
	received     int64 // DATA bytes received (Content-Length check)
	tooLarge     bool  // the header block was over the limit: 431
	needContinue bool
	trailer      http.Header // declared request trailers (delegated requests)
	delegateReq  *http.Request
	writeDL      time.Time // write_timeout's deadline (zero: none)
	readDL       time.Time // read_timeout's deadline
	ownReadDL    bool      // a handler set it (http.ResponseController): read_body_idle no longer applies
	fields       []field
}

var h2streamPool = sync.Pool{New: func() any {
	s := &h2stream{}
	s.st.h2 = s
	s.st.ex.init(&s.st)
	s.w.s = s
	s.w.bw = bufio.NewWriterSize(h2ChunkWriter{&s.w}, h2WriteChunk)
	s.body.s = s
	return s
}}

func (s *h2stream) streamUpdate() uint32 {
	if s.recvUnacked < h2InitialWindow/4 && s.recvWin > 0 || s.remoteDone {
		if s.remoteDone {
			s.recvUnacked = 0
		}
		return 0
	}
	n := s.recvUnacked
	s.recvUnacked = 0
	s.recvWin += n
	return uint32(n)
}

func (s *h2stream) begin(sc *h2conn, id uint32) {
	s.sc, s.id, s.tls = sc, id, sc.tls
	s.st.c = sc.c
	s.declLen = -1
	s.remoteDone, s.localDone, s.reset, s.closedMap, s.lingering = false, false, false, false, false
	s.sendWin, s.recvWin, s.recvUnacked, s.received = 0, h2InitialWindow, 0, 0
	s.tooLarge, s.needContinue = false, false
	s.trailer, s.delegateReq = nil, nil
	s.st.ex.gone.reset()
	s.body.reset()
	s.w.reset()
}

// free gives the stream back to the pool, once its handler returned and
// the connection forgot it.
func (s *h2stream) free() {
	s.st.ex.clear()
	s.st.c = nil
	s.sc = nil
	s.tls = nil
	s.trailer, s.delegateReq = nil, nil
	clear(s.fields)
	s.fields = s.fields[:0]
	s.st.head = reqHead{}
	s.body.data = s.body.data[:0]
	if cap(s.body.data) > 64<<10 {
		s.body.data = nil
	}
	h2streamPool.Put(s)
}

// cancel ends the stream's context (the exchange's goneState: Err says
// so in the same step as its channel closes, since what the channel wakes
// (afterGone's f: a derived context's cancel) reads Err and panics on nil,
// "missing cancel error", seen in TestH2 runs).
func (s *h2stream) cancel() { s.st.ex.gone.cancel() }

// readHeaders makes the stream's request head from its header block, as
// Go's HTTP/2 server makes the request: a malformed one is a stream
// error (PROTOCOL_ERROR).
func (s *h2stream) readHeaders(f *h2block) error {
	protoErr := http2.StreamError{StreamID: s.id, Code: http2.ErrCodeProtocol}
	h := &s.st.head
	*h = reqHead{h2: true, proto: "HTTP/2.0", contentLength: -1}
	var scheme, authority, protocol string
	for _, hf := range f.pseudo() {
		switch hf.Name {
		case ":method":
			h.method = hf.Value
		case ":path":
			h.target = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":protocol":
			protocol = hf.Value
		default:
			return protoErr // (:status, or unknown)
		}
	}
	if protocol != "" {
		return protoErr // extended CONNECT is not enabled
	}
	if h.method == "CONNECT" {
		if h.target != "" || scheme != "" || authority == "" {
			return protoErr
		}
	} else if h.method == "" || h.target == "" || scheme != "https" && scheme != "http" {
		return protoErr
	} else if h.target[0] != '/' && h.target != "*" {
		return protoErr // absolute or authority form (RFC 9113 8.3.1; Go's "bad_path")
	}
	if f.truncated {
		s.tooLarge = true
	}
	fields := s.fields[:0]
	var cookies []string
	for _, hf := range f.regular() {
		name, connSpecific := canonicalH2(hf.Name)
		if connSpecific || name == "Te" && hf.Value != "trailers" {
			return protoErr
		}
		switch name {
		case "Cookie":
			cookies = append(cookies, hf.Value)
			continue
		case "Content-Length":
			if h.contentLength < 0 {
				if n, err := strconv.ParseUint(hf.Value, 10, 63); err == nil {
					h.contentLength = int64(n)
				} else {
					h.contentLength = 0
				}
			}
		case "Expect":
			if httpguts.HeaderValuesContainsToken([]string{hf.Value}, "100-continue") {
				s.needContinue = true
				continue // (Go's server takes it out of the header)
			}
		case "Trailer":
			h.delegate = "request trailers"
			s.declareTrailers(hf.Value)
		case "Host":
			if authority == "" {
				authority = hf.Value
			}
		}
		if isReworked(name) {
			h.reworked = true
		}
		fields = append(fields, field{name, hf.Value})
	}
	if len(cookies) > 0 {
		fields = append(fields, field{"Cookie", strings.Join(cookies, "; ")})
	}
	if s.needContinue {
		// (Go deletes every Expect field when one asks for 100-continue)
		kept := fields[:0]
		for _, fl := range fields {
			if fl.name != "Expect" {
				kept = append(kept, fl)
			}
		}
		fields = kept
	}
	h.fields = fields
	s.fields = fields
	h.host = authority
	if strings.IndexByte(authority, '@') >= 0 {
		return protoErr // userinfo in :authority
	}
	if f.ended {
		s.declLen = 0
		if h.contentLength > 0 {
			return protoErr // a Content-Length with no body
		}
	} else {
		s.declLen = h.contentLength
	}
	if h.method == "CONNECT" {
		h.delegate = "CONNECT"
		return nil
	}
	if h.target[0] != '/' {
		if _, err := url.ParseRequestURI(h.target); err != nil {
			return protoErr
		}
		h.delegate = "request-target form"
		return nil
	}
	d := h.delegate
	if bad := parseTarget(h); bad != nil {
		return protoErr
	}
	if d != "" {
		h.delegate = d
	}
	return nil
}

// declareTrailers notes the trailers a request declares (Go's server's
// rules: Transfer-Encoding, Trailer and Content-Length cannot be ones).
func (s *h2stream) declareTrailers(v string) {
	for _, k := range strings.Split(v, ",") {
		k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k))
		switch k {
		case "Transfer-Encoding", "Trailer", "Content-Length":
		default:
			if s.trailer == nil {
				s.trailer = make(http.Header)
			}
			s.trailer[k] = nil
		}
	}
}

// requestBody sets the request's body and length, as Go's HTTP/2 server
// does: the Content-Length when the client sent one, -1 while the body is
// open without one, and no body when the HEADERS ended the stream.
func (s *h2stream) requestBody(r *http.Request) {
	s.sc.mu.Lock()
	none := s.declLen == 0 && s.body.eof && s.body.buffered() == 0
	s.sc.mu.Unlock()
	if none {
		r.ContentLength = 0
		r.Body = http.NoBody
		return
	}
	r.ContentLength = s.declLen
	r.Body = &s.body
}

// serveStream runs the stream's request (on a worker) and ends the stream.
func (s *h2stream) serveStream() {
	sc := s.sc
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler {
				sc.l.logger.Error("panic serving an HTTP/2 request on the fast path",
					zap.String("remote", sc.c.remoteAddr), zap.Any("error", r),
					zap.ByteString("stack", debug.Stack()))
			}
			sc.resetStream(s.id, http2.ErrCodeInternal)
		}
		sc.handlerDone(s)
	}()
	now := time.Now()
	st := &s.st
	st.hardRead, st.hardWrite = time.Time{}, time.Time{}
	s.ownReadDL = false
	if d := sc.l.readTimeout; d > 0 {
		s.readDL = now.Add(d)
	} else {
		s.readDL = time.Time{}
	}
	if d := sc.l.writeTimeout; d > 0 {
		s.writeDL = now.Add(d)
	} else {
		s.writeDL = time.Time{}
	}
	s.w.start(&st.head)
	switch {
	case s.tooLarge:
		// (the block was not decoded: no path for the instance)
		body := deny.SetFastPathProblem(s.w.Header(), 431, "request header block too large", "")
		s.w.WriteHeader(431)
		s.w.Write(body)
		sc.l.stats.refused.Add(1)
	case st.head.delegate != "":
		s.delegate(now)
	default:
		st.ex.serve(now)
	}
	s.w.handlerDone()
}

// afterGone is the stream's context.AfterFunc: f runs when the stream is
// reset or the connection ends, unless stop is called first.
func (s *h2stream) afterGone(f func()) (stop func() bool) {
	gone := s.st.ex.gone.channel()
	stopc := make(chan struct{})
	var once sync.Once
	ran := false
	var mu sync.Mutex
	go func() {
		select {
		case <-gone:
			mu.Lock()
			r := false
			once.Do(func() { r = true })
			ran = r
			mu.Unlock()
			if r {
				f()
			}
		case <-stopc:
		}
	}()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		stopped := false
		once.Do(func() { stopped = true; close(stopc) })
		return stopped && !ran
	}
}

// delegate serves a request the plan does not take (CONNECT, an
// absolute or asterisk target, request trailers, an ACME challenge)
// through Caddy's server handler, on the stream, as Go's HTTP/2 server
// would call it.
func (s *h2stream) delegate(now time.Time) {
	sc := s.sc
	h := &s.st.head
	ex := &s.st.ex
	hdr := make(http.Header, len(h.fields))
	for _, f := range h.fields {
		hdr[f.name] = append(hdr[f.name], f.value)
	}
	req := &http.Request{
		Method: h.method, Header: hdr, Proto: "HTTP/2.0", ProtoMajor: 2,
		RemoteAddr: sc.c.remoteAddr, TLS: s.tls, Host: h.host,
	}
	if h.method == "CONNECT" {
		req.URL = &url.URL{Host: h.host}
		req.RequestURI = h.host
	} else {
		u, err := url.ParseRequestURI(h.target)
		if err != nil {
			sc.resetStream(s.id, http2.ErrCodeProtocol)
			return
		}
		req.URL, req.RequestURI = u, h.target
	}
	delete(hdr, "Trailer")
	if s.trailer != nil {
		// (the reader fills it when the trailers arrive, before the
		// body's EOF, as Go's server fills the request's)
		req.Trailer = s.trailer
	}
	s.requestBody(req)
	ex.plan = sc.l.plan
	ex.start, ex.clock = now, now
	req = req.WithContext(&ex.ctx)
	s.delegateReq = req
	s.w.handlerHeader["Server"] = serverHeader // (Caddy's server sets it too; harmless)
	delete(s.w.handlerHeader, "Server")
	ex.plan.srv.ServeHTTP(&s.w, req)
	sc.l.stats.delegated.Add(1)
	delegatedTotal.WithLabelValues(ex.plan.name, h.delegate).Inc()
}

// h2Body is a stream's request body: the DATA the reader received, read by
// the handler; what it reads goes back to the client as window.
type h2Body struct {
	s           *h2stream
	data        []byte
	off         int
	eof         bool // END_STREAM received
	closed      bool // the handler is done with it (or closed it)
	handlerRead int64
}

func (b *h2Body) reset() {
	b.data, b.off, b.eof, b.closed, b.handlerRead = b.data[:0], 0, false, false, 0
}

func (b *h2Body) buffered() int { return len(b.data) - b.off }

func (b *h2Body) discard() { b.data, b.off = b.data[:0], 0 }

func (b *h2Body) add(p []byte) {
	if b.off == len(b.data) {
		b.data, b.off = b.data[:0], 0
	}
	b.data = append(b.data, p...)
}

func (b *h2Body) Read(p []byte) (int, error) {
	s := b.s
	sc := s.sc
	if s.needContinue {
		s.needContinue = false
		s.w.writeContinue()
	}
	sc.mu.Lock()
	var timer *time.Timer
	var dl time.Time
	for b.buffered() == 0 && !b.eof && !b.closed && !s.reset && !sc.closed {
		if dl.IsZero() {
			// read_timeout (or a handler's deadline), and
			// read_body_idle from this read on, as on HTTP/1.1
			dl = s.readDL
			if d := sc.l.readIdleTimeout; d > 0 && !s.ownReadDL {
				if idle := time.Now().Add(d); dl.IsZero() || idle.Before(dl) {
					dl = idle
				}
			}
		}
		if !dl.IsZero() {
			left := time.Until(dl)
			if left <= 0 {
				sc.mu.Unlock()
				return 0, os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.AfterFunc(left, func() {
					sc.mu.Lock()
					sc.cond.Broadcast()
					sc.mu.Unlock()
				})
				defer timer.Stop()
			}
		}
		sc.cond.Wait()
	}
	if b.closed {
		sc.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	if b.buffered() == 0 {
		err := io.EOF
		if !b.eof {
			err = errStreamGone
		}
		sc.mu.Unlock()
		return 0, err
	}
	n := copy(p, b.data[b.off:])
	b.off += n
	b.handlerRead += int64(n)
	s.recvUnacked += int64(n)
	sc.recvUnacked += int64(n)
	supd, cupd := s.streamUpdate(), sc.connUpdate()
	sc.mu.Unlock()
	sc.sendUpdates(s.id, supd, cupd)
	return n, nil
}

func (b *h2Body) Close() error {
	s := b.s
	sc := s.sc
	sc.mu.Lock()
	if !b.closed {
		b.closed = true
		if n := int64(b.buffered()); n > 0 {
			b.discard()
			sc.recvUnacked += n
		}
		sc.cond.Broadcast()
	}
	upd := sc.connUpdate()
	sc.mu.Unlock()
	sc.sendUpdates(0, 0, upd)
	return nil
}

// writable reports why the stream can no longer be written to.
func (s *h2stream) writable() error {
	sc := s.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.closed || sc.wfailed.Load():
		return net.ErrClosed
	case s.reset:
		return errStreamGone
	case s.localDone:
		return errStreamGone
	}
	return nil
}

// canonicalH2 is the canonical form of a (lower-case) HTTP/2 field name,
// without an allocation for the common ones; conn says it is a
// connection-specific field, which HTTP/2 requests may not carry (RFC
// 9113, 8.2.2). A switch, not a map: no hash of the name.
func canonicalH2(name string) (canon string, conn bool) {
	switch name {
	case "accept":
		return "Accept", false
	case "accept-charset":
		return "Accept-Charset", false
	case "accept-encoding":
		return "Accept-Encoding", false
	case "accept-language":
		return "Accept-Language", false
	case "accept-ranges":
		return "Accept-Ranges", false
	case "authorization":
		return "Authorization", false
	case "cache-control":
		return "Cache-Control", false
	case "content-disposition":
		return "Content-Disposition", false
	case "content-encoding":
		return "Content-Encoding", false
	case "content-language":
		return "Content-Language", false
	case "content-length":
		return "Content-Length", false
	case "content-location":
		return "Content-Location", false
	case "content-range":
		return "Content-Range", false
	case "content-type":
		return "Content-Type", false
	case "cookie":
		return "Cookie", false
	case "date":
		return "Date", false
	case "etag":
		return "Etag", false
	case "expect":
		return "Expect", false
	case "forwarded":
		return "Forwarded", false
	case "from":
		return "From", false
	case "host":
		return "Host", false
	case "if-match":
		return "If-Match", false
	case "if-modified-since":
		return "If-Modified-Since", false
	case "if-none-match":
		return "If-None-Match", false
	case "if-range":
		return "If-Range", false
	case "if-unmodified-since":
		return "If-Unmodified-Since", false
	case "origin":
		return "Origin", false
	case "pragma":
		return "Pragma", false
	case "range":
		return "Range", false
	case "referer":
		return "Referer", false
	case "te":
		return "Te", false
	case "trailer":
		return "Trailer", false
	case "user-agent":
		return "User-Agent", false
	case "via":
		return "Via", false
	case "x-forwarded-for":
		return "X-Forwarded-For", false
	case "x-forwarded-host":
		return "X-Forwarded-Host", false
	case "x-forwarded-proto":
		return "X-Forwarded-Proto", false
	case "x-request-id":
		return "X-Request-Id", false
	case "x-real-ip":
		return "X-Real-Ip", false
	case "upgrade-insecure-requests":
		return "Upgrade-Insecure-Requests", false
	case "sec-fetch-dest":
		return "Sec-Fetch-Dest", false
	case "sec-fetch-mode":
		return "Sec-Fetch-Mode", false
	case "sec-fetch-site":
		return "Sec-Fetch-Site", false
	case "sec-fetch-user":
		return "Sec-Fetch-User", false
	case "sec-ch-ua":
		return "Sec-Ch-Ua", false
	case "sec-ch-ua-mobile":
		return "Sec-Ch-Ua-Mobile", false
	case "sec-ch-ua-platform":
		return "Sec-Ch-Ua-Platform", false
	case "priority":
		return "Priority", false
	case "dnt":
		return "Dnt", false
	case "api-key":
		return "Api-Key", false
	case "x-api-key":
		return "X-Api-Key", false
	case "grpc-timeout":
		return "Grpc-Timeout", false
	case "grpc-encoding":
		return "Grpc-Encoding", false
	case "grpc-accept-encoding":
		return "Grpc-Accept-Encoding", false
	case "baggage":
		return "Baggage", false
	case "traceparent":
		return "Traceparent", false
	case "tracestate":
		return "Tracestate", false
	case "connection":
		return "Connection", true
	case "proxy-connection":
		return "Proxy-Connection", true
	case "keep-alive":
		return "Keep-Alive", true
	case "transfer-encoding":
		return "Transfer-Encoding", true
	case "upgrade":
		return "Upgrade", true
	}
	return textproto.CanonicalMIMEHeaderKey(name), false
}
