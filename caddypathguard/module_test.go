package caddypathguard

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/testkit/problemtest"
)

// guard returns a handler as Provision makes it, without a Caddy context.
func guard(mode string, keep bool) *PathGuard {
	h := &PathGuard{Mode: mode, KeepEncodedSlash: keep, logger: zap.NewNop(), counters: newCounters()}
	h.setup()
	return h
}

// request parses a request head as net/http's server does.
func request(t testing.TB, target string) *http.Request {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seen is the next handler: it records the request it got.
type seen struct{ r *http.Request }

func (s *seen) ServeHTTP(w http.ResponseWriter, r *http.Request) error { s.r = r; return nil }

// TestServeHTTPNormalize: normalize mode leaves the request's URL and
// request line coherent, the way net/http would have parsed the
// normalized target, so reverse_proxy (which sends URL.EscapedPath and
// the query) forwards exactly it.
func TestServeHTTPNormalize(t *testing.T) {
	for _, tc := range []struct {
		target, path, rawPath, requestURI string
		keep                              bool
	}{
		{"/x/../a%20b", "/a b", "", "/a%20b", false},
		{"/x/./y?q=%2F..", "/x/y", "", "/x/y?q=%2F..", false},
		{"/a/%2e%2e/b%3Ac", "/b:c", "/b%3Ac", "/b%3Ac", false},
		{"/a//%7Eb", "/a/~b", "", "/a/~b", false},
		{"/p/group%2Fproject//issues", "/p/group/project/issues", "/p/group%2Fproject/issues", "/p/group%2Fproject/issues", true},
		{"/unchanged%3A", "/unchanged:", "/unchanged%3A", "/unchanged%3A", false},
	} {
		t.Run(tc.target, func(t *testing.T) {
			r := request(t, tc.target)
			next := &seen{}
			if err := guard(ModeNormalize, tc.keep).ServeHTTP(httptest.NewRecorder(), r, next); err != nil || next.r == nil {
				t.Fatalf("not passed on: %v", err)
			}
			u := next.r.URL
			if u.Path != tc.path || u.RawPath != tc.rawPath || next.r.RequestURI != tc.requestURI {
				t.Fatalf("Path %q, RawPath %q, RequestURI %q; want %q, %q, %q", u.Path, u.RawPath, next.r.RequestURI, tc.path, tc.rawPath, tc.requestURI)
			}
			// what net/http makes of the forwarded target is the same URL
			again := request(t, u.RequestURI())
			if again.URL.Path != u.Path || again.URL.RawPath != u.RawPath {
				t.Fatalf("the forwarded %q parses to Path %q, RawPath %q", u.RequestURI(), again.URL.Path, again.URL.RawPath)
			}
		})
	}
}

// TestServeHTTPReject: a refusal is a 400 with the contract's JSON (no
// error routes here) and the request goes no further.
func TestServeHTTPReject(t *testing.T) {
	for _, mode := range []string{ModeReject, ModeNormalize} {
		w := httptest.NewRecorder()
		next := &seen{}
		if err := guard(mode, false).ServeHTTP(w, request(t, "/public/..;/admin"), next); err != nil {
			t.Fatal(err)
		}
		if want := problemtest.Body(400, `{"error":"ambiguous_path","reason":"dot segment with parameters"}`, "/public/..;/admin"); w.Code != 400 || w.Body.String() != want || next.r != nil {
			t.Fatalf("%s: %d %q (passed on: %v); want 400 %q", mode, w.Code, w.Body, next.r != nil, want)
		}
	}
}

// BenchmarkServeHTTP: the handler's cost on a normal path (0 allocations
// is the target), with the request as net/http's server parses it.
func BenchmarkServeHTTP(b *testing.B) {
	for _, target := range []string{"/api/v1/orders/12345/items", "/static/app.3f2a1b.min.js", "/files/my%20file.txt", "/urn%3Aisbn%3A0451450523/reviews"} {
		for _, mode := range []string{ModeReject, ModeNormalize} {
			b.Run(mode+" "+target, func(b *testing.B) {
				h, r, next, w := guard(mode, false), request(b, target), &seen{}, httptest.NewRecorder()
				b.ReportAllocs()
				for b.Loop() {
					if err := h.ServeHTTP(w, r, next); err != nil || next.r == nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
