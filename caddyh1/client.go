package caddyh1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apigate/gateway/internal/h1wire"
)

// Options configure a Client. Zero values take the defaults in the comments.
type Options struct {
	DialTimeout           time.Duration // 0: no limit but the request's context
	ResponseHeaderTimeout time.Duration // 0: no limit but the request's context
	IdleTimeout           time.Duration // 0: idle connections are kept until the upstream closes them
	MaxIdleConnsPerHost   int           // 0: DefaultMaxIdleConnsPerHost; -1: no keepalive
	MaxConnsPerHost       int           // 0: no limit
	ReadBufferSize        int           // 0: DefaultBufferSize
	WriteBufferSize       int           // 0: DefaultBufferSize
	MaxResponseHeaderSize int           // 0: DefaultMaxResponseHeaderSize

	// Dial opens a connection; nil uses a net.Dialer with DialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults of Options.
const (
	DefaultMaxIdleConnsPerHost   = 1024
	DefaultBufferSize            = 4096
	DefaultMaxResponseHeaderSize = 1 << 20
)

// max1xx bounds the number of informational responses before the final one,
// as net/http does.
const max1xx = 5

// Client sends HTTP/1.1 requests over pools of kept-alive connections, one
// pool per upstream address. A request is written and its response read on
// the calling goroutine: a connection has no goroutines of its own.
type Client struct {
	opts Options

	mu     sync.Mutex                           // serializes writers of pools
	pools  atomic.Pointer[map[string]*hostPool] // copy on write: lock-free lookups
	closed bool

	stop chan struct{}
	done chan struct{}
}

// NewClient returns a client; Close releases its connections.
func NewClient(opts Options) *Client {
	if opts.MaxIdleConnsPerHost == 0 {
		opts.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if opts.ReadBufferSize <= 0 {
		opts.ReadBufferSize = DefaultBufferSize
	}
	if opts.WriteBufferSize <= 0 {
		opts.WriteBufferSize = DefaultBufferSize
	}
	if opts.MaxResponseHeaderSize <= 0 {
		opts.MaxResponseHeaderSize = DefaultMaxResponseHeaderSize
	}
	if opts.Dial == nil {
		d := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
		opts.Dial = d.DialContext
	}
	c := &Client{opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	m := map[string]*hostPool{}
	c.pools.Store(&m)
	go c.janitor()
	return c
}

// Close closes the idle connections and makes busy ones close when their
// response is done. Requests sent after Close fail.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	pools := *c.pools.Load()
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	for _, p := range pools {
		p.close()
	}
}

// Stats are counters of a client's connections, summed over upstreams.
type Stats struct {
	Dials   int64 // connections opened
	Reuses  int64 // requests sent on a kept-alive connection
	Retries int64 // idempotent requests sent again after a kept-alive connection failed
	Stale   int64 // idle connections found closed (or sending unasked bytes) when taken
	Open    int   // connections open now
	Idle    int   // of which idle
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	var s Stats
	for _, p := range *c.pools.Load() {
		p.mu.Lock()
		s.Dials += p.dials
		s.Reuses += p.reuses
		s.Retries += p.retries
		s.Stale += p.stale
		s.Open += p.open
		s.Idle += len(p.idle)
		p.mu.Unlock()
	}
	return s
}

var errClientClosed = errors.New("h1 transport: closed")

func (c *Client) pool(network, addr string) (*hostPool, error) {
	key := addr
	if network != "tcp" {
		key = network + " " + addr
	}
	if p := (*c.pools.Load())[key]; p != nil {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClientClosed
	}
	old := *c.pools.Load()
	if p := old[key]; p != nil {
		return p, nil
	}
	m := make(map[string]*hostPool, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	p := &hostPool{c: c, network: network, addr: addr}
	m[key] = p
	c.pools.Store(&m)
	return p, nil
}

// janitor closes connections that stayed idle longer than IdleTimeout, and
// forgets upstreams with no connections left.
func (c *Client) janitor() {
	defer close(c.done)
	every := time.Minute
	if t := c.opts.IdleTimeout; t > 0 {
		every = min(max(t/4, 100*time.Millisecond), time.Minute)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		var empty []string
		for k, p := range *c.pools.Load() {
			if p.sweep(now) {
				empty = append(empty, k)
			}
		}
		if len(empty) > 0 {
			c.forget(empty)
		}
	}
}

func (c *Client) forget(keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.pools.Load()
	m := make(map[string]*hostPool, len(old))
	for k, v := range old {
		m[k] = v
	}
	for _, k := range keys {
		if p := m[k]; p != nil && p.unused() {
			delete(m, k)
		}
	}
	c.pools.Store(&m)
}

// DialError is a failure to connect to the upstream: nothing was sent.
type DialError struct{ Err error }

func (e *DialError) Error() string { return "dialing upstream: " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// ResetError is a request that failed because the upstream closed or reset
// the connection before sending any byte of a response (a replica that
// exits, or closes its keep-alive connections, as the request arrives).
// The upstream may or may not have acted on the request.
type ResetError struct {
	// Err is what the connection said: io.EOF (closed), a reset, a broken
	// pipe while the request was written.
	Err error
	// BodyRead is true when the request's body was (partly) read to be
	// sent: the request cannot be sent again as it was.
	BodyRead bool
}

func (e *ResetError) Error() string {
	return "upstream closed or reset the connection before answering: " + e.Err.Error()
}
func (e *ResetError) Unwrap() error { return e.Err }

// connReset reports whether err, from writing a request or reading its
// response head, is the connection closed or reset by the upstream.
func connReset(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// RoundTrip sends req to the upstream at network/addr ("tcp",
// "127.0.0.1:8080") and reads the response head. The response body reads
// from the connection; closing it, or reading it to the end, ends the
// exchange, after which the connection is kept for another request when
// both sides allow it. A request that cannot be sent again safely
// (see replayable) is never sent twice.
func (c *Client) RoundTrip(req *http.Request, network, addr string) (*http.Response, error) {
	return c.RoundTripReuse(req, network, addr, nil)
}

// Reuse is the storage of a response for a caller that has one exchange at
// a time (the fast path's connection): with it, a round trip makes no
// *http.Response, body reader or header map of its own. The response it
// returns is then valid until the next round trip with the same Reuse.
type Reuse struct {
	res  http.Response
	body body
	hdr  http.Header
	vals []string
	// names are the distinct field names of the head last parsed, in
	// their order, when there were at most maxNames (nnames; -1: more)
	names  [maxNames]string
	nnames int
	// values are the names' values as res.Header has them (the same
	// slices), nil for a name the transport took out (Transfer-Encoding)
	values [maxNames][]string
	// pending: res.Header was left empty (LazyHeader) and holds none of
	// the listed fields yet (FillHeader)
	pending bool

	// LazyHeader, when set, leaves res.Header empty for a head of at most
	// maxNames distinct names: the caller reads its fields from
	// NameValues, and calls FillHeader before it reads res.Header (the
	// fast path builds no map for a response whose fields it writes from
	// the list). A head with more names fills the map as it is parsed.
	LazyHeader bool

	// Now, when set, is the caller's reading of the clock for this
	// request (the fast path reads it once per request): the round trip
	// uses it instead of reading the clock again, for the idle age of a
	// pooled connection and the poll deadline of the response head. It
	// is at most the request's age behind: an idle connection looks that
	// much older (closed that much sooner), a poll comes that much sooner.
	Now time.Time

	// Fields, when set, writes the request's header fields in place of
	// req.Header's (the fast path writes a client's fields from the head
	// it parsed, with its own additions, instead of building a map for
	// them). It writes valid fields only (names that are tokens, values
	// without CR, LF or NUL), and none of Host, Content-Length,
	// Transfer-Encoding, Trailer or Connection, which the transport
	// writes itself; its Field answers, in place of req.Header, what
	// decides the framing and the replay rules (Connection,
	// Idempotency-Key).
	Fields FieldWriter
}

// FieldWriter writes a request's header fields (Reuse.Fields).
type FieldWriter interface {
	WriteFields(bw *bufio.Writer)
	// Field is the first value of the request's field name (canonical)
	// and whether it has one, as req.Header would answer.
	Field(name string) (string, bool)
}

// maxNames is how many distinct field names of a response head Reuse
// lists (Names).
const maxNames = 16

// Names returns the distinct field names of res's head, in the order they
// came, when res is ru's response and its head had at most 16 distinct
// names (ok false otherwise): a caller that must visit the header's
// fields reads them here rather than iterating the map. Trailer and
// Transfer-Encoding may be listed though not in res.Header (the transport
// takes them).
func (ru *Reuse) Names(res *http.Response) (names []string, ok bool) {
	if ru == nil || res != &ru.res || ru.nnames < 0 {
		return nil, false
	}
	return ru.names[:ru.nnames], true
}

// NameValues is Names with each name's values as res.Header holds them
// (values[i] is res.Header[names[i]], nil when the name is not in the
// map), so that a caller can visit the fields without iterating the map.
// They describe the map as the transport filled it: a caller that
// changes the map keeps its own account.
func (ru *Reuse) NameValues(res *http.Response) (names []string, values [][]string, ok bool) {
	if ru == nil || res != &ru.res || ru.nnames < 0 {
		return nil, nil, false
	}
	return ru.names[:ru.nnames], ru.values[:ru.nnames], true
}

// FillHeader fills res.Header (ru's response's) with the fields of its
// head, when LazyHeader left it empty; it does nothing otherwise. It
// reports whether it filled it.
func (ru *Reuse) FillHeader(res *http.Response) bool {
	if ru == nil || res != &ru.res || !ru.pending {
		return false
	}
	ru.fill(res.Header)
	return true
}

// fill puts the listed fields of the head last parsed in hdr, its map,
// which LazyHeader left empty.
func (ru *Reuse) fill(hdr http.Header) {
	ru.pending = false
	for i, k := range ru.names[:ru.nnames] {
		if vv := ru.values[i]; vv != nil {
			hdr[k] = vv
		}
	}
}

// fillHead fills h's map, when parseHead left it empty (an informational
// head, for the trace).
func (ru *Reuse) fillHead(h *head) {
	if ru != nil && ru.pending {
		ru.fill(h.header)
	}
}

// HeaderPending reports whether res.Header (ru's response's) is still
// empty of its head's fields (LazyHeader; FillHeader fills it).
func (ru *Reuse) HeaderPending(res *http.Response) bool {
	return ru != nil && res == &ru.res && ru.pending
}

// TakeHeader gives the caller res's header map (ru's: res must be ru's
// response), which is the caller's from now on; ru takes h in exchange
// and fills it with the next response's fields. res.Header stays the
// taken map. Its values stay valid until the next response is read into
// ru.
func (ru *Reuse) TakeHeader(res *http.Response, h http.Header) http.Header {
	// (a map taken empty, LazyHeader, is the caller's to fill: FillHeader
	// no longer touches it)
	ru.pending = false
	taken := ru.hdr
	ru.hdr = h
	return taken
}

// now is the caller's clock reading, or the clock's.
func (ru *Reuse) now() time.Time {
	if ru != nil && !ru.Now.IsZero() {
		return ru.Now
	}
	return time.Now()
}

// RoundTripReuse is RoundTrip with the response in ru (nil: allocated).
func (c *Client) RoundTripReuse(req *http.Request, network, addr string, ru *Reuse) (*http.Response, error) {
	p, err := c.pool(network, addr)
	if err != nil {
		return nil, err
	}
	ctx := req.Context()
	var wr writtenRequest
	var fw FieldWriter
	if ru != nil {
		fw = ru.Fields
	}
	if err := wr.check(req, fw); err != nil {
		return nil, err
	}
	if c.opts.MaxIdleConnsPerHost < 0 && !wr.close {
		wr.close, wr.sendClose = true, true // keepalive off: tell the upstream
	}
	now := ru.now()
	for attempt := 0; ; attempt++ {
		cn, err := p.get(ctx, attempt > 0, now, wr.replayable && !wr.hasBody)
		if err != nil {
			return nil, err
		}
		cn.now = now
		res, err := cn.roundTrip(req, &wr, ru)
		if err == nil {
			return res, nil
		}
		if rf, ok := err.(*refusedField); ok {
			return nil, rf.err
		}
		// A kept-alive connection that the upstream closed before answering
		// fails at once; send an idempotent request once more on a new one.
		if attempt == 0 && cn.reused && cn.nothingReceived() && wr.replayable && !wr.bodyRead && ctx.Err() == nil {
			p.mu.Lock()
			p.retries++
			p.mu.Unlock()
			continue
		}
		return nil, err
	}
}

// hostPool holds the connections to one upstream address.
type hostPool struct {
	c       *Client
	network string
	addr    string

	mu      sync.Mutex
	idle    []*conn // most recently used last
	open    int     // connections open or being dialed
	waiters []chan *conn
	closed  bool
	lastUse time.Time

	dials, reuses, retries, stale int64
}

// peekAfter is how long a connection must have been idle before it is
// peeked at (alive) when taken for a request that can be sent again: a
// connection the upstream closed sooner fails that request with nothing
// received, and RoundTripReuse sends it once more on a new connection. A
// request that cannot be sent again is always preceded by the peek.
const peekAfter = time.Second

// get returns an idle connection (unless fresh is set) or dials a new one.
// now is the request's clock reading; replayable says the request may be
// sent again if the connection turns out closed (no peek needed while it
// has been idle for less than peekAfter).
func (p *hostPool) get(ctx context.Context, fresh bool, now time.Time, replayable bool) (*conn, error) {
	for !fresh {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		cn := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.reuses++
		p.mu.Unlock()
		idle := now.Sub(cn.idleSince)
		if t := p.c.opts.IdleTimeout; t > 0 && idle > t || (!replayable || idle >= peekAfter) && !cn.alive() {
			p.mu.Lock()
			p.reuses--
			p.stale++
			p.mu.Unlock()
			cn.closeConn()
			continue
		}
		cn.reused = true
		return cn, nil
	}
	// Dial, within MaxConnsPerHost.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClientClosed
	}
	if max := p.c.opts.MaxConnsPerHost; max > 0 && p.open >= max {
		ch := make(chan *conn, 1)
		p.waiters = append(p.waiters, ch)
		p.mu.Unlock()
		select {
		case cn := <-ch:
			if cn != nil {
				cn.reused = true
				return cn, nil
			}
			// nil: a slot was freed for us (p.open already counts it)
		case <-ctx.Done():
			p.mu.Lock()
			for i, w := range p.waiters {
				if w == ch {
					p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
					ch = nil
					break
				}
			}
			p.mu.Unlock()
			if ch != nil {
				// Handed something meanwhile: pass it on.
				if cn := <-ch; cn != nil {
					p.put(cn)
				} else {
					p.release()
				}
			}
			return nil, ctx.Err()
		}
	} else {
		p.open++
		p.mu.Unlock()
	}
	nc, err := p.c.opts.Dial(ctx, p.network, p.addr)
	if err != nil {
		p.release()
		return nil, &DialError{err}
	}
	p.mu.Lock()
	p.dials++
	p.mu.Unlock()
	return newConn(p, nc), nil
}

// put keeps cn for another request, or closes it.
func (p *hostPool) put(cn *conn) {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		ch <- cn
		return
	}
	if p.closed || len(p.idle) >= p.c.opts.MaxIdleConnsPerHost {
		p.mu.Unlock()
		cn.closeConn()
		return
	}
	now := cn.now // (the request's clock reading)
	if now.IsZero() {
		now = time.Now()
	}
	cn.idleSince = now
	p.lastUse = now
	p.idle = append(p.idle, cn)
	p.mu.Unlock()
}

// release gives back the slot of a closed connection.
func (p *hostPool) release() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		ch <- nil // the waiter dials in this slot
		return
	}
	p.open--
	p.lastUse = time.Now()
	p.mu.Unlock()
}

// sweep closes connections idle for longer than IdleTimeout; it reports
// whether the pool is unused (nothing open for a while).
func (p *hostPool) sweep(now time.Time) bool {
	var old []*conn
	p.mu.Lock()
	if t := p.c.opts.IdleTimeout; t > 0 {
		// p.idle is oldest first.
		i := 0
		for i < len(p.idle) && now.Sub(p.idle[i].idleSince) > t {
			i++
		}
		if i > 0 {
			old = append(old, p.idle[:i]...)
			n := copy(p.idle, p.idle[i:])
			clear(p.idle[n:])
			p.idle = p.idle[:n]
		}
	}
	p.mu.Unlock()
	for _, cn := range old {
		cn.closeConn()
	}
	return p.unused()
}

func (p *hostPool) unused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open == 0 && len(p.waiters) == 0 && time.Since(p.lastUse) > time.Minute
}

func (p *hostPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cn := range idle {
		cn.closeConn()
	}
}

// conn is one upstream connection.
type conn struct {
	pool      *hostPool
	nc        net.Conn
	fd        int // the socket, for the liveness check; -1 if none
	rd        h1wire.Rbuf
	bw        *bufio.Writer
	reused    bool // taken from the idle pool for this request
	idleSince time.Time
	now       time.Time // the clock reading of the request in hand
	// pollDL is the read deadline left set on the connection for the
	// response head's context poll (ctxPoll), or zero: kept from one
	// exchange to the next while it is between ctxPoll/2 and 2*ctxPoll
	// away, so that a stream of quick exchanges does not set a deadline
	// twice each; cleared before a response body needs a network read.
	pollDL time.Time

	// per request
	ctx       context.Context
	watching  bool        // network reads of this exchange install the context watch
	stopWatch func() bool // context.AfterFunc's stop
	aborted   atomic.Bool // the request's context ended: the conn is unusable
	abortFn   func()
	closeOnce sync.Once
	hs        headScan // the response head being read (readHead)
}

func newConn(p *hostPool, nc net.Conn) *conn {
	cn := &conn{pool: p, nc: nc, bw: bufio.NewWriterSize(nc, p.c.opts.WriteBufferSize)}
	cn.rd = h1wire.NewRbuf(nc, p.c.opts.ReadBufferSize)
	cn.fd = socketFD(nc)
	cn.abortFn = func() {
		cn.aborted.Store(true)
		cn.nc.SetDeadline(aLongTimeAgo)
	}
	cn.rd.BeforeRead = cn.beforeRead
	return cn
}

var aLongTimeAgo = time.Unix(1, 0)

// clock is the request's clock reading (Reuse.Now), else the clock's.
func (cn *conn) clock() time.Time {
	if !cn.now.IsZero() {
		return cn.now
	}
	return time.Now()
}

// closeConn closes the connection and gives back its slot in the pool.
func (cn *conn) closeConn() {
	cn.closeOnce.Do(func() {
		cn.nc.Close()
		cn.pool.release()
	})
}

func (cn *conn) nothingReceived() bool { return cn.rd.Got == 0 }

// A request's context ending (the client went away) must unblock the
// connection, as net/http's transport does. Watching the context
// (context.AfterFunc) costs about as much as the rest of the transport's
// work for a small response, so it is done only when an exchange has to
// wait: while the response head is awaited, a read deadline every
// ctxPoll checks the context instead, and the watch starts when the head
// takes longer than that, when a request body is written, or when the
// response body needs a read from the network (it did not arrive with the
// head).
const ctxPoll = 250 * time.Millisecond

// canCancel reports whether ctx can be canceled (its Done is not nil),
// asking a context that says so itself first (CanCancel): a context whose
// Done makes its channel on first use, as the fast path's does, is then
// not made to make one for the question (an allocation a request on
// HTTP/2, where each stream's context is new; callgrind).
func canCancel(ctx context.Context) bool {
	if c, ok := ctx.(interface{ CanCancel() bool }); ok {
		return c.CanCancel()
	}
	return ctx.Done() != nil
}

// watch starts watching the request's context, once per exchange.
func (cn *conn) watch() {
	if cn.stopWatch == nil && canCancel(cn.ctx) {
		cn.stopWatch = context.AfterFunc(cn.ctx, cn.abortFn)
	}
}

// beforeRead is called by the read buffer before it reads from the network.
func (cn *conn) beforeRead() {
	if cn.watching {
		cn.watch()
		if !cn.pollDL.IsZero() {
			// (the context is watched now: the head's poll deadline
			// must not cut a body that is slow to come)
			cn.pollDL = time.Time{}
			cn.nc.SetReadDeadline(time.Time{})
			if cn.aborted.Load() {
				cn.nc.SetDeadline(aLongTimeAgo)
			}
		}
	}
}

// unwatch ends watch; it reports whether the connection can still be used.
func (cn *conn) unwatch() bool {
	cn.watching = false
	cn.ctx = nil
	if cn.stopWatch != nil {
		cn.stopWatch()
		cn.stopWatch = nil
	}
	return !cn.aborted.Load()
}

// done ends an exchange: the connection goes back to the pool when reuse is
// true and nothing is left unread, else it is closed.
func (cn *conn) done(reuse bool) {
	if !cn.unwatch() || !reuse || len(cn.rd.Buffered()) > 0 {
		cn.closeConn()
		return
	}
	cn.pool.put(cn)
}

// alive reports whether an idle connection is still open and has sent
// nothing: one non-blocking peek at the socket (peek_linux.go). An upstream
// that closed it (keepalive timeout) or sent bytes nobody asked for fails
// the check: those bytes would otherwise be read as the next response.
func (cn *conn) alive() bool {
	if len(cn.rd.Buffered()) > 0 {
		return false
	}
	return cn.peekIdle()
}

// roundTrip writes req and reads the response head.
func (cn *conn) roundTrip(req *http.Request, wr *writtenRequest, ru *Reuse) (*http.Response, error) {
	ctx := req.Context()
	cn.rd.Got = 0
	cn.ctx = ctx
	if wr.hasBody {
		cn.watch() // writing the body can block on the client or on the upstream
	}
	var fw FieldWriter
	if ru != nil {
		fw = ru.Fields
	}
	if err := wr.write(cn.bw, req, fw); err != nil {
		cn.done(false)
		if _, ok := err.(*refusedField); ok {
			return nil, err
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var be *bodyError
		if !errors.As(err, &be) && connReset(err) && cn.nothingReceived() {
			return nil, &ResetError{Err: err, BodyRead: wr.bodyRead}
		}
		return nil, err
	}
	var h head
	res, err := cn.readResponse(req, &h, ru)
	if err != nil {
		cn.done(false)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if connReset(err) && cn.nothingReceived() {
			return nil, &ResetError{Err: err, BodyRead: wr.bodyRead}
		}
		return nil, err
	}
	keep := !h.close && !wr.close
	if !h.bodyAllowed(req.Method) {
		res.Body = http.NoBody
		if req.Method != http.MethodHead {
			res.ContentLength = 0 // to HEAD it stays the announced one, as with net/http
		}
		cn.done(keep)
		return res, nil
	}
	newBody := func(b body) *body {
		if ru != nil {
			ru.body = b
			return &ru.body
		}
		nb := new(body)
		*nb = b
		return nb
	}
	switch {
	case h.chunked:
		res.ContentLength = -1
		res.Body = newBody(body{cn: cn, kind: bodyChunked, keep: keep, res: res, maxTrailer: cn.pool.c.opts.MaxResponseHeaderSize})
	case h.contentLength == 0:
		res.Body = http.NoBody
		cn.done(keep)
	case h.contentLength > 0:
		res.Body = newBody(body{cn: cn, kind: bodyFixed, n: h.contentLength, keep: keep})
	default:
		res.ContentLength = -1
		res.Close = true
		res.Body = newBody(body{cn: cn, kind: bodyToEOF})
	}
	return res, nil
}

// readResponse reads response heads until the final (non-1xx) one, passing
// informational responses to the request's httptrace.ClientTrace.
func (cn *conn) readResponse(req *http.Request, h *head, ru *Reuse) (*http.Response, error) {
	opts := &cn.pool.c.opts
	var headerDeadline, deadline time.Time
	polls := cn.stopWatch == nil && canCancel(cn.ctx)
	switch t := opts.ResponseHeaderTimeout; {
	case t > 0:
		now := cn.clock()
		headerDeadline = now.Add(t)
		deadline = headerDeadline
		if polls {
			if poll := now.Add(ctxPoll); poll.Before(deadline) {
				deadline = poll
			}
		}
		cn.pollDL = time.Time{}
		cn.nc.SetReadDeadline(deadline)
	case polls:
		// Only the context poll: the deadline already set stays when it
		// is neither too near nor too far (see pollDL).
		now := cn.clock()
		if left := cn.pollDL.Sub(now); left < ctxPoll/2 || left > 2*ctxPoll {
			cn.pollDL = now.Add(ctxPoll + ctxPoll/2)
			cn.nc.SetReadDeadline(cn.pollDL)
		}
	default:
		if !cn.pollDL.IsZero() {
			cn.pollDL = time.Time{}
			cn.nc.SetReadDeadline(time.Time{})
		}
	}
	// onTimeout decides what a read deadline passing means.
	onTimeout := func() error {
		if err := cn.ctx.Err(); err != nil {
			return err
		}
		if !headerDeadline.IsZero() && !time.Now().Before(headerDeadline) {
			return errResponseHeaderTimeout
		}
		// A slow head: watch the context from now on, keep the timeout.
		cn.watch()
		cn.pollDL = time.Time{}
		cn.nc.SetReadDeadline(headerDeadline)
		return nil
	}
	var n1xx int
	for {
		b, err := cn.readHead(opts.MaxResponseHeaderSize, onTimeout)
		if err != nil {
			return nil, err
		}
		err = parseHead(b, h, ru, &cn.hs)
		cn.rd.Discard(len(b))
		if err != nil {
			return nil, err
		}
		if h.status >= 200 {
			break
		}
		if h.status == http.StatusSwitchingProtocols {
			return nil, errors.New("upstream switched protocols, but the request asked for no upgrade")
		}
		if n1xx++; n1xx > max1xx {
			return nil, errors.New("too many 1xx informational responses from upstream")
		}
		if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
			ru.fillHead(h)
			if err := trace.Got1xxResponse(h.status, textproto.MIMEHeader(h.header)); err != nil {
				return nil, err
			}
		}
	}
	if !deadline.IsZero() {
		cn.nc.SetReadDeadline(time.Time{})
		if cn.aborted.Load() {
			cn.nc.SetDeadline(aLongTimeAgo)
		}
	}
	// (a poll deadline left set, pollDL, is cleared before a body read
	// that needs the network: beforeRead)
	cn.watching = true // from here on, reads from the network are watched
	var res *http.Response
	if ru != nil {
		res = &ru.res
	} else {
		res = new(http.Response)
	}
	*res = http.Response{
		Status:        h.statusText,
		StatusCode:    h.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    h.minor,
		Header:        h.header,
		ContentLength: h.contentLength,
		Close:         h.close,
		Trailer:       h.trailer,
		Request:       req,
	}
	if h.minor == 0 {
		res.Proto = "HTTP/1.0"
	}
	if res.Header == nil {
		res.Header = http.Header{}
	}
	return res, nil
}

// errResponseHeaderTimeout is returned when ResponseHeaderTimeout passes. It
// is a net.Error whose Timeout is true, as net/http's, so that Caddy answers
// 504.
var errResponseHeaderTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "timeout awaiting response headers from upstream" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// readHead returns the next whole response head in the read buffer (which
// grows for it, up to max bytes); the caller discards it once parsed.
func (cn *conn) readHead(max int, onTimeout func() error) ([]byte, error) {
	cn.hs.reset()
	for {
		buf := cn.rd.Buffered()
		if end := cn.hs.scan(buf); end >= 0 {
			return buf[:end], nil
		}
		err := cn.rd.Fill()
		if err == io.ErrShortBuffer {
			if !cn.rd.Grow(max) {
				return nil, fmt.Errorf("upstream response head larger than %d bytes", max)
			}
			err = nil
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() && !cn.aborted.Load() {
			if err = onTimeout(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			if err == io.EOF && len(cn.rd.Buffered()) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
