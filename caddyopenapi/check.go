package caddyopenapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
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
	var q url.Values
	if op.query {
		q = r.URL.Query()
	}
	var cookies []*http.Cookie
	if op.cookies {
		cookies = r.Cookies()
	}
	for _, p := range op.params {
		var (
			v     any
			found bool
			viol  *Violation
		)
		switch p.in {
		case inPath:
			v, viol = p.decodePath(vals.get(p.pathIdx))
			found = true
		case inQuery:
			v, found, viol = p.decodeQuery(q)
		case inHeader:
			v, found, viol = p.decodeHeader(r.Header)
		case inCookie:
			v, found, viol = p.decodeCookie(cookies)
		}
		switch {
		case viol != nil:
			out = append(out, *viol)
		case !found:
			if p.required {
				out = append(out, Violation{Location: p.loc, Keyword: "required", Message: "is required"})
			}
		case p.schema != nil:
			if err := p.schema.Validate(v); err != nil {
				out = collect(err, p.loc, out)
			}
		}
	}
	return out
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
		return verdictPass, out, nil
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
	v, viol := m.decode(body)
	if viol != nil {
		return verdictInvalid, append(out, *viol), nil
	}
	if m.schema != nil {
		if err := m.schema.Validate(v); err != nil {
			return verdictInvalid, m.disc.explain(v, err, "body", out), nil
		}
	}
	return verdictPass, out, nil
}

// readBody reads the whole body (at most limit bytes) and puts a copy
// back on the request.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	size := r.ContentLength
	if size < 0 || size > 64<<10 {
		size = 64 << 10 // grown as needed
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+1))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, errBodyTooLarge
	}
	body := buf.Bytes()
	r.Body = replayBody{Reader: bytes.NewReader(body), Closer: r.Body}
	return body, nil
}

// replayBody is a body read for validation, given to the next handlers;
// closing it closes the original.
type replayBody struct {
	*bytes.Reader
	io.Closer
}
