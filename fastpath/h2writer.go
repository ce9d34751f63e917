package fastpath

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/apigate/gateway/internal/h1wire"
)

// h2Writer is the http.ResponseWriter of an HTTP/2 stream the plan serves.
// It behaves as Go's HTTP/2 server's response writer (the h2 bundle of the
// Go release the gateway is built with: responseWriterState), since a
// client must not tell the two paths apart: the header snapshot at
// WriteHeader, a 4 KB buffer before the first frame (a short response
// gets a Content-Length, a Content-Type is sniffed), 1xx responses as
// their own HEADERS, Date, trailers (declared with "Trailer" or named
// with http.TrailerPrefix), HEAD without DATA, the same field encoding
// (lower-case names sorted, invalid ones left out, "Connection" dropped).
type h2Writer struct {
	s  *h2stream
	bw *bufio.Writer // to h2ChunkWriter
	h  *reqHead

	handlerHeader  http.Header
	snapHeader     http.Header // the header at WriteHeader: nil or snapStore
	snapStore      http.Header // the stream's map for it, kept across requests
	trailers       []string
	status         int
	wroteHeader    bool
	sentHeader     bool
	handlerFinish  bool
	sentContentLen int64
	wroteBytes     int64

	// what Caddy's access log recorder sees
	logStatus int
	size      int64
	keys      []string
}

type h2ChunkWriter struct{ w *h2Writer }

func (cw h2ChunkWriter) Write(p []byte) (int, error) { return cw.w.writeChunk(p) }

func (w *h2Writer) reset() {
	hh := w.handlerHeader
	if hh == nil {
		hh = make(http.Header, 8)
	} else {
		clear(hh)
	}
	snap := w.snapStore
	if snap != nil {
		clear(snap)
	}
	*w = h2Writer{s: w.s, bw: w.bw, handlerHeader: hh, snapStore: snap, trailers: w.trailers[:0], keys: w.keys[:0]}
	w.bw.Reset(h2ChunkWriter{w})
}

func (w *h2Writer) start(h *reqHead) { w.h = h }

func (w *h2Writer) handlerHdr() http.Header          { return w.handlerHeader }
func (w *h2Writer) logged() (status int, size int64) { return w.logStatus, w.size }

func (w *h2Writer) Header() http.Header { return w.handlerHeader }

func (w *h2Writer) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.logStatus = code
	if code >= 100 && code <= 199 {
		h := w.handlerHeader
		_, cl := h["Content-Length"]
		_, te := h["Transfer-Encoding"]
		if cl || te {
			h = h.Clone()
			delete(h, "Content-Length")
			delete(h, "Transfer-Encoding")
		}
		w.s.sc.writeHeaders(w.s, func(enc *h2Encoder) {
			enc.status(code)
			w.encodeHeaders(enc, h, nil)
		}, false)
		return
	}
	w.wroteHeader = true
	w.status = code
	if len(w.handlerHeader) > 0 { // (a shallow copy, as respWriter's takeSnapshot: no allocation)
		if w.snapStore == nil {
			w.snapStore = make(http.Header, len(w.handlerHeader))
		}
		maps.Copy(w.snapStore, w.handlerHeader)
		w.snapHeader = w.snapStore
	}
}

func (w *h2Writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.wroteBytes += int64(len(p))
	if w.sentContentLen != 0 && w.wroteBytes > w.sentContentLen {
		return 0, errors.New("http2: handler wrote more than declared Content-Length")
	}
	n, err := w.bw.Write(p)
	w.size += int64(n)
	return n, err
}

func (w *h2Writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *h2Writer) Flush() { _ = w.FlushError() }

func (w *h2Writer) FlushError() error {
	if w.bw.Buffered() > 0 {
		return w.bw.Flush()
	}
	_, err := w.writeChunk(nil)
	return err
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's: the
// stream's own deadlines (body reads; waits for the peer's window).
func (w *h2Writer) SetReadDeadline(t time.Time) error {
	sc := w.s.sc
	sc.mu.Lock()
	w.s.readDL, w.s.ownReadDL = t, true
	sc.cond.Broadcast()
	sc.mu.Unlock()
	return nil
}

func (w *h2Writer) SetWriteDeadline(t time.Time) error {
	sc := w.s.sc
	sc.mu.Lock()
	w.s.writeDL = t
	sc.cond.Broadcast()
	sc.mu.Unlock()
	return nil
}

// EnableFullDuplex: HTTP/2 always is.
func (w *h2Writer) EnableFullDuplex() error { return nil }

// writeContinue answers Expect: 100-continue before the first body read.
func (w *h2Writer) writeContinue() {
	w.s.sc.writeHeaders(w.s, func(enc *h2Encoder) { enc.status(100) }, false)
}

// handlerDone ends the response after the handler returned.
func (w *h2Writer) handlerDone() {
	w.handlerFinish = true
	w.FlushError()
}

func (w *h2Writer) hasTrailers() bool { return len(w.trailers) > 0 }

func (w *h2Writer) hasNonemptyTrailers() bool {
	for _, t := range w.trailers {
		if _, ok := w.handlerHeader[t]; ok {
			return true
		}
	}
	return false
}

func (w *h2Writer) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	if !slices.Contains(w.trailers, k) {
		w.trailers = append(w.trailers, k)
	}
}

func (w *h2Writer) promoteUndeclaredTrailers() {
	for k, vv := range w.handlerHeader {
		tk, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok {
			continue
		}
		w.declareTrailer(tk)
		w.handlerHeader[http.CanonicalHeaderKey(tk)] = vv
	}
	if len(w.trailers) > 1 {
		slices.Sort(w.trailers)
	}
}

// writeChunk is Go's: the first chunk sends the HEADERS (with the
// Content-Length when the handler is done, a sniffed Content-Type, Date).
func (w *h2Writer) writeChunk(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.handlerFinish {
		w.promoteUndeclaredTrailers()
	}
	s := w.s
	sc := s.sc
	isHead := w.h != nil && w.h.method == http.MethodHead
	dataSent := false
	if !w.sentHeader {
		w.sentHeader = true
		var ctype, clen string
		if clen = headerGet(w.snapHeader, "Content-Length"); clen != "" {
			delete(w.snapHeader, "Content-Length")
			if cl, err := strconv.ParseUint(clen, 10, 63); err == nil {
				w.sentContentLen = int64(cl)
			} else {
				clen = ""
			}
		}
		_, hasCL := w.snapHeader["Content-Length"]
		if !hasCL && clen == "" && w.handlerFinish && bodyAllowedForStatus(w.status) && (len(p) > 0 || !isHead) {
			clen = strconv.Itoa(len(p))
		}
		_, hasCT := w.snapHeader["Content-Type"]
		if headerGet(w.snapHeader, "Content-Encoding") == "" && !hasCT && bodyAllowedForStatus(w.status) && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
		var date []byte
		if _, ok := w.snapHeader["Date"]; !ok {
			date = sc.l.date(s.st.ex.clock)
		}
		for _, v := range w.snapHeader["Trailer"] {
			foreachHeaderElement(v, w.declareTrailer)
		}
		if _, ok := w.snapHeader["Connection"]; ok {
			v := headerGet(w.snapHeader, "Connection")
			delete(w.snapHeader, "Connection")
			if v == "close" {
				go sc.drain()
			}
		}
		end := w.handlerFinish && !w.hasTrailers() && len(p) == 0 || isHead
		status := w.status
		snap := w.snapHeader
		var err error
		// (p goes in the same write when the windows allow)
		dataSent, err = sc.writeHeadersData(s, func(enc *h2Encoder) {
			enc.status(status)
			w.encodeHeaders(enc, snap, nil)
			if ctype != "" {
				enc.field(h2NameContentType, ctype)
			}
			if clen != "" {
				enc.field(h2NameContentLength, clen)
			}
			if date != nil {
				enc.field(h2NameDate, string(date))
			}
		}, end, p, w.handlerFinish && !w.hasNonemptyTrailers())
		if err != nil {
			return 0, err
		}
		if end {
			return 0, nil
		}
	}
	if isHead {
		return len(p), nil
	}
	if len(p) == 0 && !w.handlerFinish {
		return 0, nil
	}
	nonEmptyTrailers := w.hasNonemptyTrailers()
	end := w.handlerFinish && !nonEmptyTrailers
	if !dataSent && (len(p) > 0 || end) {
		if err := sc.writeData(s, p, end); err != nil {
			return 0, err
		}
	}
	if w.handlerFinish && nonEmptyTrailers {
		hh, keys := w.handlerHeader, w.trailers
		return len(p), sc.writeHeaders(s, func(enc *h2Encoder) {
			w.encodeHeaders(enc, hh, keys)
		}, true)
	}
	return len(p), nil
}

// encodeHeaders is Go's encodeHeaders: h's fields (or only keys), sorted,
// lower-case, without invalid names and values, Transfer-Encoding only as
// "trailers".
func (w *h2Writer) encodeHeaders(enc *h2Encoder, h http.Header, keys []string) {
	if keys == nil {
		keys = w.keys[:0]
		for k := range h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		defer func() { clear(keys); w.keys = keys[:0] }()
	}
	for _, k := range keys {
		vv := h[k]
		n, ok := h2FieldName(k)
		if !ok {
			continue
		}
		isTE := n.static == h2StaticTransferEncoding
		for _, v := range vv {
			if !h1wire.ValidFieldValue(v) || isTE && v != "trailers" {
				continue
			}
			enc.field(n, v)
		}
	}
}

// validWireName is http2's validWireHeaderFieldName: a token, lower case.
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

var statusStrings = func() (s [600]string) {
	for i := 100; i < 600; i++ {
		s[i] = strconv.Itoa(i)
	}
	return
}()

func statusString(code int) string {
	if code >= 100 && code < 600 {
		return statusStrings[code]
	}
	return strconv.Itoa(code)
}
