package fastpath

import (
	"bufio"
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
		if countWriteDeadlines.Load() {
			writeDeadlineMoves.Add(1)
		}
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
	handedOff = c.serveH1()
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
