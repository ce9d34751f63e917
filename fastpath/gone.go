package fastpath

import (
	"context"
	"net"
	"sync"
	"syscall"
)

// A client that goes away while its request is being served cancels the
// request's context, as net/http's server does (it reads the connection
// in the background), so that the upstream request is given up and its
// connection closed rather than waited on. The fast path does it without a
// goroutine per request: the context's Err looks at the socket (one
// non-blocking peek) when the h1 transport polls it while it waits for a
// response head; a goroutine that waits on the socket is started only
// when something asks to be told (context.AfterFunc: an upstream slower
// than the poll, a request body being sent), and stopped when it is done.

// goneState is an exchange's cancellation: done is closed once the client
// is found gone. The channel is made when something asks for it (Done,
// an AfterFunc's wait): most requests never do, and a channel a request
// costs an allocation (two a stream on HTTP/2, callgrind 2026-12-06).
type goneState struct {
	mu       sync.Mutex
	done     chan struct{} // nil until asked for
	canceled bool
}

// reset readies the state for a new request; a closed channel is dropped.
func (g *goneState) reset() {
	g.mu.Lock()
	if g.canceled {
		g.done = nil
		g.canceled = false
	}
	g.mu.Unlock()
}

func (g *goneState) cancel() {
	g.mu.Lock()
	if !g.canceled {
		g.canceled = true
		if g.done != nil {
			close(g.done)
		}
	}
	g.mu.Unlock()
}

func (g *goneState) isCanceled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.canceled
}

// channel is closed once the request is canceled (made on first use).
func (g *goneState) channel() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		g.done = make(chan struct{})
		if g.canceled {
			close(g.done)
		}
	}
	return g.done
}

func (x *exCtx) Done() <-chan struct{} { return x.ex.gone.channel() }

// CanCancel says that Done is not nil without making its channel (the h1
// transport asks, caddyh1's canCancel, on every exchange).
func (x *exCtx) CanCancel() bool { return true }

var _ interface{ CanCancel() bool } = (*outCtx)(nil) // (the upstream request's context)

func (x *exCtx) Err() error {
	ex := x.ex
	if ex.gone.isCanceled() {
		return context.Canceled
	}
	if c := ex.st.c; c != nil && ex.st.h2 == nil && c.peerGone() {
		ex.gone.cancel()
		return context.Canceled
	}
	return nil
}

// AfterFunc is what context.AfterFunc (and a context derived with
// WithCancel) uses: f runs when the client goes away, unless stop is
// called first.
func (x *exCtx) AfterFunc(f func()) (stop func() bool) {
	ex := x.ex
	if ex.st.h2 != nil {
		return ex.st.h2.afterGone(f)
	}
	c := ex.st.c
	rc := c.peekConn()
	var mu sync.Mutex
	stopped, ran := false, false
	exited := make(chan struct{})
	run := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if stopped || ran {
			return false
		}
		ran = true
		return true
	}
	go func() {
		defer close(exited)
		gone := false
		if rc == nil {
			<-ex.gone.channel() // no socket to watch: only an explicit cancel
			gone = true
		} else {
			var peek [1]byte
			rc.Read(func(fd uintptr) bool {
				n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
					mu.Lock()
					s := stopped
					mu.Unlock()
					return s // wait for the socket, unless stopped
				}
				gone = n == 0 || err != nil // EOF or reset; data means alive
				return true
			})
		}
		if gone {
			ex.gone.cancel()
			if run() {
				f()
			}
		}
	}()
	return func() bool {
		mu.Lock()
		if stopped || ran {
			r := !ran
			stopped = true
			mu.Unlock()
			return r
		}
		stopped = true
		mu.Unlock()
		if rc != nil {
			// wake the wait, then give the connection its deadline back
			// (the next watcher waits on the socket too)
			c.nc.SetReadDeadline(aLongTimeAgo)
			<-exited
			c.nc.SetReadDeadline(c.readDL)
		}
		return true
	}
}

// peekConn is the socket to look at for the client's going away: the TCP
// connection (under TLS too: an EOF or a reset is seen there).
func (c *conn) peekConn() syscall.RawConn {
	var nc net.Conn = c.nc
	if c.tlsConn != nil {
		nc = c.tlsConn.NetConn()
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return rc
		}
	}
	return nil
}

// peerGone reports whether the client closed or reset the connection: one
// non-blocking peek. Bytes waiting (a pipelined request) mean it is there.
func (c *conn) peerGone() bool {
	rc := c.peekConn()
	if rc == nil {
		return false
	}
	gone := false
	var peek [1]byte
	// (Control, not Read: a watcher may hold the read side, waiting)
	rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = err == nil && n == 0 || err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
	return gone
}

// outCtx is the context of the request to the upstream: the shadow's (its
// values and its cancellation, AfterFunc included: a context that wraps it
// would hide AfterFunc from context.AfterFunc, which then waits on Done
// from a goroutine that nothing wakes), and the 1xx trace, which only the
// upstream request may carry (a duty's own HTTP call must not forward
// informational responses to the client).
type outCtx struct {
	*exCtx
	trace context.Context // carries the httptrace.ClientTrace
}

func (o *outCtx) Value(key any) any {
	if v := o.exCtx.Value(key); v != nil {
		return v
	}
	return o.trace.Value(key)
}
