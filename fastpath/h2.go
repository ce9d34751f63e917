package fastpath

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HTTP/2 on the plan (docs/fastpath.md, "HTTP/2"). One goroutine per
// connection reads frames (serve); each stream's request runs the plan on
// a worker of a shared pool (workers.go), never on a goroutine of its own;
// the frames of all streams are written through one buffered writer of the
// connection, flushed when no writer is waiting for it. Framing and HPACK
// are golang.org/x/net/http2's Framer and hpack; the engine around them
// (streams, flow control, settings, limits) is this file's, with Go's
// server's limits or tighter.

const (
	h2MaxStreams        = 250     // SETTINGS_MAX_CONCURRENT_STREAMS, as Go's server
	h2InitialWindow     = 1 << 20 // our stream receive window (SETTINGS_INITIAL_WINDOW_SIZE), as Go's
	h2ConnWindow        = 1 << 20 // our connection receive window, as Go's
	h2MaxQueuedHandlers = 4 * h2MaxStreams
	h2HeaderTableSize   = 4096 // the HPACK decoder's dynamic table, the default (not raised)
	h2WriteChunk        = 4 << 10
	h2DefaultStall      = time.Minute // a write waiting on the peer, when the server sets no write timeout
	h2FrameBufferSize   = 16 << 10    // the connection's write buffer
)

var h2ClientPreface = []byte(http2.ClientPreface)

// h2conn is one HTTP/2 connection served on the plan.
type h2conn struct {
	c   *conn
	l   *listener
	nc  net.Conn
	tls *tls.ConnectionState
	br  *bufio.Reader
	bw  *bufio.Writer
	fr  *http2.Framer

	// the write side: bw, the Framer's writes, the HPACK encoder
	wmu   sync.Mutex
	wwait atomic.Int32 // writers waiting for wmu (the last one flushes)
	enc   h2Encoder

	// the read side's HPACK decoder and the block it decodes (readBlock)
	dec *hpack.Decoder
	blk h2block

	werr    error
	wfailed atomic.Bool   // werr is set (read without wmu)
	stallDL time.Duration // how long a write may wait for the peer
	sockWDL time.Time     // the socket's write deadline as h2NetWriter set it (under wmu)
	wdlOwn  bool          // shutdown set its own: h2NetWriter leaves it (under wmu)

	mu        sync.Mutex
	cond      sync.Cond // window, body data, stream and connection state changed
	streams   map[uint32]*h2stream
	maxID     uint32 // the highest stream the client opened
	open      int    // client streams not closed
	lingering int    // of them, streams whose handler is done (handlerDone)
	running   int    // handlers running (reset streams included, until they return)
	queue     []*h2stream
	closed    bool
	closing   bool // GOAWAY sent (a reload's drain, Connection: close, an error)
	lastID    uint32

	sendWin        int64 // connection send window
	peerInitWin    int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame   uint32
	peerHeaderList uint32
	recvWin        int64 // connection receive window left
	recvUnacked    int64 // consumed, not yet given back

	idleSince time.Time
	readDL    time.Time
}

// h2Allowed says whether the plan serves HTTP/2 on this listener: TLS with
// h2 among the server's protocols, or cleartext prior knowledge with h2c;
// reason is why not.
func (l *listener) h2Allowed(tlsConn bool) (ok bool, reason string) {
	if l.plan.rateTimeouts {
		return false, "HTTP/2 with a minimum read or write rate (Caddy's idle timeout wrappers)"
	}
	if tlsConn {
		if !l.h2 {
			return false, "h2 is not among the server's protocols"
		}
		return true, ""
	}
	if !l.h2c {
		return false, "h2c is not among the server's protocols"
	}
	return true, ""
}

// serveH2 serves an HTTP/2 connection on the plan; prefix is what was read
// of it already (the h2c preface read as an HTTP/1 head).
func (c *conn) serveH2(prefix []byte) {
	l := c.l
	sc := &h2conn{
		c: c, l: l, nc: c.nc, tls: c.tlsState,
		streams:        make(map[uint32]*h2stream),
		sendWin:        65535,
		peerInitWin:    65535,
		peerMaxFrame:   16384,
		peerHeaderList: 1<<32 - 1,
		recvWin:        65535,
	}
	sc.cond.L = &sc.mu
	l.mu.Lock()
	c.h2 = sc
	l.mu.Unlock()
	var rd io.Reader = c.nc
	if len(prefix) > 0 {
		rd = io.MultiReader(bytes.NewReader(prefix), c.nc)
	}
	sc.br = bufio.NewReaderSize(rd, 4096)
	sc.bw = bufio.NewWriterSize(h2NetWriter{sc}, h2FrameBufferSize)
	sc.fr = http2.NewFramer(sc.bw, sc.br)
	sc.dec = hpack.NewDecoder(h2HeaderTableSize, sc.emitField) // (header blocks: readBlock)
	sc.fr.SetReuseFrames()
	sc.fr.SetMaxReadFrameSize(16384) // (the default SETTINGS_MAX_FRAME_SIZE: not raised)
	sc.enc.init()
	sc.stallDL = h2DefaultStall
	switch {
	case l.writeTimeout > 0:
		sc.stallDL = l.writeTimeout
	case l.writeIdleTimeout > 0:
		sc.stallDL = l.writeIdleTimeout
	}
	sc.serve()
}

// maxHeaderListSize is Go's: max_header_size plus room for the fields'
// HPACK overhead.
func (sc *h2conn) maxHeaderListSize() uint32 {
	return uint32(sc.l.maxHeaderBytes + 10*32)
}

func (sc *h2conn) serve() {
	defer func() {
		if r := recover(); r != nil {
			sc.l.logger.Error("panic serving an HTTP/2 connection on the fast path",
				zap.String("remote", sc.c.remoteAddr), zap.Any("error", r),
				zap.ByteString("stack", debug.Stack()))
			// (the panic may have left a lock held: close first)
			sc.nc.Close()
			go sc.shutdown()
			return
		}
		sc.shutdown()
	}()
	// the client's preface within read_header_timeout (or the handshake's)
	if d := sc.l.readHeaderTimeout; d > 0 {
		sc.nc.SetReadDeadline(time.Now().Add(d))
	}
	sc.writeFrames(func() error {
		s := []http2.Setting{
			{ID: http2.SettingMaxConcurrentStreams, Val: h2MaxStreams},
			{ID: http2.SettingMaxHeaderListSize, Val: sc.maxHeaderListSize()},
			{ID: http2.SettingInitialWindowSize, Val: h2InitialWindow},
		}
		if err := sc.fr.WriteSettings(s...); err != nil {
			return err
		}
		return sc.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	}, true)
	sc.recvWin = h2ConnWindow
	var pre [24]byte
	if _, err := io.ReadFull(sc.br, pre[:]); err != nil || !bytes.Equal(pre[:], h2ClientPreface) {
		if err == nil {
			sc.goAway(http2.ErrCodeProtocol, "bad client preface")
		}
		return
	}
	first := true
	sc.idleSince = time.Now()
	for {
		sc.setReadDeadline()
		f, err := sc.fr.ReadFrame()
		if err == nil {
			if _, ok := f.(*http2.SettingsFrame); first && !ok {
				sc.goAway(http2.ErrCodeProtocol, "first frame is not SETTINGS")
				return
			}
			first = false
			err = sc.processFrame(f)
		}
		if err != nil && !sc.readError(err) {
			return
		}
		if sc.br.Buffered() == 0 {
			sc.flushIfBuffered()
		}
		if sc.l.draining() {
			sc.drain()
		}
		if sc.done() {
			return
		}
	}
}

// readError handles an error from reading or processing a frame: a
// stream error resets the stream and the connection goes on (true); any
// other error ends the connection (false), after a GOAWAY when it is a
// protocol error.
func (sc *h2conn) readError(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		sc.resetStream(se.StreamID, se.Code)
		return true
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		sc.goAway(http2.ErrCode(ce), "")
		return false
	}
	if errors.Is(err, http2.ErrFrameTooLarge) {
		sc.goAway(http2.ErrCodeFrameSize, "")
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		sc.mu.Lock()
		closing := sc.closing || sc.l.draining()
		sc.readDL = aLongTimeAgo // (as set: setReadDeadline sets the next)
		sc.mu.Unlock()
		if closing && !sc.done() {
			return true // woken by a drain: the streams in flight finish
		}
		sc.goAway(http2.ErrCodeNo, "") // idle_timeout (or the drain is done)
		return false
	}
	if err != io.EOF && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrUnexpectedEOF) {
		sc.l.debug("HTTP/2 connection error", err.Error())
	}
	return false
}

// setReadDeadline is the connection's read deadline: idle_timeout while
// no stream is open and no handler runs (GOAWAY and close after it), none
// otherwise (a stream's own reads have read_timeout).
func (sc *h2conn) setReadDeadline() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	idle := sc.idle()
	var dl time.Time
	switch {
	case idle && (sc.closing || sc.l.draining()):
		dl = aLongTimeAgo
	case idle && sc.l.idleTimeout > 0:
		dl = sc.idleSince.Add(sc.l.idleTimeout)
	}
	if !dl.Equal(sc.readDL) {
		sc.readDL = dl
		sc.nc.SetReadDeadline(dl)
	}
}

// wakeReader makes the reader's wait for a frame return (under mu), so
// that it looks at the connection's state.
func (sc *h2conn) wakeReader() {
	sc.readDL = aLongTimeAgo
	sc.nc.SetReadDeadline(aLongTimeAgo)
}

// done says the connection is to close: it is closing (GOAWAY sent) and
// nothing is left to serve.
func (sc *h2conn) done() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.wfailed.Load() {
		return true
	}
	return sc.closing && sc.idle()
}

// drain starts a graceful shutdown (a config reload or stop): GOAWAY with
// the last stream taken; the streams in flight finish.
func (sc *h2conn) drain() {
	sc.mu.Lock()
	already := sc.closing
	sc.closing = true
	last := sc.maxID
	sc.mu.Unlock()
	if already {
		return
	}
	sc.writeFrames(func() error { return sc.fr.WriteGoAway(last, http2.ErrCodeNo, nil) }, false)
	sc.mu.Lock()
	sc.wakeReader() // it checks done()
	sc.mu.Unlock()
}

func (sc *h2conn) goAway(code http2.ErrCode, why string) {
	sc.mu.Lock()
	sc.closing = true
	last := sc.maxID
	sc.mu.Unlock()
	if why != "" {
		sc.l.debug("HTTP/2 connection closed", why)
	}
	sc.writeFrames(func() error { return sc.fr.WriteGoAway(last, code, nil) }, false)
}

// shutdown ends the connection: every stream is canceled, handlers see
// their writes fail, the socket closes.
func (sc *h2conn) shutdown() {
	sc.mu.Lock()
	sc.closed = true
	for _, s := range sc.streams {
		s.reset = true
		s.cancel()
	}
	sc.queue = nil
	sc.cond.Broadcast()
	sc.mu.Unlock()
	sc.wmu.Lock()
	if sc.werr == nil {
		sc.wdlOwn = true
		sc.nc.SetWriteDeadline(time.Now().Add(time.Second))
		sc.bw.Flush()
		sc.werr = net.ErrClosed
	}
	sc.wmu.Unlock()
	sc.nc.Close()
}

// writeFrames runs fn (which writes frames) under the write lock; the
// buffer is flushed when no other writer is waiting for the lock, unless
// fromReader (the reader flushes once the frames it has read are done).
func (sc *h2conn) writeFrames(fn func() error, fromReader bool) error {
	sc.wwait.Add(1)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	last := sc.wwait.Add(-1) == 0
	if sc.werr != nil {
		return sc.werr
	}
	if err := fn(); err != nil {
		sc.werr = err
		sc.wfailed.Store(true)
		return err
	}
	if last && !fromReader && sc.bw.Buffered() > 0 {
		if err := sc.bw.Flush(); err != nil {
			sc.werr = err
			sc.wfailed.Store(true)
			return err
		}
	}
	return nil
}

func (sc *h2conn) flushIfBuffered() {
	sc.wmu.Lock()
	if sc.werr == nil && sc.bw.Buffered() > 0 {
		if err := sc.bw.Flush(); err != nil {
			sc.werr = err
			sc.wfailed.Store(true)
		}
	}
	sc.wmu.Unlock()
}

// h2NetWriter writes the connection's buffer to the socket, each write
// within the stall deadline: a peer that stops reading is cut. The
// deadline is set with slack, as the HTTP/1.1 engine's timeouts that
// reset on progress are: a write has between 1 and 1.5 times stallDL,
// and the deadline moves only when less than stallDL is left, not at
// every write (setting it takes the poller's lock and its timer: about
// 250 instructions a write, callgrind).
type h2NetWriter struct{ sc *h2conn }

func (w h2NetWriter) Write(p []byte) (int, error) {
	sc := w.sc
	if now := time.Now(); !sc.wdlOwn && sc.sockWDL.Sub(now) < sc.stallDL {
		sc.sockWDL = now.Add(sc.stallDL + sc.stallDL/2)
		sc.nc.SetWriteDeadline(sc.sockWDL)
	}
	return sc.nc.Write(p)
}

// processFrame handles one frame the client sent (on the reader).
func (sc *h2conn) processFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return sc.onSettings(f)
	case *http2.HeadersFrame:
		b, err := sc.readBlock(f)
		if err != nil {
			return err
		}
		return sc.onHeaders(b)
	case *http2.DataFrame:
		return sc.onData(f)
	case *http2.WindowUpdateFrame:
		return sc.onWindowUpdate(f)
	case *http2.PingFrame:
		if f.StreamID != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if f.IsAck() {
			return nil // (the fast path sends no PING of its own)
		}
		data := f.Data
		return sc.writeFrames(func() error { return sc.fr.WritePing(true, data) }, true)
	case *http2.RSTStreamFrame:
		return sc.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil // (no priorities: streams are written as their handlers write)
	case *http2.GoAwayFrame:
		if f.StreamID != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		sc.mu.Lock()
		sc.closing = true // serve what is open, take nothing new
		sc.mu.Unlock()
		if f.ErrCode != http2.ErrCodeNo {
			return io.EOF
		}
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients may not push
	case *http2.ContinuationFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // (readBlock takes them with their HEADERS)
	default:
		return nil // unknown frame types are ignored
	}
}

func (sc *h2conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if f.NumSettings() > 100 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			sc.wmu.Lock()
			sc.enc.setMaxSize(s.Val)
			sc.wmu.Unlock()
		case http2.SettingInitialWindowSize:
			sc.mu.Lock()
			delta := int64(s.Val) - sc.peerInitWin
			sc.peerInitWin = int64(s.Val)
			for _, st := range sc.streams {
				st.sendWin += delta
				if st.sendWin > 1<<31-1 {
					sc.mu.Unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			sc.cond.Broadcast()
			sc.mu.Unlock()
		case http2.SettingMaxFrameSize:
			sc.mu.Lock()
			sc.peerMaxFrame = s.Val
			sc.mu.Unlock()
		case http2.SettingMaxHeaderListSize:
			sc.mu.Lock()
			sc.peerHeaderList = s.Val
			sc.mu.Unlock()
		}
		return nil
	}); err != nil {
		return err
	}
	return sc.writeFrames(func() error { return sc.fr.WriteSettingsAck() }, true)
}

func (sc *h2conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		sc.sendWin += int64(f.Increment)
		if sc.sendWin > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		sc.cond.Broadcast()
		return nil
	}
	s := sc.streams[f.StreamID]
	if s == nil {
		if f.StreamID > sc.maxID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
		}
		return nil // a closed stream
	}
	if f.Increment == 0 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	s.sendWin += int64(f.Increment)
	if s.sendWin > 1<<31-1 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	sc.cond.Broadcast()
	return nil
}

func (sc *h2conn) onReset(f *http2.RSTStreamFrame) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if f.StreamID > sc.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	s := sc.streams[f.StreamID]
	if s == nil {
		return nil
	}
	s.reset = true
	s.cancel()
	sc.closeStream(s)
	return nil
}

// resetStream sends RST_STREAM and closes the stream (a stream error).
func (sc *h2conn) resetStream(id uint32, code http2.ErrCode) {
	sc.mu.Lock()
	if s := sc.streams[id]; s != nil {
		s.reset = true
		s.cancel()
		sc.closeStream(s)
	}
	sc.mu.Unlock()
	sc.writeFrames(func() error { return sc.fr.WriteRSTStream(id, code) }, true)
}

// closeStream takes a stream out of the connection's (under mu); its
// handler may still run.
func (sc *h2conn) closeStream(s *h2stream) {
	if s.closedMap {
		return
	}
	s.closedMap = true
	delete(sc.streams, s.id)
	sc.open--
	if sc.idle() {
		sc.idleSince = time.Now()
	}
	if s.lingering {
		s.lingering = false
		sc.lingering--
		defer s.free() // (its handler is done)
	}
	// data received and not read goes back to the connection's window
	if n := int64(s.body.buffered()); n > 0 {
		s.body.discard()
		sc.recvUnacked += n
	}
	sc.cond.Broadcast()
}

func (sc *h2conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length) // (flow control counts the padding too)
	sc.mu.Lock()
	if n > sc.recvWin {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	sc.recvWin -= n
	s := sc.streams[id]
	if s == nil || s.remoteDone || s.reset {
		// not a stream that takes data: its bytes go back to the
		// connection's window at once
		sc.recvUnacked += n
		upd := sc.connUpdate()
		idle := id > sc.maxID
		sc.mu.Unlock()
		sc.sendUpdates(0, 0, upd)
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > s.recvWin {
		sc.recvUnacked += n
		upd := sc.connUpdate()
		sc.mu.Unlock()
		sc.sendUpdates(0, 0, upd)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	s.recvWin -= n
	data := f.Data()
	pad := n - int64(len(data))
	s.received += int64(len(data))
	if s.declLen >= 0 && s.received > s.declLen || f.StreamEnded() && s.declLen >= 0 && s.received != s.declLen {
		sc.recvUnacked += n
		upd := sc.connUpdate()
		sc.mu.Unlock()
		sc.sendUpdates(0, 0, upd)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if s.lingering && s.received > maxPostHandlerReadBytes {
		sc.recvUnacked += n
		upd := sc.connUpdate()
		sc.mu.Unlock()
		sc.sendUpdates(0, 0, upd)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeNo} // (RST_STREAM NO_ERROR: stop sending)
	}
	var supd, cupd uint32
	if !s.body.closed {
		s.body.add(data)
	} else {
		// the handler is done (or never reads): give the bytes back
		pad = n
	}
	if pad > 0 {
		s.recvUnacked += pad
		sc.recvUnacked += pad
		supd, cupd = s.streamUpdate(), sc.connUpdate()
	}
	if f.StreamEnded() {
		s.remoteDone = true
		s.body.eof = true
		if s.localDone {
			sc.closeStream(s)
		}
	}
	sc.cond.Broadcast()
	sc.mu.Unlock()
	sc.sendUpdates(id, supd, cupd)
	return nil
}

// connUpdate is the WINDOW_UPDATE the connection's window is due (under
// mu): what the handlers consumed, once it is a quarter of the window.
func (sc *h2conn) connUpdate() uint32 {
	if sc.recvUnacked < h2ConnWindow/4 && sc.recvWin > 0 {
		return 0
	}
	n := sc.recvUnacked
	sc.recvUnacked = 0
	sc.recvWin += n
	return uint32(n)
}

// sendUpdates writes WINDOW_UPDATE frames (stream id's and the
// connection's) for the increments that are not zero.
func (sc *h2conn) sendUpdates(id uint32, stream, conn uint32) {
	if stream == 0 && conn == 0 {
		return
	}
	sc.writeFrames(func() error {
		if conn > 0 {
			if err := sc.fr.WriteWindowUpdate(0, conn); err != nil {
				return err
			}
		}
		if stream > 0 {
			return sc.fr.WriteWindowUpdate(id, stream)
		}
		return nil
	}, false)
}

// onHeaders opens a stream (or ends one with trailers).
func (sc *h2conn) onHeaders(f *h2block) error {
	id := f.id
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	sc.mu.Lock()
	if s := sc.streams[id]; s != nil {
		defer sc.mu.Unlock()
		if s.remoteDone {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		if !f.ended || f.npseudo > 0 {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		for _, hf := range f.regular() {
			k, _ := canonicalH2(hf.Name)
			if !httpguts.ValidTrailerHeader(k) {
				return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
			}
			if s.trailer != nil {
				s.trailer[k] = append(s.trailer[k], hf.Value)
			}
		}
		if s.declLen >= 0 && s.received != s.declLen {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		s.remoteDone = true
		s.body.eof = true
		if s.localDone {
			sc.closeStream(s)
		}
		sc.cond.Broadcast()
		return nil
	}
	if id <= sc.maxID {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	sc.maxID = id
	if sc.closing {
		sc.mu.Unlock()
		return nil // after our GOAWAY: not served (the client retries)
	}
	if sc.open+1 > h2MaxStreams {
		sc.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if f.hasPriority && f.priority.StreamDep == id {
		sc.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	sc.mu.Unlock()

	s := h2streamPool.Get().(*h2stream)
	s.begin(sc, id)
	if err := s.readHeaders(f); err != nil {
		s.free()
		return err
	}
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		s.free()
		return io.EOF
	}
	s.remoteDone = f.ended
	s.body.eof = s.remoteDone
	s.sendWin = sc.peerInitWin
	sc.streams[id] = s
	sc.open++
	if sc.running < h2MaxStreams {
		sc.running++
		sc.mu.Unlock()
		h2Workers.run(s)
		return nil
	}
	// Rapid Reset (CVE-2023-44487): handlers of streams the client reset
	// still count until they return; beyond the limit streams wait, and a
	// client that makes them wait for more than 4 times the limit is
	// told to calm down, as Go's server does.
	if len(sc.queue) >= h2MaxQueuedHandlers {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	sc.queue = append(sc.queue, s)
	sc.mu.Unlock()
	return nil
}

// handlerDone ends the stream after its handler: the response is done;
// a body the client is still sending is refused (RST_STREAM NO_ERROR,
// RFC 9113 8.1); the next queued stream's handler starts.
func (sc *h2conn) handlerDone(s *h2stream) {
	sc.mu.Lock()
	s.body.closed = true
	resetNow := false
	if !s.localDone && !s.reset {
		s.reset = true // (a response not ended: its writes failed)
		resetNow = !sc.closed
	}
	// The response is whole and the client is still sending the body:
	// the stream lingers, half closed, its data dropped (and its window
	// given back), until the body ends, so that a malformed one (a
	// Content-Length it does not match) is still refused; past
	// maxPostHandlerReadBytes it is reset (onData), as net/http's HTTP/1
	// server stops draining a body.
	linger := !s.reset && !s.remoteDone && !sc.closed
	if n := int64(s.body.buffered()); n > 0 {
		s.body.discard()
		sc.recvUnacked += n
		s.recvUnacked += n
	}
	s.cancel()
	var supd uint32
	if linger {
		s.lingering = true
		sc.lingering++
		supd = s.streamUpdate()
	} else {
		sc.closeStream(s)
	}
	upd := sc.connUpdate()
	var next *h2stream
	for len(sc.queue) > 0 && next == nil {
		next = sc.queue[0]
		sc.queue[0] = nil
		sc.queue = sc.queue[1:]
		if next.reset {
			// a queued stream the client reset: never served
			sc.freeLater(next)
			next = nil
		}
	}
	if next == nil {
		sc.running--
	}
	if sc.idle() {
		sc.idleSince = time.Now()
		if sc.closing || sc.l.draining() {
			sc.wakeReader() // the reader closes the connection
		}
	}
	id := s.id // (a lingering stream is the reader's once mu is released: it may free it)
	sc.mu.Unlock()
	if resetNow {
		sc.writeFrames(func() error { return sc.fr.WriteRSTStream(id, http2.ErrCodeNo) }, false)
	}
	sc.sendUpdates(id, supd, upd)
	if !linger {
		s.free() // (a lingering stream is freed when it closes)
	}
	if next != nil {
		h2Workers.run(next)
	}
}

// idle says no stream is being served (under mu): none open but lingering
// ones, no handler running.
func (sc *h2conn) idle() bool { return sc.open-sc.lingering == 0 && sc.running == 0 }

// freeLater frees a queued stream that never ran (under mu).
func (sc *h2conn) freeLater(s *h2stream) {
	go s.free() // (free takes no lock of the connection's; rare: reset while queued)
}

var errStreamGone = errors.New("http2: stream closed")

// writeHeaders writes a HEADERS frame (and CONTINUATIONs) for the stream.
func (sc *h2conn) writeHeaders(s *h2stream, encode func(enc *h2Encoder), end bool) error {
	_, err := sc.writeHeadersData(s, encode, end, nil, false)
	return err
}

// writeHeadersData writes the stream's HEADERS (end: with END_STREAM) and,
// when the send windows take all of p at once, p as one DATA frame
// (dataEnd: with END_STREAM), under one hold of the write lock: a small
// response is one write to the socket, not two (h2load, 10 connections of
// 10 streams: 2.8 writes a request before, one of them the upstream's).
// It reports whether it wrote p; when it did not, the caller sends p
// through writeData, which waits for the windows.
func (sc *h2conn) writeHeadersData(s *h2stream, encode func(enc *h2Encoder), end bool, p []byte, dataEnd bool) (wroteData bool, err error) {
	sc.mu.Lock()
	switch {
	case sc.closed || sc.wfailed.Load():
		sc.mu.Unlock()
		return false, net.ErrClosed
	case s.reset || s.localDone:
		sc.mu.Unlock()
		return false, errStreamGone
	}
	n := int64(len(p))
	withData := !end && n > 0 && n <= s.sendWin && n <= sc.sendWin && n <= int64(sc.peerMaxFrame)
	if withData {
		s.sendWin -= n
		sc.sendWin -= n
	}
	if end || withData && dataEnd {
		sc.endLocal(s)
	}
	sc.mu.Unlock()
	err = sc.writeFrames(func() error {
		if err := sc.headerFrames(s, encode, end); err != nil {
			return err
		}
		if withData {
			return sc.fr.WriteData(s.id, dataEnd, p)
		}
		return nil
	}, false)
	return withData, err
}

// headerFrames writes a HEADERS frame and the CONTINUATIONs its block
// needs (under wmu).
func (sc *h2conn) headerFrames(s *h2stream, encode func(enc *h2Encoder), end bool) error {
	sc.enc.begin()
	encode(&sc.enc)
	block := sc.enc.buf
	sc.mu.Lock()
	max := int(sc.peerMaxFrame)
	sc.mu.Unlock()
	first := true
	for first || len(block) > 0 {
		frag := block
		if len(frag) > max {
			frag = frag[:max]
		}
		block = block[len(frag):]
		var err error
		if first {
			err = sc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
		} else {
			err = sc.fr.WriteContinuation(s.id, len(block) == 0, frag)
		}
		if err != nil {
			return err
		}
		first = false
	}
	return nil
}

// endLocal notes that the stream's last frame is being written (under mu):
// a stream the client ended too is closed now, before the frame goes
// out, so that a client that reuses its id once it has the response
// finds it closed.
func (sc *h2conn) endLocal(s *h2stream) {
	s.localDone = true
	if s.remoteDone {
		sc.closeStream(s)
	}
}

// writeData writes p as DATA frames, as the stream's and the
// connection's send windows allow; end sends END_STREAM with the last.
// A peer that leaves the windows shut makes it wait for at most the write
// timeout (or the stall bound), then the stream is reset.
func (sc *h2conn) writeData(s *h2stream, p []byte, end bool) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var dl time.Time
	for {
		sc.mu.Lock()
		var n int64
		for {
			if sc.closed || sc.wfailed.Load() {
				sc.mu.Unlock()
				return net.ErrClosed
			}
			if s.reset || s.localDone {
				sc.mu.Unlock()
				return errStreamGone
			}
			n = min(int64(len(p)), s.sendWin, sc.sendWin, int64(sc.peerMaxFrame))
			if n > 0 || len(p) == 0 {
				break
			}
			if dl.IsZero() {
				dl = time.Now().Add(sc.stallDL)
				if !s.writeDL.IsZero() && s.writeDL.Before(dl) {
					dl = s.writeDL
				}
			}
			left := time.Until(dl)
			if left <= 0 {
				s.reset = true
				s.cancel()
				sc.closeStream(s)
				sc.mu.Unlock()
				sc.writeFrames(func() error { return sc.fr.WriteRSTStream(s.id, http2.ErrCodeCancel) }, false)
				return os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.AfterFunc(left, func() {
					sc.mu.Lock()
					sc.cond.Broadcast()
					sc.mu.Unlock()
				})
			}
			sc.cond.Wait()
		}
		n = max(n, 0)
		s.sendWin -= n
		sc.sendWin -= n
		last := end && int64(len(p)) == n
		if last {
			sc.endLocal(s)
		}
		sc.mu.Unlock()
		chunk := p[:n]
		p = p[n:]
		err := sc.writeFrames(func() error { return sc.fr.WriteData(s.id, last, chunk) }, false)
		if err != nil {
			return err
		}
		if last {
			return nil
		}
		if len(p) == 0 {
			return nil
		}
	}
}
