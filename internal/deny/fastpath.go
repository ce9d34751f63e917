package deny

import (
	"io"
	"net/http"
	"strconv"
)

// The fast path's own refusals (a request head it cannot read) are
// problems too. fastpath/ writes its answers itself, on a raw connection
// (HTTP/1.1) or an HTTP/2 stream, so these functions take a writer and
// headers rather than a request; this package does not import fastpath.

// FastPathCode is the kind of the fast path's own refusal with status:
// 431 header_fields_too_large, 501 unsupported_transfer_coding, 417
// expectation_failed, any other status malformed_request.
func FastPathCode(status int) string {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return "header_fields_too_large"
	case http.StatusNotImplemented:
		return "unsupported_transfer_coding"
	case http.StatusExpectationFailed:
		return "expectation_failed"
	}
	return "malformed_request"
}

// FastPathBody is the body of the fast path's refusal with status, detail
// (client-safe) and instance (the request's path as sent, "" when the head
// could not be read that far).
func FastPathBody(status int, detail, instance string) []byte {
	p := New(status, FastPathCode(status), detail)
	p.Instance = instance
	return p.JSON()
}

// SetFastPathProblem sets on h the header fields of the fast path's
// refusal with status, detail and instance (Content-Type, Content-Length,
// Cache-Control) and returns its body: the caller writes the status, then
// the body (an HTTP/2 stream).
func SetFastPathProblem(h http.Header, status int, detail, instance string) []byte {
	body := FastPathBody(status, detail, instance)
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	return body
}

// WriteHTTP1Problem writes to w the whole HTTP/1.1 answer of the fast
// path's refusal with status, detail and instance, with Connection: close
// (the fast path ends the connection after it).
func WriteHTTP1Problem(w io.Writer, status int, detail, instance string) error {
	body := FastPathBody(status, detail, instance)
	head := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: " + ContentType +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}
