package caddyh1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/apigate/gateway/internal/h1wire"

	"golang.org/x/net/http/httpguts"
)

// writtenRequest is what one request's framing is, decided once before the
// first attempt, and what writing it did.
type writtenRequest struct {
	method     string
	host       string
	hasBody    bool
	chunked    bool  // no known length: Transfer-Encoding: chunked
	length     int64 // when !chunked and hasBody
	sendLen0   bool  // "Content-Length: 0" for a bodyless POST, PUT or PATCH, as net/http
	close      bool  // the request asks the upstream to close afterwards
	sendClose  bool  // write "Connection: close" (the request or the client asks for it)
	replayable bool  // safe to send again on another connection
	bodyRead   bool  // the body was (partly) read: it cannot be sent again
}

// check validates req and decides its framing. Invalid field names or values
// (CR, LF, NUL or other control bytes) are refused, never sent.
func (wr *writtenRequest) check(req *http.Request, fw FieldWriter) error {
	*wr = writtenRequest{method: req.Method}
	if wr.method == "" {
		wr.method = http.MethodGet
	}
	if !h1wire.ValidToken(wr.method) {
		return fmt.Errorf("invalid request method %q", wr.method)
	}
	if req.URL == nil {
		return errors.New("request has no URL")
	}
	wr.host = req.Host
	if wr.host == "" {
		wr.host = req.URL.Host
	}
	if !httpguts.ValidHostHeader(wr.host) {
		return fmt.Errorf("invalid Host %q", wr.host)
	}
	for i := 0; i < len(req.URL.RawQuery); i++ {
		if c := req.URL.RawQuery[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("invalid byte %#x in the request's query", c)
		}
	}
	// (the header fields are checked as write writes them: one pass over
	// the map, not two)
	wr.hasBody = req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	switch {
	case !wr.hasBody:
		switch wr.method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			wr.sendLen0 = true
		}
	case req.ContentLength > 0:
		wr.length = req.ContentLength
	default:
		wr.chunked = true
	}
	hasClose := h1wire.HasToken(fieldValue(req.Header, fw, "Connection"), "close")
	wr.close = req.Close || hasClose
	wr.sendClose = req.Close && !hasClose
	if !wr.hasBody {
		switch wr.method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
			wr.replayable = true
		default:
			wr.replayable = hasField(req.Header, fw, "Idempotency-Key") || hasField(req.Header, fw, "X-Idempotency-Key")
		}
	}
	return nil
}

// refusedField is a header field write refused before sending the request:
// the request is not sent again (RoundTripReuse returns err).
type refusedField struct{ err error }

func (e *refusedField) Error() string { return e.err.Error() }

// checkField refuses a field name that is not a token, or a value with a
// byte a field value cannot hold.
func checkField(k string, vv []string, what string) error {
	if !h1wire.ValidToken(k) {
		return fmt.Errorf("invalid %s name %q", what, k)
	}
	for _, v := range vv {
		if !h1wire.ValidFieldValue(v) {
			return fmt.Errorf("invalid %s value for %q", what, k)
		}
	}
	return nil
}

// checkFields refuses a name that is not a token, or a value with a byte
// that could end the field (CR, LF, NUL or another control byte).
func checkFields(h http.Header, what string) error {
	for k, vv := range h {
		if err := checkField(k, vv, what); err != nil {
			return err
		}
	}
	return nil
}

// fieldValue is the request's first value of k: fw's when the request's
// fields are fw's (Reuse.Fields), else h's.
func fieldValue(h http.Header, fw FieldWriter, k string) string {
	if fw != nil {
		v, _ := fw.Field(k)
		return v
	}
	return headerValue(h, k)
}

// hasField reports whether the request has a field k (fw's fields when
// set, as fieldValue), as a non-nil h[k] does.
func hasField(h http.Header, fw FieldWriter, k string) bool {
	if fw != nil {
		_, ok := fw.Field(k)
		return ok
	}
	return h[k] != nil
}

func headerValue(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// write writes the request head and body to bw and flushes it. A header
// field that checkField refuses ends it with a *refusedField before the
// head is complete (a head longer than bw's buffer may have been partly
// sent: the caller closes the connection). fw, when set, writes the header
// fields instead of req.Header (Reuse.Fields).
func (wr *writtenRequest) write(bw *bufio.Writer, req *http.Request, fw FieldWriter) error {
	bw.WriteString(wr.method)
	bw.WriteByte(' ')
	writeRequestURI(bw, req)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(wr.host)
	bw.WriteString("\r\n")
	if fw != nil {
		fw.WriteFields(bw)
	} else if err := writeHeader(bw, req.Header); err != nil {
		return err
	}
	switch {
	case wr.chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			bw.WriteString("Trailer: ")
			i := 0
			for k := range req.Trailer {
				if i > 0 {
					bw.WriteString(", ")
				}
				bw.WriteString(k)
				i++
			}
			bw.WriteString("\r\n")
		}
	case wr.hasBody:
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), wr.length, 10))
		bw.WriteString("\r\n")
	case wr.sendLen0:
		bw.WriteString("Content-Length: 0\r\n")
	}
	if wr.sendClose {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if wr.hasBody {
		wr.bodyRead = true
		var err error
		if wr.chunked {
			err = writeChunked(bw, req)
		} else {
			err = writeFixed(bw, req.Body, wr.length)
		}
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeHeader writes h's fields but the transport's own (Host and the
// framing fields), refusing an invalid one with a *refusedField.
func writeHeader(bw *bufio.Writer, h http.Header) error {
	var out h1wire.Fields
	out.Start(bw)
	defer out.Done()
	for k, vv := range h {
		if err := checkField(k, vv, "header field"); err != nil {
			return &refusedField{err}
		}
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // the transport's own framing
		case "User-Agent":
			// As net/http: the first value; an empty one (Caddy sets it
			// when the client sent none) sends none.
			if len(vv) > 0 && vv[0] != "" {
				writeField(&out, k, vv[0])
			}
			continue
		}
		for _, v := range vv {
			writeField(&out, k, v)
		}
	}
	return nil
}

func writeField(out *h1wire.Fields, k, v string) {
	out.Add(k, h1wire.TrimOWS(v))
}

func writeRequestURI(bw *bufio.Writer, req *http.Request) {
	u := req.URL
	if u.Opaque != "" {
		bw.WriteString(u.RequestURI())
		return
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	bw.WriteString(p)
	if u.ForceQuery || u.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(u.RawQuery)
	}
}

// errBodyLength is a request body shorter or longer than its Content-Length.
var errBodyLength = &bodyError{errors.New("request body length differs from its Content-Length")}

// bodyError is a failure on the request body's side (the client's), not
// the upstream connection's.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// writeFixed copies exactly n bytes of body into bw's free space, flushing
// when it is full.
func writeFixed(bw *bufio.Writer, body io.Reader, n int64) error {
	for n > 0 {
		if bw.Available() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		buf := bw.AvailableBuffer()
		buf = buf[:min(int64(cap(buf)), n)]
		k, err := body.Read(buf)
		if k > 0 {
			bw.Write(buf[:k]) // copies onto itself: no copy
			n -= int64(k)
		}
		if err == io.EOF {
			if n > 0 {
				return errBodyLength
			}
			break
		}
		if err != nil {
			return &bodyError{fmt.Errorf("reading the request body: %w", err)}
		}
	}
	return nil
}

var chunkBufs = newBufPool(16 << 10)

// writeChunked copies the body as chunks, flushing each (as net/http does,
// so a streamed body reaches the upstream as it arrives), then the last
// chunk and the trailers, which the body's reader fills in at its end.
func writeChunked(bw *bufio.Writer, req *http.Request) error {
	bp := chunkBufs.get()
	defer chunkBufs.put(bp)
	buf := *bp
	for {
		k, err := req.Body.Read(buf)
		if k > 0 {
			bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(k), 16))
			bw.WriteString("\r\n")
			bw.Write(buf[:k])
			bw.WriteString("\r\n")
			if ferr := bw.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return &bodyError{fmt.Errorf("reading the request body: %w", err)}
		}
	}
	bw.WriteString("0\r\n")
	// the trailers are only known now: the body's reader fills them at its end
	if err := checkFields(req.Trailer, "trailer"); err != nil {
		return err
	}
	for k, vv := range req.Trailer {
		for _, v := range vv {
			h1wire.WriteField(bw, k, h1wire.TrimOWS(v))
		}
	}
	bw.WriteString("\r\n")
	return nil
}
