package fastpath

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// listener wraps a server's listener as caddy-l4's listener wrapper does:
// it accepts every connection itself, serves those the plan can serve, and
// passes the others (and connections it gives up on) to Caddy's server
// through Accept, with the bytes it already read in front.
type listener struct {
	net.Listener // the wrapped listener (after TLS, when the server has it)

	plan    *plan
	logger  *zap.Logger
	ctx     context.Context // values only: requests are never cut by a config unload
	useTLS  bool
	metrics prometheus.Counter

	handed    chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	drainFlag atomic.Bool

	mu          sync.Mutex
	conns       map[*conn]struct{}
	acceptEnded bool          // the accept loop returned: no connection joins conns any more
	empty       chan struct{} // closed once the accept loop ended and conns is empty
	emptyClosed bool
	gracePeriod time.Duration // the http app's grace_period: how long Close waits for conns

	// the server's limits and timeouts
	maxHeaderBytes      int
	headLimit           int
	readTimeout         time.Duration
	readHeaderTimeout   time.Duration
	writeTimeout        time.Duration
	idleTimeout         time.Duration
	readIdleTimeout     time.Duration
	writeIdleTimeout    time.Duration
	tlsHandshakeTimeout time.Duration
	maxWriteChunk       int

	// HTTP/2 on the plan: over TLS (h2 among the server's protocols),
	// cleartext with prior knowledge (h2c among them)
	h2, h2c     bool
	warnedH2    atomic.Bool
	stats       *serverStats
	dateCache   atomic.Pointer[dateStamp]
	warnedPlain atomic.Bool
}

type dateStamp struct {
	sec int64
	b   []byte
}

// serverStats are counted over all the listeners of a server.
type serverStats struct {
	served    atomic.Int64 // requests the plan served
	refused   atomic.Int64 // malformed requests refused
	handoffs  atomic.Int64 // connections handed to Caddy's server
	delegated atomic.Int64 // requests served through Caddy's server handler
}

func newListener(inner net.Listener, p *plan, s settings, stats *serverStats, logger *zap.Logger, metrics prometheus.Counter) *listener {
	l := &listener{
		stats:               stats,
		Listener:            inner,
		plan:                p,
		logger:              logger,
		ctx:                 context.Background(),
		useTLS:              s.useTLS,
		metrics:             metrics,
		handed:              make(chan net.Conn),
		done:                make(chan struct{}),
		conns:               make(map[*conn]struct{}),
		empty:               make(chan struct{}),
		gracePeriod:         s.gracePeriod,
		maxHeaderBytes:      s.maxHeaderBytes,
		headLimit:           s.maxHeaderBytes + 4096, // as net/http: MaxHeaderBytes plus 4096 of slack
		readTimeout:         s.readTimeout,
		readHeaderTimeout:   s.readHeaderTimeout,
		writeTimeout:        s.writeTimeout,
		idleTimeout:         s.idleTimeout,
		readIdleTimeout:     s.readIdleTimeout,
		writeIdleTimeout:    s.writeIdleTimeout,
		tlsHandshakeTimeout: s.tlsHandshakeTimeout,
		maxWriteChunk:       s.maxWriteChunk,
		h2:                  s.h2,
		h2c:                 s.h2c,
	}
	go l.acceptLoop()
	return l
}

// settings are the server options the engine applies.
type settings struct {
	useTLS              bool
	maxHeaderBytes      int
	readTimeout         time.Duration
	readHeaderTimeout   time.Duration
	writeTimeout        time.Duration
	idleTimeout         time.Duration
	readIdleTimeout     time.Duration
	writeIdleTimeout    time.Duration
	tlsHandshakeTimeout time.Duration
	maxWriteChunk       int // write_max_chunk: the largest write one deadline covers
	h2, h2c             bool
	gracePeriod         time.Duration
}

func (l *listener) acceptLoop() {
	defer func() {
		l.mu.Lock()
		l.acceptEnded = true
		l.checkEmpty()
		l.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				l.closeWith(err)
				return
			}
			// As net/http's Serve: a failing Accept (out of file
			// descriptors, say) is retried after a growing pause.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else {
				backoff = min(2*backoff, time.Second)
			}
			l.logger.Error("accepting a connection", zap.Error(err), zap.Duration("retry_in", backoff))
			select {
			case <-time.After(backoff):
			case <-l.done:
				return
			}
			continue
		}
		backoff = 0
		if l.useTLS && !isTLS(nc) {
			// The wrapper sits before tls in listener_wrappers: it sees
			// encrypted bytes, so everything goes to Caddy.
			if !l.warnedPlain.Swap(true) {
				l.logger.Warn("apigate is placed before the tls listener wrapper: every connection goes to Caddy's server; list it after tls (or leave tls out)",
					zap.String("server", l.plan.name))
			}
			if !l.giveToCaddy(nc) {
				nc.Close()
			}
			continue
		}
		c := newConn(l, nc)
		l.mu.Lock()
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		go c.serve()
	}
}

// giveToCaddy passes a connection to Caddy's server; it reports false when
// the listener is closed and the connection was not taken.
func (l *listener) giveToCaddy(nc net.Conn) bool {
	select {
	case l.handed <- nc:
		return true
	case <-l.done:
		nc.Close()
		return false
	}
}

// forget drops c from the connections a shutdown waits for (once it
// ends, or once a handler hijacked it); a second call does nothing.
func (l *listener) forget(c *conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.checkEmpty()
	l.mu.Unlock()
}

// checkEmpty closes l.empty once the accept loop has ended and the last
// connection is gone (l.mu held).
func (l *listener) checkEmpty() {
	if l.acceptEnded && len(l.conns) == 0 && !l.emptyClosed {
		l.emptyClosed = true
		close(l.empty)
	}
}

// Accept returns the connections Caddy's server serves.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.handed:
		return nc, nil
	case <-l.done:
		return nil, l.closeErr
	}
}

// Close stops accepting and waits for the connections the plan serves,
// as net/http's Shutdown waits for its own (Caddy's server calls Close from
// Shutdown and then exits or unloads the config): the request in hand
// finishes (with "Connection: close"), idle connections close at once, a
// new connection's first request is served if it arrives within 5 seconds
// (net/http's rule for new connections at shutdown), for at most the http
// app's grace_period (none: no limit).
func (l *listener) Close() error {
	err := l.Listener.Close()
	l.closeWith(net.ErrClosed)
	l.awaitConns()
	return err
}

// awaitConns waits until the accept loop has ended and every connection
// is gone, at most the grace period, as net/http's Shutdown does: after it
// the connections go on (a process that exits cuts them; a reload leaves
// them to finish).
func (l *listener) awaitConns() {
	var expired <-chan time.Time
	if l.gracePeriod > 0 {
		t := time.NewTimer(l.gracePeriod)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-l.empty:
	case <-expired:
	}
}

func (l *listener) closeWith(err error) {
	l.closeOnce.Do(func() {
		l.closeErr = err
		l.drainFlag.Store(true)
		close(l.done)
		l.mu.Lock()
		for c := range l.conns {
			if c.h2 != nil {
				go c.h2.drain() // GOAWAY; the streams in flight finish
				continue
			}
			switch c.status.Load() {
			case stateIdle:
				c.nc.SetReadDeadline(aLongTimeAgo)
			case stateNew:
				c.nc.SetReadDeadline(time.Now().Add(newConnGrace))
			}
		}
		l.mu.Unlock()
	})
}

// newConnGrace is how long a connection that has sent no request yet is
// given at shutdown (net/http closes such a connection once it is 5
// seconds old).
const newConnGrace = 5 * time.Second

func (l *listener) draining() bool { return l.drainFlag.Load() }

// h2Fallback logs, once per listener, why HTTP/2 connections go to Caddy's
// server rather than the plan.
func (l *listener) h2Fallback(reason string) {
	if !l.warnedH2.Swap(true) {
		l.logger.Info("HTTP/2 connections of this server go to Caddy's server",
			zap.String("server", l.plan.name), zap.String("reason", reason))
	}
}

func (l *listener) debug(msg, detail string) {
	if ce := l.logger.Check(zapcore.DebugLevel, msg); ce != nil {
		ce.Write(zap.String("detail", detail))
	}
}

// date returns the Date field value for now (the request's latest clock
// reading; zero: the clock's), formatted once a second.
func (l *listener) date(now time.Time) []byte {
	if now.IsZero() {
		now = time.Now()
	}
	sec := now.Unix()
	if d := l.dateCache.Load(); d != nil && d.sec == sec {
		return d.b
	}
	b := now.UTC().AppendFormat(make([]byte, 0, 29), "Mon, 02 Jan 2006 15:04:05 GMT")
	l.dateCache.Store(&dateStamp{sec: sec, b: b})
	return b
}

func isTLS(nc net.Conn) bool {
	_, ok := nc.(interface{ HandshakeContext(context.Context) error })
	return ok
}
