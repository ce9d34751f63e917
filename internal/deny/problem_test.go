package deny

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestProblemJSON: the standard members first, in RFC 9457's order, then
// the extension members in the order given; nothing HTML-escaped; one
// line.
func TestProblemJSON(t *testing.T) {
	p := New(429, "quota_exceeded", "quota exceeded: free 5/day").
		With("plan", "free").With("window", "day").With("errors", []map[string]string{{"message": "must be <= 100"}})
	p.Instance = "/api/a%22b"
	want := `{"type":"urn:apigate:problem:quota_exceeded","title":"Quota exceeded","status":429,"detail":"quota exceeded: free 5/day",` +
		`"instance":"/api/a%22b","error":"quota_exceeded","plan":"free","window":"day","errors":[{"message":"must be <= 100"}]}` + "\n"
	if got := string(p.JSON()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// a code not in Kinds: its type all the same, the status's text
	if p := New(418, "teapot", "short and stout"); p.Type != "urn:apigate:problem:teapot" || p.Title != "I'm a teapot" {
		t.Fatalf("%+v", p)
	}
}

// TestWrite: the fields of every refusal, and the instance: the path the
// client sent (before a rewrite), escaped, without the query.
func TestWrite(t *testing.T) {
	r := httptest.NewRequest("GET", "/rewritten?k=secret", nil)
	orig := *r
	orig.URL, _ = url.Parse("/api/x%20y?api_key=secret")
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.OriginalRequestCtxKey, orig))
	w := httptest.NewRecorder()
	Write(w, r, New(403, "forbidden", "missing role").With("reason", "missing role"))
	if w.Code != 403 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Cache-Control") != "no-store" ||
		w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if body := w.Body.String(); !strings.Contains(body, `"instance":"/api/x%20y",`) || strings.Contains(body, "secret") {
		t.Fatalf("body %s", body)
	}
	// without the original request: the request's own path
	w = httptest.NewRecorder()
	Write(w, httptest.NewRequest("GET", "/plain", nil), New(http.StatusUnauthorized, "unauthorized", "missing token"))
	if !strings.Contains(w.Body.String(), `"instance":"/plain"`) {
		t.Fatalf("body %s", w.Body.String())
	}
}

// TestKindsDocumented: docs/errors.md lists every kind of refusal with its
// type, status and title.
func TestKindsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		row := "| `" + k.Type() + "` | " + strconv.Itoa(k.Status) + " | " + k.Title + " |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/errors.md has no row starting %q", row)
		}
	}
}
