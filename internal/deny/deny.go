// Package deny is how the gateway's handlers refuse a request: through
// Caddy's error chain, so that a site's handle_errors decides what the client
// sees, as with Caddy's own authentication handlers; and, where the server
// has no error routes, with the contract's small JSON body.
package deny

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Body is the JSON answer of a denial: {"error":"forbidden","reason":"missing role"}.
type Body struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// Respond denies the request with status. The reason must be client-safe:
// never a token, a secret or a claim value.
//
// When the server that serves r has error routes (handle_errors), Respond
// returns caddyhttp.Error(status, reason) and writes nothing: the error
// routes answer, with {http.error.status_code} and {http.error.message} (the
// reason) and the headers the handler set (WWW-Authenticate) at hand. With
// no error routes Caddy would answer with an empty body, so Respond writes
// the contract's body itself and returns nil.
func Respond(w http.ResponseWriter, r *http.Request, status int, code, reason string) error {
	if hasErrorRoutes(r) {
		return caddyhttp.Error(status, errors.New(reason))
	}
	Write(w, status, code, reason)
	return nil
}

func hasErrorRoutes(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	return ok && srv != nil && srv.Errors != nil && len(srv.Errors.Routes) > 0
}

// Write writes the contract's JSON body with status.
func Write(w http.ResponseWriter, status int, code, reason string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "a key is gk_<id>_<secret>", as written
	if err := enc.Encode(Body{Error: code, Reason: reason}); err != nil { // cannot happen for two strings
		buf.WriteString(`{"error":"` + code + `"}` + "\n")
	}
	body := buf.Bytes()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
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

// RespondBody denies the request with status as Respond does, with a body
// of the duty's own (problem+json, say) where the server has no error
// routes: with error routes, it returns caddyhttp.Error(status, reason)
// and the error routes answer.
func RespondBody(w http.ResponseWriter, r *http.Request, status int, reason, contentType string, body []byte) error {
	if hasErrorRoutes(r) {
		return caddyhttp.Error(status, errors.New(reason))
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}
