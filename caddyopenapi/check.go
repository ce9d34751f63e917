package caddyopenapi

import (
	"errors"
	"io"
	"net/http"
	"strconv"
)

// verdict is what checking a request (or a response) found, with the
// status a refusal answers.
type verdict uint8

const (
	verdictPass             verdict = iota
	verdictInvalid                  // 400
	verdictUnsupportedMedia         // 415
	verdictTooLarge                 // 413
	verdictUndeclaredPath           // 404
	verdictUndeclaredMethod         // 405
	verdictUnauthenticated          // 401
	verdictForbidden                // 403
	verdictBadResponse              // 502
)

var verdictStatus = [...]int{200, 400, 415, 413, 404, 405, 401, 403, 502}

// errBodyTooLarge: the body is longer than the handler reads.
var errBodyTooLarge = errors.New("request body too large to validate")

// checkParams checks op's parameters against the request.
func (op *Operation) checkParams(r *http.Request, vals *pathValues, out []Violation) []Violation {
	for i, p := range op.params {
		if p.scalar == nil || !p.checkScalar(r, vals) {
			return op.decodeParams(r, vals, i, out)
		}
	}
	return out
}

// decodeParams checks op's parameters from the i-th on, each decoded
// onto a scanner's tape and checked there, but those checkScalar
// accepts.
func (op *Operation) decodeParams(r *http.Request, vals *pathValues, i int, out []Violation) []Violation {
	s := getScanner()
	defer putScanner(s)
	for k, p := range op.params[i:] {
		if k > 0 && p.scalar != nil && p.checkScalar(r, vals) {
			continue
		}
		s.reset(nil)
		found, viol := p.decode(s, r, vals)
		out = p.check(s, found, viol, out)
	}
	return out
}

// decode writes p's value on the request onto s's tape; found is false
// when the request does not carry it.
func (p *param) decode(s *scanner, r *http.Request, vals *pathValues) (found bool, viol *Violation) {
	switch p.in {
	case inPath:
		return true, p.decodePath(s, vals.get(p.pathIdx))
	case inQuery:
		return p.decodeQuery(s, r.URL.RawQuery)
	case inHeader:
		return p.decodeHeader(s, r.Header)
	case inCookie:
		return p.decodeCookie(s, r.Header)
	}
	return false, nil
}

// hasBody reports whether a request carries a body.
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody
}

// checkBody checks the request body against op's request body. It reads
// a body it validates (at most limit bytes) and puts it back for the
// handlers after it. A read error that is not the body's size (a client
// gone, request_body's limit: a caddyhttp error) is returned as it is.
func (op *Operation) checkBody(r *http.Request, limit int64, out []Violation) (verdict, []Violation, error) {
	b := op.body
	if b == nil {
		// a body the document does not declare is not checked by
		// anyone: refused (a chunked body is read for its first byte)
		if has, err := bodyPresent(r); err != nil || !has {
			return verdictPass, out, err
		}
		out = append(out, Violation{Location: "body", Keyword: "requestBody", Message: "is not declared for this operation"})
		return verdictInvalid, out, nil
	}
	if !hasBody(r) {
		if b.required {
			out = append(out, Violation{Location: "body", Keyword: "required", Message: "a request body is required"})
			return verdictInvalid, out, nil
		}
		return verdictPass, out, nil
	}
	ct := r.Header.Get("Content-Type")
	m := b.find(ct)
	if m == nil {
		out = append(out, Violation{Location: "header.Content-Type", Keyword: "content-type", Message: "must be one of " + b.declared})
		return verdictUnsupportedMedia, out, nil
	}
	if m.kind == mediaOther {
		return verdictPass, out, nil
	}
	body, err := readBody(r, limit)
	if err == errBodyTooLarge {
		out = append(out, Violation{Location: "body", Keyword: "maxLength", Message: "must be at most " + strconv.FormatInt(limit, 10) + " bytes to be validated"})
		return verdictTooLarge, out, nil
	}
	if err != nil {
		return verdictPass, out, err
	}
	if len(body) == 0 {
		if b.required {
			out = append(out, Violation{Location: "body", Keyword: "required", Message: "a request body is required"})
			return verdictInvalid, out, nil
		}
		return verdictPass, out, nil
	}
	v, out := m.checkBytes(body, "body", out)
	return v, out, nil
}

// bodyPresent reports whether a request has a body of at least one byte:
// by its Content-Length, or, chunked, by reading its first byte (put back).
func bodyPresent(r *http.Request) (bool, error) {
	if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
		return r.ContentLength > 0, nil
	}
	var one [1]byte
	for {
		n, err := r.Body.Read(one[:])
		if n > 0 {
			r.Body = &replayBody{buf: []byte{one[0]}, rest: r.Body}
			return true, nil
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// readBody reads the whole body (at most limit bytes) and puts a copy
// back on the request: two allocations, the body's bytes and the reader
// that replays them.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	size := r.ContentLength
	if size < 0 || size > 64<<10 {
		size = 64 << 10 // grown as needed
	}
	buf := make([]byte, 0, size+1) // +1: a body longer than said is read to its end
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):min(cap(buf), int(limit)+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	r.Body = &replayBody{buf: buf, rest: r.Body}
	return buf, nil
}

// replayBody is a body read for validation, given to the next handlers:
// buf, then what rest still holds (nothing, once the whole body was
// read); closing it closes the original.
type replayBody struct {
	buf  []byte
	rest io.ReadCloser
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(b.buf) > 0 {
		n := copy(p, b.buf)
		b.buf = b.buf[n:]
		return n, nil
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error { return b.rest.Close() }

// WriteTo lets io.Copy write the body in one call.
func (b *replayBody) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b.buf)
	b.buf = b.buf[n:]
	if err != nil {
		return int64(n), err
	}
	m, err := io.Copy(w, b.rest)
	return int64(n) + m, err
}
