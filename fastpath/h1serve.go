package fastpath

import (
	"bytes"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/h1wire"
)

// serveH1 serves the connection's HTTP/1.1 requests one after another,
// until the connection is to close or goes to another server (Caddy's,
// the HTTP/2 engine for h2c with prior knowledge, or a handler that
// hijacked it); handedOff says it is no longer this loop's to close.
func (c *conn) serveH1() (handedOff bool) {
	if c.raw == nil {
		c.acquire() // (TLS: the state's buffer reads from the TLS connection)
	}
	for first := true; ; first = false {
		keepHeadDL, ok := c.awaitRequest(first)
		if !ok {
			return false
		}
		c.status.Store(stateActive)
		c.headDL = keepHeadDL
		b, ok := c.nextHead()
		if !ok {
			return false
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
					return false
				} else if reason != "" {
					c.l.h2Fallback(reason)
				}
			}
			return c.handoff(c.head.handoff)
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
			return true // (the handler's now)
		}
		switch res {
		case served:
		case handOff:
			return c.handoffRequest(b)
		case abort:
			c.flush()
			return false
		}
		if !c.w.finish() || c.werr != nil {
			if c.werr == nil && c.body.unread() {
				// the client may still be sending the body the answer
				// refused (a body limit, a body too large to drain)
				c.closeWriteAndWait()
			}
			return false
		}
	}
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
			// (the wait gives the request state back, and the state
			// taken when the bytes arrive knows no deadline: the
			// socket's, unchanged while it waited, are noted again, so
			// that the next response does not move the write deadline
			// once more: ~650 instructions in a request after a wait,
			// which was 60% of them at 8 connections, callgrind)
			writeDL := c.writeDL
			if !c.idleFill() || c.l.draining() {
				// (a reload that began during the wait: the request
				// is left to the new config, as a read after the
				// drain's deadline would have been, and as Caddy's
				// server closes a connection still idle at shutdown)
				return false, false
			}
			c.readDL, c.writeDL = dl, writeDL
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
