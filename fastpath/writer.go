package fastpath

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apigate/gateway/internal/h1wire"

	"golang.org/x/net/http/httpguts"
)

// respWriter is the http.ResponseWriter of a request the plan serves. It
// behaves as net/http's HTTP/1.x response writer does, since clients must
// not tell the two paths apart: the header snapshot at WriteHeader, the
// first 2048 bytes of body held back (so a short response gets a
// Content-Length, and a Content-Type is sniffed when none was set), chunked
// encoding otherwise, HEAD and 1xx/204/304 without bodies, trailers (the
// "Trailer" header and http.TrailerPrefix), 100 Continue when the handler
// first reads a body the client waits to send, and the Connection header
// net/http writes. The behaviour follows net/http's server.go (response,
// chunkWriter) in the Go release the gateway is built with.
type respWriter struct {
	c *conn
	h *reqHead

	handlerHeader http.Header // what Header returns; the connection's, cleared per request
	snapshot      http.Header // the header as it was at WriteHeader (net/http's cw.header)
	snapTaken     bool        // snapshot holds this request's header
	calledHeader  bool
	// headerStable: the caller of WriteHeader (the proxy step) changes
	// nothing in the header before the head is written, so the head is
	// written from the handler's header and WriteHeader copies nothing
	headerStable bool
	// fieldsChecked: the header map is one takeHeader gave, whose fields
	// are written as they stand (fieldWritable holds for each): the
	// head's writing checks no name or value again
	fieldsChecked bool
	// the map takeHeader gave, as a list of its fields (nil:
	// collectFields walks the map), and whether it came empty
	takenMap

	status        int
	wroteHeader   bool  // WriteHeader (a final one) was called
	committed     bool  // the head is in the connection's write buffer
	contentLength int64 // declared; -1 none
	written       int64
	chunking      bool
	closeAfter    bool
	handlerDone   bool
	tooBig        bool // the unread request body was too large to drain
	fullDuplex    bool // EnableFullDuplex: the body is not read before the head

	canWriteContinue bool // a 100 Continue may still be sent
	wroteContinue    bool

	extra    extraHeader
	pend     []byte          // body held back before the head is written (bufferBeforeChunkingSize)
	trailers []string        // declared trailer names
	fields   []namedValues   // scratch: header fields sorted by name
	known    knownFields     // scratch: the fields commit decides on (collectFields)
	excl     map[string]bool // scratch: the fields a head leaves out
	sawEOF   bool

	bytesOut int64 // body bytes sent, for the audit log and metrics

	// what Caddy's access log recorder sees: the last status written
	// (informational ones too, until a final one), the body bytes the
	// handlers wrote
	logStatus int
	size      int64
}

// bufferBeforeChunkingSize is net/http's: this much of a response body is
// held back before the head is written.
const bufferBeforeChunkingSize = 2048

func (w *respWriter) reset(c *conn, h *reqHead) {
	hdr, snap := w.handlerHeader, w.snapshot
	if hdr == nil {
		hdr = make(http.Header, 8)
	} else {
		clear(hdr)
	}
	if snap != nil {
		clear(snap)
	}
	*w = respWriter{
		c:                c,
		h:                h,
		handlerHeader:    hdr,
		snapshot:         snap,
		contentLength:    -1,
		pend:             w.pend[:0],
		trailers:         w.trailers[:0],
		fields:           w.fields[:0],
		excl:             w.excl,
		canWriteContinue: h.expect100,
	}
}

// stableHeader says that nothing changes the header between WriteHeader
// and the head's writing (the proxy step's promise): no snapshot copy.
func (w *respWriter) stableHeader() { w.headerStable = true }

func (w *respWriter) handlerHdr() http.Header {
	w.fillMap()
	return w.handlerHeader
}
func (w *respWriter) logged() (status int, size int64) { return w.logStatus, w.size }

// Header returns the response header map.
func (w *respWriter) Header() http.Header {
	w.fillMap()
	if !w.snapTaken && w.wroteHeader && !w.committed {
		// First called between the logical and the physical writing of
		// the head: what is written is the header as it is now.
		w.takeSnapshot()
	}
	w.calledHeader = true
	if !w.wroteHeader {
		w.fieldsChecked, w.takenFields = false, nil // (the caller may change the map)
	}
	return w.handlerHeader
}

func (w *respWriter) takeSnapshot() {
	w.fillMap()
	if w.snapshot == nil {
		w.snapshot = make(http.Header, len(w.handlerHeader))
	}
	for k, v := range w.handlerHeader {
		w.snapshot[k] = v
	}
	w.snapTaken = true
}

// bodyRead is called before the handler's first read of the request body:
// a client that waits for 100 Continue is told to send it.
func (w *respWriter) bodyRead() {
	if w.canWriteContinue {
		w.canWriteContinue = false
		w.wroteContinue = true
		bw := w.c.bw
		bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		w.c.flush()
	}
}

// WriteHeader sends (logically) the response head with the status code.
func (w *respWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return // net/http logs a "superfluous response.WriteHeader call"
	}
	w.logStatus = code
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 101 || code > 199 {
		w.canWriteContinue = false
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		bw := w.c.bw
		writeStatusLine(bw, w.h.minor == 1, code)
		w.fillMap()
		w.writeHeaderSubset(bw, w.handlerHeader, excludedNoBody, false)
		bw.WriteString("\r\n")
		w.c.flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	if w.calledHeader && !w.snapTaken && !w.headerStable {
		w.takeSnapshot()
	}
	var cl string
	if w.mapEmpty {
		cl = listFirst(w.takenFields, "Content-Length")
	} else {
		cl = headerGet(w.handlerHeader, "Content-Length")
	}
	if cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.l.debug("invalid Content-Length from handler", cl)
			w.fillMap()
			delete(w.handlerHeader, "Content-Length")
			w.takenFields = nil
			if w.snapTaken {
				delete(w.snapshot, "Content-Length")
			}
		}
	}
}

// Write writes body bytes.
func (w *respWriter) Write(p []byte) (int, error) {
	n, err := w.write(p)
	w.size += int64(n)
	return n, err
}

func (w *respWriter) write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if w.canWriteContinue {
		w.canWriteContinue = false
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.pend)+len(p) <= bufferBeforeChunkingSize {
			w.pend = append(w.pend, p...)
			return len(p), nil
		}
		// As bufio.Writer does: the held-back bytes and as much of p as
		// fits go first (or p alone, when nothing is held back).
		if len(w.pend) == 0 {
			w.commit(p)
			return len(p), w.writeBody(p)
		}
		k := bufferBeforeChunkingSize - len(w.pend)
		w.pend = append(w.pend, p[:k]...)
		w.commit(w.pend)
		if err := w.writeBody(w.pend); err != nil {
			return 0, err
		}
		w.pend = w.pend[:0]
		return len(p), w.writeBody(p[k:])
	}
	return len(p), w.writeBody(p)
}

// WriteString is io.StringWriter.
func (w *respWriter) WriteString(s string) (int, error) {
	return w.Write([]byte(s)) // rare (static responses); not worth a second path
}

// writeBody writes committed body bytes, chunk-encoded when chunking.
func (w *respWriter) writeBody(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if w.h.method == http.MethodHead {
		return nil // eaten, as net/http does
	}
	c := w.c
	if c.werr != nil {
		return c.werr
	}
	bw := c.bw
	if w.chunking {
		var b [18]byte
		bw.Write(strconv.AppendInt(b[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	bw.Write(p)
	if w.chunking {
		bw.WriteString("\r\n")
	}
	w.bytesOut += int64(len(p))
	return c.checkWrite()
}

// Flush sends what is buffered.
func (w *respWriter) Flush() { _ = w.FlushError() }

// ReadFrom is net/http's response.ReadFrom: after the first 512 bytes
// (for Content-Type sniffing) and the head are written, a body of a
// declared length goes from src to the client's TCP connection with the
// kernel's sendfile or splice (file_server's files), without a copy
// through user space; otherwise it is copied.
func (w *respWriter) ReadFrom(src io.Reader) (int64, error) {
	var n int64
	rf, ok := w.c.nc.(io.ReaderFrom) // a *net.TCPConn (not TLS)
	if !ok || w.c.tlsConn != nil {
		return io.Copy(writerOnly{w}, src)
	}
	if !w.committed {
		n0, err := io.Copy(writerOnly{w}, io.LimitReader(src, sniffLen))
		n += n0
		if err != nil || n0 < sniffLen {
			return n, err
		}
	}
	if err := w.FlushError(); err != nil {
		return n, err
	}
	if w.chunking || !bodyAllowedForStatus(w.status) || w.h.method == http.MethodHead {
		n0, err := io.Copy(writerOnly{w}, src)
		return n + n0, err
	}
	// In pieces of write_max_chunk, each with the write deadline moved
	// (as Caddy's idle timeout writer does; write_idle is a minute by
	// default), each handed to the kernel: net's TCPConn.ReadFrom sends a
	// file (or a *io.LimitedReader of one, which is what net/http's
	// ServeContent passes) with sendfile.
	chunk := int64(w.c.l.maxWriteChunk)
	if chunk <= 0 {
		chunk = 1 << 62
	}
	lr, _ := src.(*io.LimitedReader)
	if lr == nil {
		lr = &io.LimitedReader{R: src, N: 1<<63 - 1}
	}
	if _, ok := lr.R.(*os.File); ok {
		sendfiles.Add(1)
	}
	for lr.N > 0 {
		k := min(lr.N, chunk)
		piece := io.LimitedReader{R: lr.R, N: k}
		w.c.setWriteDeadline()
		n0, err := rf.ReadFrom(&piece)
		lr.N -= n0
		n += n0
		w.written += n0
		w.size += n0
		w.bytesOut += n0
		if err != nil {
			if w.c.werr == nil {
				w.c.werr = err
			}
			return n, err
		}
		if n0 < k {
			break // (the end of src)
		}
	}
	return n, nil
}

// sendfiles counts the file bodies ReadFrom handed to the kernel
// (TestFileServer).
var sendfiles atomic.Int64

// sniffLen is net/http's: the bytes Content-Type sniffing reads.
const sniffLen = 512

// writerOnly hides ReadFrom, so that io.Copy into it writes.
type writerOnly struct{ io.Writer }

// Hijack hands the connection to the handler (net/http's Hijacker): the
// fast path no longer reads, writes or closes it. The reader returned
// holds the bytes already read after the request.
func (w *respWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	c.flush()
	if c.werr != nil {
		return nil, nil, c.werr
	}
	c.hijacked = true
	c.nc.SetDeadline(time.Time{})
	// (a shutdown no longer waits for it, as net/http's does not wait
	// for hijacked connections: the handler that took it closes it)
	c.l.forget(c)
	var rd io.Reader = c.nc
	if buf := c.rb.Buffered(); len(buf) > 0 {
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(buf)), c.nc)
		c.rb.Discard(len(buf))
	}
	return c.nc, bufio.NewReadWriter(bufio.NewReader(rd), bufio.NewWriter(c.nc)), nil
}

// FlushError is what http.ResponseController calls.
func (w *respWriter) FlushError() error {
	if w.c.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.pend)
		if err := w.writeBody(w.pend); err != nil {
			return err
		}
		w.pend = w.pend[:0]
	}
	w.c.flush()
	return w.c.werr
}

// SetWriteDeadline, SetReadDeadline and EnableFullDuplex are what
// http.ResponseController finds on net/http's writer.
// (through the connection's own bookkeeping of its deadlines)
func (w *respWriter) SetWriteDeadline(t time.Time) error {
	w.c.ownWriteDL = true
	w.c.writeDL = t
	return w.c.nc.SetWriteDeadline(t)
}

func (w *respWriter) SetReadDeadline(t time.Time) error {
	w.c.ownReadDL = true
	w.c.readDL = t
	return w.c.nc.SetReadDeadline(t)
}

// EnableFullDuplex lets the handler read the request body after the
// response head went out (net/http's: the body is then not read ahead).
func (w *respWriter) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// finish ends the response after the handler returned; it reports whether
// the connection can serve another request.
func (w *respWriter) finish() bool {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.pend)
		w.writeBody(w.pend)
		w.pend = w.pend[:0]
	}
	if w.chunking {
		bw := w.c.bw
		bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		bw.WriteString("\r\n")
	}
	w.c.flush()
	return w.shouldReuse()
}

func (w *respWriter) shouldReuse() bool {
	if w.closeAfter {
		return false
	}
	if w.h.method != http.MethodHead && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.contentLength != w.written {
		return false // did not write what it declared
	}
	if w.c.werr != nil {
		return false
	}
	// A body left unread (the head went out before the handler was done
	// with it) is drained now, within the same limit.
	if b := &w.c.body; !b.sawEOF && !b.empty() {
		return b.drain()
	}
	return true
}

// commit writes the head to the connection's buffer (net/http's
// chunkWriter.writeHeader, in its steps); p is the first body chunk, for
// Content-Length and Content-Type sniffing.
func (w *respWriter) commit(p []byte) {
	if w.committed {
		return
	}
	w.committed = true
	if w.status == http.StatusSwitchingProtocols {
		w.fillMap() // (framing reads its Connection field)
	}
	keepAlives := !w.c.l.draining()
	if w.excl == nil {
		w.excl = make(map[string]bool)
	}
	clear(w.excl)
	hd := respHead{header: w.handlerHeader, owned: w.snapTaken, excl: w.excl, known: &w.known}
	if hd.owned {
		hd.header = w.snapshot
	}
	w.extra = extraHeader{}

	if w.takenFields != nil { // (the map's fields, listed as it was taken)
		w.useFields(w.takenFields)
	} else {
		w.collectFields(hd.header) // (the one pass over the head's map, and hd.known)
	}
	trailers := w.trailerFields(&hd)
	te := hd.known.get(knownTE)
	if w.handlerDone && !trailers && te == "" && bodyAllowedForStatus(w.status) &&
		!hd.known.has(knownCL) && (w.h.method != http.MethodHead || len(p) > 0) {
		w.contentLength = int64(len(p))
		w.extra.contentLength = strconv.AppendInt(w.extra.clBuf[:0], int64(len(p)), 10)
	}
	w.connectionReuse(&hd, keepAlives)
	w.finishRequestBody(&hd)
	w.framing(&hd, p, te, keepAlives)

	bw := w.c.bw
	writeStatusLine(bw, w.h.minor == 1, w.status)
	w.writeFields(bw, hd.exclude, w.fieldsChecked)
	w.extra.write(bw)
	bw.WriteString("\r\n")
}

// respHead is the header a response's head is written from: the
// handler's, whose fields commit leaves out (exclude) rather than delete,
// or the snapshot taken at WriteHeader, which is the writer's own (owned).
type respHead struct {
	header  http.Header
	owned   bool
	exclude map[string]bool // nil or excl
	excl    map[string]bool // the writer's, empty, for exclude
	// the fields commit decides on, as collectFields found them in
	// header, less those del took out
	known *knownFields
}

// del leaves a field out of the head.
func (h *respHead) del(key string) {
	if bit := knownBit(key); bit != 0 {
		if !h.known.has(bit) {
			return
		}
		h.known.forget(bit)
	} else if _, ok := h.header[key]; !ok {
		return
	}
	if h.owned { // (gone from the map for what commit reads after)
		delete(h.header, key)
	}
	h.excludeField(key) // (the fields are collected already)
}

// knownFields holds the fields of a response head that commit decides on,
// taken in collectFields' one pass over the head's map instead of a map
// lookup each (about 150 instructions a lookup in a proxied response's
// map of 8 fields: ~1,000 a request, callgrind, bench/callgrind/run).
type knownFields struct {
	present uint8              // a bit per known field (knownTE, ...)
	first   [knownCount]string // each one's first value
}

// the known fields' bits
const (
	knownTE uint8 = 1 << iota
	knownCL
	knownConnection
	knownContentType
	knownContentEncoding
	knownDate
	knownCount = iota
)

// knownBit is the bit of the field named key (canonical), or 0.
func knownBit(key string) uint8 {
	switch key {
	case "Transfer-Encoding":
		return knownTE
	case "Content-Length":
		return knownCL
	case "Connection":
		return knownConnection
	case "Content-Type":
		return knownContentType
	case "Content-Encoding":
		return knownContentEncoding
	case "Date":
		return knownDate
	}
	return 0
}

// note records a field of the head, if it is a known one.
func (k *knownFields) note(key string, vv []string) {
	if bit := knownBit(key); bit != 0 {
		k.present |= bit
		if len(vv) > 0 {
			k.first[bits.TrailingZeros8(bit)] = vv[0]
		} else {
			k.first[bits.TrailingZeros8(bit)] = ""
		}
	}
}

// has reports whether the field is in the head (headerHas).
func (k *knownFields) has(bit uint8) bool { return k.present&bit != 0 }

// get is the field's first value, or "" (headerGet).
func (k *knownFields) get(bit uint8) string {
	if k.present&bit == 0 {
		return ""
	}
	return k.first[bits.TrailingZeros8(bit)]
}

func (k *knownFields) forget(bit uint8) { k.present &^= bit }

func (h *respHead) excludeField(key string) {
	if h.exclude == nil {
		h.exclude = h.excl
	}
	h.exclude[key] = true
}

// trailerFields leaves the handler's "Trailer:"-prefixed fields out of the
// head and declares the trailers the response announces; it says whether
// there are any.
func (w *respWriter) trailerFields(hd *respHead) (trailers bool) {
	// the fields of the snapshot net/http takes (w.snapshot, or the
	// handler's header when it is stable): commit collected them from it
	if !w.snapTaken && !(w.headerStable && w.calledHeader) {
		return false
	}
	var declared []string // (its Trailer field, found in the walk: no lookup)
	for _, f := range w.fields {
		if strings.HasPrefix(f.name, http.TrailerPrefix) {
			hd.excludeField(f.name)
			trailers = true
		} else if f.name == "Trailer" {
			declared = f.values
		}
	}
	for _, v := range declared {
		trailers = true
		foreachHeaderElement(v, w.declareTrailer)
	}
	return trailers
}

// connectionReuse decides whether the connection stays open after this
// response: HTTP/1.0 keep-alive, the request's and the handler's
// Connection fields, a reload's drain, and a 100-continue never sent.
func (w *respWriter) connectionReuse(hd *respHead, keepAlives bool) {
	isHEAD := w.h.method == http.MethodHead
	wants10KeepAlive := w.h.keepAlive10
	if wants10KeepAlive && keepAlives {
		sentLength := hd.known.get(knownCL) != ""
		if sentLength && hd.known.get(knownConnection) == "keep-alive" {
			w.closeAfter = false
		}
	}
	hasCL := w.contentLength != -1
	if wants10KeepAlive && (isHEAD || hasCL || !bodyAllowedForStatus(w.status)) {
		if !hd.known.has(knownConnection) {
			w.extra.connection = "keep-alive"
		}
	} else if w.h.minor == 0 || w.h.close {
		w.closeAfter = true
	}
	if hd.known.get(knownConnection) == "close" || !keepAlives {
		w.closeAfter = true
	}

	// A client that waited for 100 Continue that never came may still be
	// about to send the body: do not read its bytes as the next request.
	if b := &w.c.body; w.h.expect100 && !w.wroteContinue && !b.sawEOF {
		w.closeAfter = true
	}
}

// finishRequestBody reads the rest of the request body before the head
// goes out, so that clients that send a whole request before reading the
// response do not deadlock; a body too large to drain closes the
// connection after the response (net/http's tooBig).
func (w *respWriter) finishRequestBody(hd *respHead) {
	b := &w.c.body
	if b.empty() || w.closeAfter || w.fullDuplex {
		return
	}
	switch {
	case b.closed && !b.sawEOF && b.err != nil:
		w.closeAfter = true
	case !b.chunked && b.n >= maxPostHandlerReadBytes && !b.sawEOF:
		w.tooBig = true
	default:
		if !b.drain() {
			if b.err != nil {
				w.closeAfter = true
			} else {
				w.tooBig = true
			}
		}
	}
	if w.tooBig {
		w.closeAfter = true
		hd.del("Connection")
		w.extra.connection = "close"
	}
}

// framing settles the fields that frame the body: Content-Type sniffed
// from the first chunk, the fields a status may not carry, Date, and
// Content-Length against the handler's Transfer-Encoding, te (chunked for
// an HTTP/1.1 response of unknown length, close-delimited for HTTP/1.0).
func (w *respWriter) framing(hd *respHead, p []byte, te string, keepAlives bool) {
	header, set := hd.header, &w.extra
	isHEAD := w.h.method == http.MethodHead
	hasTE := te != ""
	hasCL := w.contentLength != -1
	code := w.status
	if bodyAllowedForStatus(code) {
		haveType := hd.known.has(knownContentType)
		hasCE := hd.known.get(knownContentEncoding) != ""
		if !hasCE && !haveType && !hasTE && len(p) > 0 {
			set.contentType = http.DetectContentType(p)
		}
	} else {
		for _, k := range suppressedHeaders(code) {
			hd.del(k)
		}
	}

	if !hd.known.has(knownDate) {
		set.date = w.c.l.date(w.c.ex.clock)
	}

	if hasCL && hasTE && te != "identity" {
		hd.del("Content-Length")
		hasCL = false
	}

	if isHEAD || !bodyAllowedForStatus(code) || code == http.StatusNoContent {
		hd.del("Transfer-Encoding")
	} else if hasCL {
		hd.del("Transfer-Encoding")
	} else if w.h.minor == 1 {
		if hasTE && te == "identity" {
			w.chunking = false
			w.closeAfter = true
			hd.del("Transfer-Encoding")
		} else {
			w.chunking = true
			set.transferEncoding = "chunked"
			if hasTE && te == "chunked" {
				hd.del("Transfer-Encoding")
			}
		}
	} else {
		w.closeAfter = true
		hd.del("Transfer-Encoding")
	}
	if w.chunking {
		hd.del("Content-Length")
	}

	if w.closeAfter && (!keepAlives || !h1wire.HasToken(hd.known.get(knownConnection), "close")) && !isProtocolSwitch(code, header) {
		hd.del("Connection")
		if w.h.minor == 1 {
			set.connection = "close"
		}
	}
}

func (w *respWriter) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	w.trailers = append(w.trailers, k)
}

// writeTrailers writes the trailer fields (net/http's finalTrailers).
func (w *respWriter) writeTrailers(bw *bufio.Writer) {
	w.fillMap()
	var t http.Header
	for k, vv := range w.handlerHeader {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.handlerHeader[k] {
			t.Add(k, v)
		}
	}
	if t != nil {
		w.writeHeaderSubset(bw, t, nil, false)
	}
}

// writeHeaderSubset writes h's fields but the excluded ones, sorted by
// name, as http.Header.WriteSubset does.
func (w *respWriter) writeHeaderSubset(bw *bufio.Writer, h http.Header, exclude map[string]bool, useKeys bool) {
	w.collectFields(h)
	w.writeFields(bw, exclude, false)
}

// collectFields takes h's names with their values in one pass over the map
// (no second lookup per name), for writeFields and trailerFields.
func (w *respWriter) collectFields(h http.Header) {
	fields := w.fields[:0]
	w.known = knownFields{}
	for k, vv := range h {
		fields = append(fields, namedValues{k, vv})
		w.known.note(k, vv)
	}
	w.fields = fields
}

// useFields is collectFields from a list of the map's fields, which
// becomes the writer's (takeHeader's scratch, rebuilt per response).
func (w *respWriter) useFields(list []namedValues) {
	w.fields = list
	w.known = knownFields{}
	for _, f := range list {
		w.known.note(f.name, f.values)
	}
}

// writeFields writes the collected fields but the excluded ones, sorted by
// name, and forgets them. Unless checked (each field is known to satisfy
// fieldWritable), a field with an invalid name is left out and a value's
// CR and LF become spaces and its ends are trimmed, as net/http does.
func (w *respWriter) writeFields(bw *bufio.Writer, exclude map[string]bool, checked bool) {
	fields := w.fields
	if len(fields) > 16 {
		slices.SortFunc(fields, func(a, b namedValues) int { return strings.Compare(a.name, b.name) })
	} else { // (the usual few: an insertion sort, no comparison calls)
		for i := 1; i < len(fields); i++ {
			for j := i; j > 0 && nameLess(fields[j].name, fields[j-1].name); j-- {
				fields[j], fields[j-1] = fields[j-1], fields[j]
			}
		}
	}
	var out h1wire.Fields
	out.Start(bw)
	for _, f := range fields {
		if exclude != nil && exclude[f.name] {
			continue
		}
		if checked {
			for _, v := range f.values {
				out.Add(f.name, v)
			}
			continue
		}
		if !h1wire.ValidToken(f.name) {
			continue
		}
		for _, v := range f.values {
			// (two IndexByte scans: strings.ContainsAny builds a byte
			// set on every call)
			if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
				v = headerNewlineToSpace.Replace(v)
			}
			out.Add(f.name, textproto.TrimString(v))
		}
	}
	out.Done()
	clear(fields)
	w.fields = fields[:0]
}

// fieldWritable reports whether writeFields writes the field as it stands:
// a valid name, and values without a control byte but HTAB (so without
// CR or LF) and without space or HTAB at their ends (what
// textproto.TrimString would take off). It may say false for a field that
// is (another control byte): that field is then checked as it is written.
func fieldWritable(name string, values []string) bool {
	if !h1wire.ValidToken(name) {
		return false
	}
	for _, v := range values {
		if !h1wire.ValidFieldValue(v) || len(h1wire.TrimOWS(v)) != len(v) {
			return false
		}
	}
	return true
}

// nameLess is a < b for field names, deciding on the first byte where
// it differs without a call (names mostly begin differently: the sort's
// string comparisons were ~600 instructions a proxied request, callgrind).
func nameLess(a, b string) bool {
	if a != "" && b != "" && a[0] != b[0] {
		return a[0] < b[0]
	}
	return a < b
}

// namedValues is a header field's name and values.
type namedValues struct {
	name   string
	values []string
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// extraHeader is net/http's: the fields the server adds.
type extraHeader struct {
	contentType      string
	connection       string
	transferEncoding string
	date             []byte
	contentLength    []byte
	clBuf            [20]byte
}

func (h *extraHeader) write(bw *bufio.Writer) {
	if h.date != nil {
		bw.WriteString("Date: ")
		bw.Write(h.date)
		bw.WriteString("\r\n")
	}
	if h.contentLength != nil {
		bw.WriteString("Content-Length: ")
		bw.Write(h.contentLength)
		bw.WriteString("\r\n")
	}
	for i, v := range [3]string{h.contentType, h.connection, h.transferEncoding} {
		if v != "" {
			bw.WriteString(extraHeaderKeys[i])
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
}

var extraHeaderKeys = [3]string{"Content-Type", "Connection", "Transfer-Encoding"}

var (
	excludedNoBody      = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
	suppressed304       = []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	suppressedNoBodyHdr = []string{"Content-Length", "Transfer-Encoding"}
)

func suppressedHeaders(status int) []string {
	switch {
	case status == 304:
		return suppressed304
	case !bodyAllowedForStatus(status):
		return suppressedNoBodyHdr
	}
	return nil
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204:
		return false
	case status == 304:
		return false
	}
	return true
}

func isProtocolSwitch(code int, h http.Header) bool {
	return code == http.StatusSwitchingProtocols && hasTokenValues(h["Connection"], "upgrade")
}

func hasTokenValues(vv []string, token string) bool {
	for _, v := range vv {
		if h1wire.HasToken(v, token) {
			return true
		}
	}
	return false
}

// headerGet is http.Header.Get for a canonical key, without canonicalizing.
func headerGet(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headerHas is net/http's Header.has: the key is present with a value.
func headerHas(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

func foreachHeaderElement(v string, fn func(string)) {
	v = textproto.TrimString(v)
	if v == "" {
		return
	}
	if !strings.Contains(v, ",") {
		fn(v)
		return
	}
	for f := range strings.SplitSeq(v, ",") {
		if f = textproto.TrimString(f); f != "" {
			fn(f)
		}
	}
}

// writeStatusLine is net/http's.
func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if code >= 100 && code < 600 {
		if is11 {
			bw.WriteString(statusLines11[code])
		} else {
			bw.WriteString(statusLines10[code])
		}
		return
	}
	if is11 {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	fmt.Fprintf(bw, "%03d status code %d\r\n", code, code)
}

// statusLines are the status lines net/http writes, made once.
var statusLines11, statusLines10 = func() (a, b [600]string) {
	for code := 100; code < 600; code++ {
		line := fmt.Sprintf("%03d status code %d\r\n", code, code)
		if text := http.StatusText(code); text != "" {
			line = strconv.Itoa(code) + " " + text + "\r\n"
		}
		a[code], b[code] = "HTTP/1.1 "+line, "HTTP/1.0 "+line
	}
	return
}()
