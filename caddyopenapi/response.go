package caddyopenapi

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// serveChecked passes the request on and checks its response against
// op's responses: the status must be declared, the declared headers
// present and valid, the content type declared, and a JSON body valid
// against its schema.
//
// Enforced, a response whose body is checked is held until it is whole
// (at most max_response_body bytes: a longer one is sent on as it comes,
// unchecked) and replaced by 502 when it does not match. In dry run the
// response goes to the client as it comes, and a copy of at most
// max_response_body bytes is checked at the end.
func (h *OpenAPI) serveChecked(w http.ResponseWriter, r *http.Request, op *Operation, next caddyhttp.Handler) error {
	rc := &respCheck{rw: w, h: h, op: op, enforce: !h.respDry}
	err := next.ServeHTTP(rc, r)
	if err != nil && rc.status == 0 {
		return err // nothing written: the error is answered as usual
	}
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	if rc.mode == modeHold || rc.mode == modeTee {
		if rc.overflow {
			op.stats.responsesUnchecked.Add(1)
		} else if rc.buf.Len() > 0 {
			rc.checkBody()
		}
	}
	if len(rc.vs) == 0 {
		if rc.mode == modeHold {
			rc.release()
		}
		return err
	}
	if rc.enforce && (rc.mode == modeHold || rc.mode == modeDiscard) {
		h := rc.rw.Header()
		for k := range h {
			delete(h, k)
		}
		return rc.h.refuse(rc.rw, r, op.stats, verdictBadResponse, rc.vs)
	}
	rc.h.refuse(rc.rw, r, op.stats, verdictBadResponse, rc.vs) // dry run: records
	return err
}

// respCheck is the response writer of a checked response.
type respCheck struct {
	rw      http.ResponseWriter
	h       *OpenAPI
	op      *Operation
	enforce bool

	status   int
	mode     respMode
	media    *media
	buf      bytes.Buffer
	overflow bool
	vs       []Violation
}

type respMode uint8

const (
	modePass    respMode = iota // written through, not checked (or checked at its head only)
	modeHold                    // enforced: held until whole, then checked
	modeTee                     // dry run: written through, a copy checked
	modeDiscard                 // enforced, refused at its head: the body is dropped
)

func (rc *respCheck) Header() http.Header { return rc.rw.Header() }

// Unwrap lets http.ResponseController reach the connection (deadlines,
// hijacking for a 101).
func (rc *respCheck) Unwrap() http.ResponseWriter { return rc.rw }

func (rc *respCheck) WriteHeader(status int) {
	if rc.status != 0 {
		return
	}
	if status < 200 { // informational: not the response
		rc.rw.WriteHeader(status)
		return
	}
	rc.status = status
	rc.checkHead()
	switch {
	case rc.enforce && len(rc.vs) > 0:
		rc.mode = modeDiscard
		return
	case rc.media != nil && rc.enforce:
		rc.mode = modeHold
		return
	case rc.media != nil:
		rc.mode = modeTee
	}
	rc.rw.WriteHeader(status)
}

// checkHead checks the status and headers, and finds the media type
// whose schema the body is checked against (none: the body is not).
func (rc *respCheck) checkHead() {
	spec := rc.op.responses.find(rc.status)
	if spec == nil {
		rc.vs = append(rc.vs, Violation{Location: "response.status", Keyword: "responses", Message: "status " + strconv.Itoa(rc.status) + " is not declared"})
		return
	}
	h := rc.rw.Header()
	if len(spec.headers) > 0 {
		s := getScanner()
		for _, p := range spec.headers {
			s.reset(nil)
			found, viol := p.decodeHeader(s, h)
			rc.vs = p.check(s, found, viol, rc.vs)
		}
		putScanner(s)
	}
	if !spec.hasContent || rc.status == http.StatusNoContent || rc.status == http.StatusNotModified {
		return
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return // no body, or one whose type the upstream did not say
	}
	m := spec.find(ct)
	if m == nil {
		rc.vs = append(rc.vs, Violation{Location: "response.header.Content-Type", Keyword: "content-type", Message: "must be one of " + spec.declared})
		return
	}
	if m.kind == mediaOther || m.schema == nil {
		return
	}
	if enc := h.Get("Content-Encoding"); enc != "" && enc != "identity" {
		rc.op.stats.responsesUnchecked.Add(1) // compressed: not read
		return
	}
	rc.media = m
}

func (rc *respCheck) Write(p []byte) (int, error) {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	switch rc.mode {
	case modeDiscard:
		return len(p), nil
	case modeHold:
		if int64(rc.buf.Len()+len(p)) > rc.h.MaxResponseBody {
			// too long to hold: sent on as it comes, unchecked
			rc.overflow = true
			rc.release()
			rc.mode = modePass
			return rc.rw.Write(p)
		}
		return rc.buf.Write(p)
	case modeTee:
		if !rc.overflow {
			if int64(rc.buf.Len()+len(p)) > rc.h.MaxResponseBody {
				rc.overflow = true
				rc.buf = bytes.Buffer{}
			} else {
				rc.buf.Write(p)
			}
		}
	}
	return rc.rw.Write(p)
}

// FlushError flushes what is written through; a held response is not
// flushed until it is checked.
func (rc *respCheck) FlushError() error {
	if rc.mode == modeHold || rc.mode == modeDiscard {
		return nil
	}
	if rc.status == 0 {
		return nil // the head is checked when the handler writes it
	}
	return http.NewResponseController(rc.rw).Flush()
}

// release writes the held head and body.
func (rc *respCheck) release() {
	rc.rw.WriteHeader(rc.status)
	if rc.buf.Len() > 0 {
		_, _ = rc.rw.Write(rc.buf.Bytes())
	}
	rc.buf = bytes.Buffer{}
}

// checkBody checks the (held or copied) body.
func (rc *respCheck) checkBody() {
	_, rc.vs = rc.media.checkBytes(rc.buf.Bytes(), "response.body", rc.vs)
}
