// Package deny is how the gateway's handlers refuse a request: through
// Caddy's error chain, so that a site's handle_errors decides what the client
// sees, as with Caddy's own authentication handlers; and, where the server
// has no error routes, with an RFC 9457 problem (application/problem+json):
// every refusal the gateway writes itself has the same shape (problem.go).
package deny

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Respond denies the request with status and the kind of refusal code
// (Kinds: "forbidden", "invalid_token", ...). The reason must be
// client-safe: never a token, a secret or a claim value.
//
// When the server that serves r has error routes (handle_errors), Respond
// returns caddyhttp.Error(status, reason) and writes nothing: the error
// routes answer, with {http.error.status_code} and {http.error.message} (the
// reason) and the headers the handler set (WWW-Authenticate) at hand. With
// no error routes Caddy would answer with an empty body, so Respond writes
// the problem itself (detail: the reason; extension members error: code and
// reason, the contract's members from before problem+json) and returns nil.
func Respond(w http.ResponseWriter, r *http.Request, status int, code, reason string) error {
	if hasErrorRoutes(r) {
		return caddyhttp.Error(status, errors.New(reason))
	}
	WriteBody(w, status, RefusalJSON(status, code, reason, Instance(r)))
	return nil
}

// RefusalJSON is the body Respond writes: the problem of the kind code
// with detail reason at instance, with the members error and reason.
func RefusalJSON(status int, code, reason, instance string) []byte {
	p := New(status, code, reason).With("reason", reason)
	p.Instance = instance
	return p.JSON()
}

// RespondProblem denies the request with p as Respond does: through the
// error routes where the server has some ({http.error.message} is
// message, the reason audit records), else by writing p.
func RespondProblem(w http.ResponseWriter, r *http.Request, p *Problem, message string) error {
	if hasErrorRoutes(r) {
		return caddyhttp.Error(p.Status, errors.New(message))
	}
	Write(w, r, p)
	return nil
}

func hasErrorRoutes(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	return ok && srv != nil && srv.Errors != nil && len(srv.Errors.Routes) > 0
}

// Write writes p with its status, its instance the path r was sent to
// when p has none (Instance).
func Write(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = Instance(r)
	}
	WriteBody(w, p.Status, p.JSON())
}

// WriteBody writes a problem's body (Problem.JSON) with status: the
// fields every refusal has (Content-Type application/problem+json,
// Content-Length, Cache-Control: no-store).
func WriteBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Instance is a refusal's instance: the path the client sent the request
// to (before any rewrite; escaped, without the query, which may carry
// credentials), as a URI reference relative to the gateway.
func Instance(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		return orig.URL.EscapedPath()
	}
	if r.URL == nil {
		return ""
	}
	return r.URL.EscapedPath()
}

// BearerChallenge is the WWW-Authenticate value of a 401 without a token:
// `Bearer realm="<realm>"` (RFC 6750: no error code).
func BearerChallenge(realm string) string {
	return `Bearer realm="` + QuoteEscape(realm) + `"`
}

// InvalidTokenChallenge is the WWW-Authenticate value of a 401 for a token
// that failed: `Bearer error="invalid_token", error_description="..."`.
func InvalidTokenChallenge(description string) string {
	return `Bearer error="invalid_token", error_description="` + QuoteEscape(description) + `"`
}

// QuoteEscape makes s safe inside an HTTP quoted-string: quotes and
// backslashes escaped, CR, LF and other control bytes replaced by spaces.
func QuoteEscape(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < ' ' && c != '\t' || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' && c != '\t' || c == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
