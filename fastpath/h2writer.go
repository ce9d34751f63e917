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

	handlerHeader http.Header
	// The header as it was at WriteHeader is what is sent. It is copied
	// (snapStore, the stream's map, kept across requests) only when it
	// could change before the HEADERS go out: at WriteHeader when a
	// handler holds the map (calledHeader) and the proxy step did not
	// promise to leave it alone (headerStable), or at a Header call
	// between WriteHeader and the HEADERS; otherwise handlerHeader is
	// sent as it is (respWriter's rule).
	snapStore      http.Header
	snapTaken      bool
	calledHeader   bool
	headerStable   bool
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
	pairs     []h2Pair // the fields being encoded (sorted by key)
	// the map takeHeader gave, as a list of its fields (nil: collect
	// walks the map), and whether it came empty
	takenMap
}

// h2Pair is a header field's key and values, as encodeHeaders sorts them.
type h2Pair struct {
	k  string
	vv []string
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
	if w.snapTaken {
		clear(snap)
	}
	*w = h2Writer{s: w.s, bw: w.bw, handlerHeader: hh, snapStore: snap, trailers: w.trailers[:0], pairs: w.pairs[:0]}
	w.bw.Reset(h2ChunkWriter{w})
}

func (w *h2Writer) start(h *reqHead) { w.h = h }

func (w *h2Writer) handlerHdr() http.Header {
	w.fillMap()
	return w.handlerHeader
}

// heldHeader is the stream's header map for takeHeader (headerHolder).
func (w *h2Writer) heldHeader() *http.Header {
	if w.snapTaken || w.wroteHeader {
		return nil
	}
	return &w.handlerHeader
}

// gotHeader keeps the list of the map's fields for collectList (HPACK
// encoding checks each field anyway: checked does not matter here).
func (w *h2Writer) gotHeader(_ bool, fields []namedValues, empty bool) {
	w.got(w.handlerHeader, fields, empty)
}

func (w *h2Writer) fillMap() { w.fill(w.handlerHeader) }

func (w *h2Writer) logged() (status int, size int64) { return w.logStatus, w.size }

func (w *h2Writer) Header() http.Header {
	w.fillMap()
	if w.wroteHeader && !w.sentHeader && !w.snapTaken {
		// first called between WriteHeader and the HEADERS: what is
		// sent is the header as it is now
		w.takeSnapshot()
	}
	w.calledHeader = true
	if !w.wroteHeader {
		w.takenFields = nil // (the caller may change the map)
	}
	return w.handlerHeader
}

// stableHeader says that nothing changes the header between WriteHeader
// and the HEADERS (the proxy step's promise): no snapshot copy.
func (w *h2Writer) stableHeader() { w.headerStable = true }

// takeSnapshot copies the header (shallow, as respWriter's: no
// allocation once the stream's map has grown).
func (w *h2Writer) takeSnapshot() {
	w.fillMap()
	if w.snapStore == nil {
		w.snapStore = make(http.Header, len(w.handlerHeader))
	}
	maps.Copy(w.snapStore, w.handlerHeader)
	w.snapTaken = true
}

func (w *h2Writer) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.logStatus = code
	if code >= 100 && code <= 199 {
		w.fillMap()
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
	if w.calledHeader && !w.snapTaken && !w.headerStable {
		w.takeSnapshot()
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
	var hf h2HeadFields
	if !w.sentHeader {
		snap := w.handlerHeader
		if w.snapTaken {
			snap = w.snapStore
		}
		if w.takenFields != nil && !w.snapTaken {
			hf = w.collectList(w.takenFields)
		} else {
			hf = w.collect(snap)
		}
		if w.snapTaken {
			hf.prefixed = true // (the handler's map may have others: promote looks)
		}
	}
	if w.handlerFinish && (w.sentHeader || hf.prefixed) {
		w.promoteUndeclaredTrailers()
	}
	s := w.s
	sc := s.sc
	isHead := w.h != nil && w.h.method == http.MethodHead
	dataSent := false
	if !w.sentHeader {
		w.sentHeader = true
		var ctype, clen string
		hasCL := hf.clPresent
		if len(hf.cl) > 0 && hf.cl[0] != "" {
			// (sent as clen, not among the fields: Go's writer
			// deletes it from its snapshot)
			hasCL = false
			clen = hf.cl[0]
			if cl, err := strconv.ParseUint(clen, 10, 63); err == nil {
				w.sentContentLen = int64(cl)
			} else {
				clen = ""
			}
		}
		if !hasCL && clen == "" && w.handlerFinish && bodyAllowedForStatus(w.status) && (len(p) > 0 || !isHead) {
			clen = strconv.Itoa(len(p))
		}
		if (len(hf.ce) == 0 || hf.ce[0] == "") && !hf.hasCT && bodyAllowedForStatus(w.status) && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
		var date []byte
		if !hf.hasDate {
			date = sc.l.date(s.st.ex.clock)
		}
		for _, v := range hf.trailer {
			foreachHeaderElement(v, w.declareTrailer)
		}
		if hf.hasConn && len(hf.conn) > 0 && hf.conn[0] == "close" {
			go sc.drain()
		}
		end := w.handlerFinish && !w.hasTrailers() && len(p) == 0 || isHead
		status := w.status
		pairs := w.pairs
		var err error
		// (p goes in the same write when the windows allow)
		dataSent, err = sc.writeHeadersData(s, func(enc *h2Encoder) {
			enc.status(status)
			encodePairs(enc, pairs)
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
		clear(pairs)
		w.pairs = pairs[:0]
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

// h2HeadFields is what writeChunk needs to know of the header it sends,
// found in the one pass that collects its fields (collect).
type h2HeadFields struct {
	cl, ce, trailer, conn []string // Content-Length, Content-Encoding, Trailer, Connection
	clPresent, hasCT      bool
	hasDate, hasConn      bool
	prefixed              bool // a key with http.TrailerPrefix
}

// collect puts h's fields in w.pairs, sorted, but Connection and a
// Content-Length with a value (which writeChunk sends itself, as Go's
// writer deletes them from its snapshot), and notes the fields
// writeChunk looks at: one pass over the map instead of a lookup each.
func (w *h2Writer) collect(h http.Header) (hf h2HeadFields) {
	ps := w.pairs[:0]
	for k, vv := range h {
		if hf.note(k, vv) {
			ps = append(ps, h2Pair{k, vv})
		}
	}
	sortPairs(ps)
	w.pairs = ps
	return hf
}

// collectList is collect from a list of the map's fields (takeHeader's,
// gotHeader): no walk of the map (its iteration was ~650 of the 1,270
// instructions collect cost a proxied HTTP/2 response, callgrind).
func (w *h2Writer) collectList(list []namedValues) (hf h2HeadFields) {
	ps := w.pairs[:0]
	for _, f := range list {
		if hf.note(f.name, f.values) {
			ps = append(ps, h2Pair{f.name, f.values})
		}
	}
	sortPairs(ps)
	w.pairs = ps
	return hf
}

// note notes the field k if writeChunk looks at it, and reports whether
// it goes among the encoded fields.
func (hf *h2HeadFields) note(k string, vv []string) bool {
	switch k {
	case "Content-Length":
		hf.cl, hf.clPresent = vv, true
		if len(vv) > 0 && vv[0] != "" {
			return false
		}
	case "Content-Type":
		hf.hasCT = true
	case "Content-Encoding":
		hf.ce = vv
	case "Date":
		hf.hasDate = true
	case "Trailer":
		hf.trailer = vv
	case "Connection":
		hf.conn, hf.hasConn = vv, true
		return false
	default:
		if strings.HasPrefix(k, http.TrailerPrefix) {
			hf.prefixed = true
		}
	}
	return true
}

// sortPairs sorts by key (an insertion sort for the usual few fields,
// comparing as respWriter's writeFields does: nameLess).
func sortPairs(ps []h2Pair) {
	if len(ps) > 12 {
		slices.SortFunc(ps, func(a, b h2Pair) int { return strings.Compare(a.k, b.k) })
		return
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && nameLess(ps[j].k, ps[j-1].k); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// encodePairs is Go's encodeHeaders for sorted fields: lower-case names,
// without invalid names and values, Transfer-Encoding only as
// "trailers".
func encodePairs(enc *h2Encoder, ps []h2Pair) {
	for _, p := range ps {
		n, ok := h2FieldName(p.k)
		if !ok {
			continue
		}
		isTE := n.static == h2StaticTransferEncoding
		for _, v := range p.vv {
			if isTE && v != "trailers" {
				continue
			}
			enc.field(n, v) // (which leaves out an invalid value)
		}
	}
}

// encodeHeaders encodes h's fields (or only keys'), sorted, as Go's
// encodeHeaders does (1xx responses, trailers).
func (w *h2Writer) encodeHeaders(enc *h2Encoder, h http.Header, keys []string) {
	ps := w.pairs[:0]
	if keys == nil {
		for k, vv := range h {
			ps = append(ps, h2Pair{k, vv})
		}
		sortPairs(ps)
	} else {
		for _, k := range keys {
			ps = append(ps, h2Pair{k, h[k]})
		}
	}
	encodePairs(enc, ps)
	clear(ps)
	w.pairs = ps[:0]
}

// validWireName is http2's validWireHeaderFieldName: a token, lower case.
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !h1wire.IsTokenByte(c) || 'A' <= c && c <= 'Z' {
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
