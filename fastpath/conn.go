package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/h1wire"

	"go.uber.org/zap"
)

// conn is one client connection the plan serves: one goroutine reads a
// request, runs the plan, writes the response, and reads the next. While
// a connection is idle it holds no buffers: the request state (buffers,
// parsed head, the exchange) is taken from a pool when the next request's
// first bytes arrive and given back when the connection goes idle.
type conn struct {
	*state // nil while idle

	l          *listener
	nc         net.Conn
	raw        syscall.RawConn // for waiting idle without a buffer; nil on TLS
	tlsConn    *tls.Conn
	tlsState   *tls.ConnectionState
	remoteAddr string
	localAddr  net.Addr

	// the client's address, as Caddy's prepareRequest (client_ip) and
	// reverse_proxy's X-Forwarded-For find it
	clientIP    string
	clientIPAny any // boxed once: the variables map holds it
	xff         []string
	ipOK        bool

	lastMethod string
	// a handler set the request's read or write deadline itself (through
	// http.ResponseController): the server's idle timeouts leave it alone
	// until the next request, as on Caddy's path, where a handler's
	// deadline replaces the server's
	ownReadDL, ownWriteDL bool
	hijacked              bool // a handler took the connection (Hijack)
	isH2                  bool // served by the HTTP/2 engine (h2.go)
	h2                    *h2conn
	headSlack             int // bytes of the head max_header_size does not count (readHead)
	// a head being received while the connection holds no request state
	// (parkHead)
	partial             []byte
	parkScan, parkLimit int
	parkErr             error
	parkRead            func(uintptr) bool
	status              atomic.Int32       // stateIdle, stateActive, stateClosed
	readable            func(uintptr) bool // idleRead, bound once
	idleErr             error              // how idleRead ended, when not with bytes
}

// state is what a connection needs while it has a request: its buffers
// and per-request structures, reused from one request to the next and
// pooled between connections.
type state struct {
	c  *conn
	h2 *h2stream // the HTTP/2 stream whose request this is (h2.go); nil on HTTP/1

	rb   h1wire.Rbuf
	bw   *bufio.Writer
	werr error // sticky write error

	head reqHead
	body reqBody
	w    respWriter
	ex   exchange // the plan's per-request state

	// deadlines as set on nc, and the request's hard limits
	readDL, writeDL     time.Time
	hardRead, hardWrite time.Time
	headDL              bool // read_header_timeout's deadline is set for this head
}

var statePool = sync.Pool{New: func() any { return newState() }}

func newState() *state {
	st := &state{}
	st.rb = h1wire.NewRbuf(nil, readBufferSize) // reads from the connection (acquire)
	st.bw = bufio.NewWriterSize(connWriter{st}, writeBufferSize)
	st.ex.init(st)
	return st
}

const (
	readBufferSize  = 4096
	writeBufferSize = 4096
)

// acquire gives the connection a request state.
func (c *conn) acquire() {
	if c.state != nil {
		return
	}
	st := statePool.Get().(*state)
	countState(1)
	st.c = c
	st.rb.Rd = c.nc
	st.werr = nil
	st.readDL, st.writeDL = time.Time{}, time.Time{}
	c.state = st
}

// release gives the request state back while the connection idles; only
// with nothing buffered and nothing left to write.
func (c *conn) release() {
	st := c.state
	if st == nil || len(st.rb.Buffered()) > 0 || st.bw.Buffered() > 0 {
		return
	}
	// (deadlines stay set on the connection; the next state knows none,
	// so it sets them again)
	st.ex.clear()
	st.c = nil
	st.rb.Rd = nil
	c.state = nil
	countState(-1)
	statePool.Put(st)
}

// statesHeld counts the request states connections hold (taken from
// statePool and not given back) while countStates is set: an idle
// plain-TCP connection holds none (TestIdleHoldsNoState). Off, the
// request path pays one plain load, not an atomic add.
var (
	countStates atomic.Bool
	statesHeld  atomic.Int64
)

func countState(d int64) {
	if countStates.Load() {
		statesHeld.Add(d)
	}
}

const (
	stateNew int32 = iota
	stateActive
	stateIdle
	stateClosed
)

// aLongTimeAgo makes a blocked read return at once.
var aLongTimeAgo = time.Unix(1, 0)

func newConn(l *listener, nc net.Conn) *conn {
	c := &conn{l: l, nc: nc, localAddr: nc.LocalAddr()}
	if ra := nc.RemoteAddr(); ra != nil {
		c.remoteAddr = ra.String()
	}
	if host, _, err := net.SplitHostPort(c.remoteAddr); err == nil {
		host, _, _ = strings.Cut(host, "%")
		c.ipOK = true
		c.xff = []string{host}
		if ip, err := netip.ParseAddr(host); err == nil {
			c.clientIP = ip.String()
		}
	}
	c.clientIPAny = c.clientIP
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	return c
}

// connWriter writes to the connection, moving the write deadline as the
// server's write_idle_timeout asks, and remembers the first error.
type connWriter struct{ st *state }

func (w connWriter) Write(p []byte) (int, error) {
	c := w.st.c
	if c.werr != nil {
		return 0, c.werr
	}
	chunk := c.l.maxWriteChunk
	if c.l.writeIdleTimeout <= 0 || c.ownWriteDL || chunk <= 0 {
		chunk = len(p)
	}
	// with write_idle_timeout, a large write goes in pieces of
	// write_max_chunk, each with the deadline moved (as Caddy's idle
	// timeout writer does), so that a slow reader that keeps reading is
	// not cut
	var n int
	for n < len(p) || len(p) == 0 {
		c.setWriteDeadline()
		m, err := c.nc.Write(p[n:min(len(p), n+chunk)])
		n += m
		if err != nil {
			c.werr = err
			return n, err
		}
		if len(p) == 0 {
			break
		}
	}
	return n, nil
}

func (c *conn) flush() {
	if err := c.bw.Flush(); err != nil && c.werr == nil {
		c.werr = err
	}
}

func (c *conn) checkWrite() error { return c.werr }

func (c *conn) setWriteDeadline() {
	if c.ownWriteDL || c.l.writeIdleTimeout <= 0 && c.hardWrite.IsZero() && c.writeDL.IsZero() {
		return // a handler set the write deadline (http.ResponseController), or none is due
	}
	d, ok := nextDeadline(time.Now(), c.writeDL, c.l.writeIdleTimeout, c.hardWrite)
	if ok {
		c.writeDL = d
		c.nc.SetWriteDeadline(d)
	}
}

func (c *conn) setReadDeadline(t time.Time) {
	if !t.Equal(c.readDL) {
		c.readDL = t
		c.nc.SetReadDeadline(t)
	}
}

// bodyReadDeadline moves the read deadline before a read of the request
// body, as read_idle_timeout (and read_timeout) ask.
func (c *conn) bodyReadDeadline() {
	if c.ownReadDL {
		return // a handler set the read deadline (the timeouts handler, ...)
	}
	d, ok := nextDeadline(time.Now(), c.readDL, c.l.readIdleTimeout, c.hardRead)
	if ok {
		c.readDL = d
		c.nc.SetReadDeadline(d)
	}
}

// serve runs the connection until it closes or is handed to Caddy.
func (c *conn) serve() {
	handedOff := false
	defer func() {
		if r := recover(); r != nil && r != http.ErrAbortHandler {
			c.l.logger.Error("panic serving a request on the fast path",
				zap.String("remote", c.remoteAddr), zap.Any("error", r),
				zap.ByteString("stack", debug.Stack()))
		}
		c.end(handedOff)
	}()

	if tc, ok := c.nc.(*tls.Conn); ok {
		var serveIt bool
		if serveIt, handedOff = c.handshake(tc); !serveIt {
			return
		}
		if c.isH2 {
			c.serveH2(nil)
			return
		}
	}
	if c.raw == nil {
		c.acquire() // (TLS: the state's buffer reads from the TLS connection)
	}
	for first := true; ; first = false {
		keepHeadDL, ok := c.awaitRequest(first)
		if !ok {
			return
		}
		c.status.Store(stateActive)
		c.headDL = keepHeadDL
		b, ok := c.nextHead()
		if !ok {
			return
		}
		if c.head.handoff != "" {
			if c.head.isH2Preface() {
				if ok, reason := c.l.h2Allowed(c.tlsConn != nil); ok && c.tlsConn == nil {
					// h2c with prior knowledge: the preface's bytes go
					// to the HTTP/2 engine with what follows them
					prefix := bytes.Clone(c.rb.Buffered())
					c.rb.Discard(len(prefix))
					c.release()
					c.isH2 = true
					c.serveH2(prefix)
					return
				} else if reason != "" {
					c.l.h2Fallback(reason)
				}
			}
			handedOff = c.handoff(c.head.handoff)
			return
		}
		c.rb.Discard(len(b))
		c.lastMethod = c.head.method

		now := c.startRequest()
		var res result
		switch {
		case c.head.expectFail:
			res = c.ex.expectationFailed()
		case c.head.delegate != "":
			res = c.ex.delegate(now, b)
		default:
			res = c.ex.serve(now)
		}
		if c.hijacked {
			handedOff = true // (the handler's now)
			return
		}
		switch res {
		case served:
		case handOff:
			handedOff = c.handoffRequest(b)
			return
		case abort:
			c.flush()
			return
		}
		if !c.w.finish() || c.werr != nil {
			if c.werr == nil && c.body.unread() {
				// the client may still be sending the body the answer
				// refused (a body limit, a body too large to drain)
				c.closeWriteAndWait()
			}
			return
		}
	}
}

// end closes the connection, unless it was handed off (to Caddy's server
// or a handler that hijacked it), and gives its request state back.
func (c *conn) end(handedOff bool) {
	if !handedOff {
		if c.state != nil {
			c.flush()
		}
		c.nc.Close()
	}
	c.status.Store(stateClosed)
	if c.state != nil {
		st := c.state
		c.state = nil
		st.ex.clear()
		st.c = nil
		st.rb.Reset()
		st.rb.Rd = nil
		st.bw.Reset(connWriter{st})
		countState(-1)
		statePool.Put(st)
	}
	c.l.forget(c)
}

// handshake completes a TLS connection's handshake within
// tls_handshake_timeout. serveIt is false when the connection is done
// with: the handshake failed (a plain HTTP request gets net/http's 400), or
// the client chose a protocol other than HTTP/1.1 and the connection went
// to Caddy's server (handedOff).
func (c *conn) handshake(tc *tls.Conn) (serveIt, handedOff bool) {
	c.tlsConn = tc
	if d := c.l.tlsHandshakeTimeout; d > 0 {
		dl := time.Now().Add(d)
		c.nc.SetReadDeadline(dl)
		c.nc.SetWriteDeadline(dl)
	}
	ctx, cancel := context.WithCancel(c.l.ctx)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
		}
		c.l.debug("TLS handshake error", err.Error())
		return false, false
	}
	c.nc.SetReadDeadline(time.Time{})
	c.nc.SetWriteDeadline(time.Time{})
	st := tc.ConnectionState()
	c.tlsState = &st
	if st.NegotiatedProtocol == "h2" {
		if ok, reason := c.l.h2Allowed(true); !ok {
			c.l.h2Fallback(reason)
			return false, c.handoff("ALPN h2: " + reason)
		}
		c.isH2 = true
		return true, false
	}
	if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "http/1.1" {
		return false, c.handoff("ALPN " + st.NegotiatedProtocol)
	}
	return true, false
}

// awaitRequest waits for the next request's first bytes: the first
// request's within read_header_timeout, holding no request state until
// they arrive; a later one's within idle_timeout, unless they are already
// buffered (pipelining). ok is false when the connection is to close (the
// client left, a timeout, a reload that began during the wait).
// keepHeadDL says the head's deadline stays until the head is read.
func (c *conn) awaitRequest(first bool) (keepHeadDL, ok bool) {
	if first && c.raw != nil {
		// The first request: its head within read_header_timeout
		// from now (net/http's), and no request state held until its
		// first bytes arrive (the poller's callback takes one).
		var dl time.Time
		if d := c.l.readHeaderTimeout; d > 0 {
			dl = time.Now().Add(d)
			c.nc.SetReadDeadline(dl)
		}
		if c.l.draining() {
			// (a shutdown began: its deadline for new connections,
			// which this one's may have just replaced)
			if g := time.Now().Add(newConnGrace); dl.IsZero() || g.Before(dl) {
				dl = g
				c.nc.SetReadDeadline(dl)
			}
		}
		if !c.idleFill() {
			return false, false
		}
		c.readDL, keepHeadDL = dl, true
	} else if !first && len(c.rb.Buffered()) == 0 {
		// Wait for the next request's first bytes within idle_timeout
		// (moved only when less than that is left: see nextDeadline).
		c.status.Store(stateIdle)
		// (now: the last request's latest clock reading, at most its
		// response's writing behind; the deadline is set 1.5 times the
		// timeout ahead, see nextDeadline)
		var now time.Time
		if c.state != nil {
			now = c.ex.clock
		}
		if now.IsZero() {
			now = time.Now()
		}
		dl, _ := nextDeadline(now, c.readDL, c.l.idleTimeout, time.Time{})
		c.setReadDeadline(dl)
		// (checked after the deadline is set: a Close from now on
		// moves the deadline to the past and ends the wait)
		if c.l.draining() {
			return false, false
		}
		if c.raw != nil {
			if !c.idleFill() || c.l.draining() {
				// (a reload that began during the wait: the request
				// is left to the new config, as a read after the
				// drain's deadline would have been, and as Caddy's
				// server closes a connection still idle at shutdown)
				return false, false
			}
			c.readDL = dl
		} else if err := c.rb.Fill(); err != nil {
			return false, false
		}
	}
	// net/http counts max_header_size (plus 4096) from the bytes it
	// reads after its wait for the next request: what that wait read
	// (up to its 4096-byte buffer) is not counted, on every request
	// but a connection's first. So the same head is refused on a new
	// connection and taken on a reused one; the plan does as it does.
	c.headSlack = 0
	if !first {
		c.headSlack = min(len(c.rb.Buffered()), readBufferSize)
	}
	return keepHeadDL, true
}

// nextHead reads the request's head and parses it; a malformed one is
// refused (net/http's 4xx) and ok is false.
func (c *conn) nextHead() (b []byte, ok bool) {
	if c.lastMethod == http.MethodPost {
		c.skipLeadingCRLF()
	}
	b, err := c.readHead()
	if err != nil {
		if bad, isBad := err.(*badRequest); isBad {
			c.refuse(bad, "") // (no head parsed: c.head is the last request's)
		}
		return nil, false
	}
	if bad := parseRequest(b, &c.head); bad != nil {
		c.refuse(bad, c.head.instance())
		return nil, false
	}
	return b, true
}

// startRequest sets the request's own deadlines (read_timeout,
// write_timeout from now) and readies its body and response writer.
func (c *conn) startRequest() time.Time {
	now := time.Now()
	c.ex.clock = now
	c.hardRead, c.hardWrite = time.Time{}, time.Time{}
	c.ownReadDL, c.ownWriteDL = false, false
	if d := c.l.readTimeout; d > 0 {
		c.hardRead = now.Add(d)
	}
	if d := c.l.writeTimeout; d > 0 {
		c.hardWrite = now.Add(d)
	}
	if !c.hardRead.IsZero() || c.headDL {
		// the request's own limit (read_timeout), or none: not the
		// head's (body reads move it as read_idle_timeout asks)
		c.setReadDeadline(c.hardRead)
	}
	c.body.reset(c, &c.head)
	c.w.reset(c, &c.head)
	return now
}

// idleFill waits for the next request's first bytes on a plain TCP
// connection and reads them, holding no buffer while it waits: the
// poller's callback (idleRead) reads straight into the request state's
// buffer, and gives the state back to the pool when nothing has arrived
// yet. One read system call when the bytes are there, where a peek to wait
// and then a read took two (the profile of gw-fast at 300 connections had
// the peek at 7.6% of the core). It reports false when the connection is
// done (EOF, an error, the read deadline).
func (c *conn) idleFill() bool {
	if c.readable == nil {
		c.readable = c.idleRead // made once: a closure per wait would allocate
	}
	c.idleErr = nil
	if err := c.raw.Read(c.readable); err != nil {
		return false
	}
	return c.idleErr == nil
}

// idleRead is idleFill's callback: done (true) once a read got bytes, EOF
// or an error (in idleErr); false, with the state given back, to wait.
func (c *conn) idleRead(fd uintptr) bool {
	c.acquire()
	p, err := c.rb.Space()
	if err != nil {
		c.idleErr = err
		return true
	}
	for {
		n, err := syscall.Read(int(fd), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			c.release()
			return false
		case err != nil:
			c.idleErr = err
		case n <= 0:
			c.idleErr = io.EOF
		default:
			c.rb.Added(n)
		}
		return true
	}
}

// skipLeadingCRLF drops up to four CR or LF bytes before a request, which
// old clients send after a POST body (net/http tolerates it).
func (c *conn) skipLeadingCRLF() {
	for range 4 {
		if len(c.rb.Buffered()) == 0 {
			c.headDeadline()
			if c.rb.Fill() != nil {
				return
			}
		}
		if b := c.rb.Buffered(); b[0] == '\r' || b[0] == '\n' {
			c.rb.Discard(1)
			continue
		}
		return
	}
}

// headDeadline sets read_header_timeout's deadline before the head needs
// a read from the network (a head that arrived whole needs none), once per
// request, from when its reading began.
func (c *conn) headDeadline() {
	if c.headDL {
		return
	}
	c.headDL = true
	var dl time.Time
	if d := c.l.readHeaderTimeout; d > 0 {
		dl = time.Now().Add(d)
	}
	c.setReadDeadline(dl)
}

// readHead returns the next whole request head in the read buffer.
func (c *conn) readHead() ([]byte, error) {
	limit := c.l.headLimit + c.headSlack
	from := 0
	for {
		buf := c.rb.Buffered()
		end, bad := findHeadEnd(buf, from)
		if bad != nil {
			return nil, bad
		}
		if end >= 0 {
			if end > limit {
				return nil, errTooLarge
			}
			return buf[:end], nil
		}
		if len(buf) >= limit {
			return nil, errTooLarge
		}
		from = len(buf)
		c.headDeadline()
		if c.raw != nil && c.bw.Buffered() == 0 {
			// The head is not whole yet: wait for the rest holding only a
			// buffer the size of what arrived (a slow client holds no
			// request state; nginx holds 1 KB then 8 KB buffers).
			var err error
			if from, err = c.parkHead(from, limit); err != nil {
				return nil, err
			}
			continue
		}
		err := c.rb.Fill()
		if err == io.ErrShortBuffer {
			if !c.rb.Grow(limit) {
				return nil, errTooLarge
			}
			continue
		}
		if err != nil {
			return nil, err // EOF, timeout or reset: closed without an answer, as net/http does
		}
	}
}

// parkHead waits for the rest of a head that has not arrived whole with
// the connection holding no request state: what arrived goes into a
// buffer of the connection's own, sized to it and grown as the head
// grows (up to limit), and the state goes back to the pool. When the head
// is whole (or bad, or over the limit), a state is taken again with the
// bytes in its buffer. scanned is how much of the head findHeadEnd has
// looked at; it returns the same for the bytes now buffered.
func (c *conn) parkHead(scanned, limit int) (int, error) {
	buf := c.rb.Buffered()
	if cap(c.partial) < len(buf) {
		c.partial = make([]byte, 0, min(max(parkBufferSize, 2*len(buf)), max(limit, len(buf))))
	}
	c.partial = append(c.partial[:0], buf...)
	c.rb.Discard(len(buf))
	readDL, writeDL := c.readDL, c.writeDL // (as set on the connection)
	c.release()
	if c.state != nil { // (not released: read into the state as before)
		c.rb.Added(copy(mustSpace(&c.rb), c.partial))
		return scanned, c.rb.Fill()
	}
	c.parkScan, c.parkLimit, c.parkErr = scanned, limit, nil
	if c.parkRead == nil {
		c.parkRead = c.parkReady // made once: a closure per wait would allocate
	}
	err := c.raw.Read(c.parkRead)
	c.acquire()
	c.readDL, c.writeDL = readDL, writeDL
	// (the state's buffer is empty: make room for all of it, then copy)
	need := len(c.partial)
	for {
		p, _ := c.rb.Space()
		if len(p) >= need || !c.rb.Grow(max(limit, need)) {
			c.rb.Added(copy(p, c.partial))
			break
		}
	}
	if cap(c.partial) > parkBufferSize {
		c.partial = nil // (a long-lived connection keeps no large buffer)
	} else {
		c.partial = c.partial[:0]
	}
	if err == nil {
		err = c.parkErr
	}
	return c.parkScan, err
}

// parkBufferSize is a parked head's first buffer (nginx's
// client_header_buffer_size is 1 KB).
const parkBufferSize = 1024

// parkReady is parkHead's callback: it reads what is there into the
// connection's buffer, growing it, and reports done (true) once the head
// is whole, bad or over the limit, at EOF or on an error; false, to wait,
// only after a read found nothing (the poller wakes it on the next bytes).
func (c *conn) parkReady(fd uintptr) bool {
	for {
		if len(c.partial) == cap(c.partial) {
			if cap(c.partial) >= c.parkLimit {
				return true // (readHead says it is too large)
			}
			nb := make([]byte, len(c.partial), min(2*cap(c.partial), c.parkLimit))
			copy(nb, c.partial)
			c.partial = nb
		}
		n, err := syscall.Read(int(fd), c.partial[len(c.partial):cap(c.partial)])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return false
		case err != nil:
			c.parkErr = err
			return true
		case n <= 0:
			c.parkErr = io.EOF
			return true
		}
		c.partial = c.partial[:len(c.partial)+n]
		if end, bad := findHeadEnd(c.partial, c.parkScan); end >= 0 || bad != nil {
			return true
		}
		c.parkScan = len(c.partial)
	}
}

func mustSpace(b *h1wire.Rbuf) []byte {
	p, _ := b.Space()
	return p
}

// refuse answers a malformed request with the fast path's problem
// (application/problem+json, docs/errors.md: net/http's status, its text
// as the detail where net/http names the error) and ends the connection.
// instance is the path the request was sent to, "" when the head was not
// read that far.
func (c *conn) refuse(bad *badRequest, instance string) {
	c.l.stats.refused.Add(1)
	c.l.debug("request refused", bad.reason)
	deny.WriteHTTP1Problem(c.bw, bad.status, bad.detail(), instance)
	c.flush()
	if bad.status == 431 {
		c.closeWriteAndWait() // (a client still sending its head)
	}
}

// closeWriteAndWait is net/http's: before a connection whose client may
// still be sending is closed, its write side is closed and the close
// waits a moment, so that the client reads the answer already sent
// instead of a reset (closing with unread bytes makes the kernel send an
// RST, and the client's stack drops what it had not read yet).
func (c *conn) closeWriteAndWait() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
		time.Sleep(rstAvoidanceDelay)
	}
}

// rstAvoidanceDelay is net/http's pause between closing the write side
// and the connection, so that the client reads the answer before a reset.
const rstAvoidanceDelay = 500 * time.Millisecond

// handoff gives the connection to Caddy's server with what was read of it
// and not consumed; it reports whether Caddy took it.
func (c *conn) handoff(reason string) bool {
	c.l.debug("connection handed to Caddy's server", reason)
	return c.handoffRequest(nil)
}

// handoffRequest hands the connection over; head, when not nil, is a
// request head already taken out of the read buffer, which goes first.
func (c *conn) handoffRequest(head []byte) bool {
	var buf []byte
	if c.state != nil {
		c.flush()
		if c.werr != nil {
			return false
		}
		buf = c.rb.Buffered()
	}
	c.nc.SetDeadline(time.Time{})
	var prefix []byte
	if len(buf)+len(head) > 0 {
		prefix = make([]byte, 0, len(head)+len(buf))
		prefix = append(append(prefix, head...), buf...)
	}
	c.l.stats.handoffs.Add(1)
	return c.l.giveToCaddy(newHandedConn(c.nc, c.tlsConn, prefix))
}

func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// handedConn is a connection given to Caddy's server: the bytes the fast
// path read first, then the connection. A TLS connection keeps its state
// visible (net/http and Caddy read it through ConnectionState).
type handedConn struct {
	net.Conn
	prefix []byte
}

type handedTLSConn struct {
	handedConn
	tc *tls.Conn
}

// ConnectionState is what Caddy's server reads for r.TLS.
func (h *handedTLSConn) ConnectionState() tls.ConnectionState { return h.tc.ConnectionState() }

func newHandedConn(nc net.Conn, tc *tls.Conn, prefix []byte) net.Conn {
	if tc != nil {
		if len(prefix) == 0 {
			return tc // as accepted: net/http serves ALPN h2 on a *tls.Conn only
		}
		return &handedTLSConn{handedConn{Conn: nc, prefix: prefix}, tc}
	}
	if len(prefix) == 0 {
		return nc
	}
	return &handedConn{Conn: nc, prefix: prefix}
}

func (h *handedConn) Read(p []byte) (int, error) {
	if len(h.prefix) > 0 {
		n := copy(p, h.prefix)
		h.prefix = h.prefix[n:]
		return n, nil
	}
	return h.Conn.Read(p)
}
