package credential

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestExtractToken(t *testing.T) {
	all := OrderSources([]string{"Authorization", "x-api-token"}, []string{"access_token"}, []string{"access_token"})
	cases := []struct {
		name     string
		sources  []TokenSource
		setup    func(r *http.Request)
		want     string
		index    int
		tooLarge bool
	}{
		{"default bearer", nil, func(r *http.Request) { r.Header.Set("Authorization", "Bearer abc.def.ghi") }, "abc.def.ghi", 0, false},
		{"scheme case-insensitive", nil, func(r *http.Request) { r.Header.Set("Authorization", "bEaReR   abc") }, "abc", 0, false},
		{"basic is not a bearer token", nil, func(r *http.Request) { r.Header.Set("Authorization", "Basic dXNlcjpwYXNz") }, "", -1, false},
		{"bearer without token", nil, func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, "", -1, false},
		{"bare token in Authorization is ignored", nil, func(r *http.Request) { r.Header.Set("Authorization", "abc.def.ghi") }, "", -1, false},
		{"no token", nil, func(r *http.Request) {}, "", -1, false},
		{"default ignores cookie", nil, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "access_token", Value: "c"}) }, "", -1, false},
		{"custom header raw", all, func(r *http.Request) { r.Header.Set("X-Api-Token", "raw.tok.en") }, "raw.tok.en", 1, false},
		{"custom header with bearer", all, func(r *http.Request) { r.Header.Set("X-Api-Token", "Bearer raw.tok.en") }, "raw.tok.en", 1, false},
		{"header before cookie", all, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer h")
			r.AddCookie(&http.Cookie{Name: "access_token", Value: "c"})
		}, "h", 0, false},
		{"cookie", all, func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "other", Value: "x"})
			r.AddCookie(&http.Cookie{Name: "access_token", Value: "c.o.k"})
		}, "c.o.k", 2, false},
		{"cookie before query", all, func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "access_token", Value: "c"})
			r.URL.RawQuery = "access_token=q"
		}, "c", 2, false},
		{"query", all, func(r *http.Request) { r.URL.RawQuery = "a=1&access_token=q.u.e&b=2" }, "q.u.e", 3, false},
		{"query escaped", all, func(r *http.Request) { r.URL.RawQuery = "access%5Ftoken=a%2Eb" }, "a.b", 3, false},
		{"query bad escape", all, func(r *http.Request) { r.URL.RawQuery = "access_token=%zz" }, "", -1, false},
		{"too large", nil, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 101)) }, "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			tc.setup(r)
			src := tc.sources
			if src == nil {
				src = OrderSources(nil, nil, nil)
			}
			tok, idx, tooLarge := ExtractToken(r, src, 100)
			if tok != tc.want || idx != tc.index || tooLarge != tc.tooLarge {
				t.Fatalf("got (%q, %d, %v), want (%q, %d, %v)", tok, idx, tooLarge, tc.want, tc.index, tc.tooLarge)
			}
		})
	}
}

func TestStripToken(t *testing.T) {
	src := OrderSources([]string{"Authorization", "X-Token"}, []string{"at"}, []string{"at"})
	r := httptest.NewRequest("GET", "/p?x=1&at=secret&y=2", nil)
	r.Header.Set("Authorization", "Bearer secret")
	r.Header.Set("X-Token", "secret")
	r.Header.Add("Cookie", "a=1; at=secret; b=2")
	StripToken(r, src)
	if r.Header.Get("Authorization") != "" || r.Header.Get("X-Token") != "" {
		t.Fatalf("headers left: %v", r.Header)
	}
	if c := r.Header.Get("Cookie"); c != "a=1; b=2" {
		t.Fatalf("cookie = %q", c)
	}
	if r.URL.RawQuery != "x=1&y=2" || strings.Contains(r.RequestURI, "secret") {
		t.Fatalf("query = %q, uri = %q", r.URL.RawQuery, r.RequestURI)
	}
	// a Basic credential in Authorization is not ours to strip
	r2 := httptest.NewRequest("GET", "/", nil)
	r2.Header.Set("Authorization", "Basic xyz")
	r2.Header.Set("Cookie", "at=1")
	StripToken(r2, src)
	if r2.Header.Get("Authorization") != "Basic xyz" || r2.Header.Get("Cookie") != "" {
		t.Fatalf("after strip: %v", r2.Header)
	}
}

// FuzzExtractToken feeds arbitrary header, cookie and query values to the
// extractor and the stripper: no panic, and a returned token is bounded,
// trimmed and comes from the request.
func FuzzExtractToken(f *testing.F) {
	f.Add("Bearer abc.def.ghi", "at=x.y.z; b=1", "at=q&x=%41")
	f.Add("bearer\t\tx", "at=\"quoted\"", "at=%zz")
	f.Add("Basic Zm9v", ";;;=;at", "&&=&at")
	f.Add("", "", "at=a+b%20c")
	src := OrderSources([]string{"Authorization", "X-Token"}, []string{"at"}, []string{"at"})
	f.Fuzz(func(t *testing.T, auth, cookie, query string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{auth}
		r.Header["X-Token"] = []string{auth}
		r.Header["Cookie"] = []string{cookie}
		r.URL.RawQuery = query
		tok, idx, tooLarge := ExtractToken(r, src, 64)
		if tooLarge && tok != "" {
			t.Fatal("token returned with tooLarge")
		}
		if tok != "" {
			if len(tok) > 64 || idx < 0 || tok != strings.TrimSpace(tok) {
				t.Fatalf("bad token %q from %d", tok, idx)
			}
		}
		StripToken(r, src)
		if tok2, _, _ := ExtractToken(r, src, 64); tok2 != "" && idx >= 0 && src[idx].Kind == FromHeader {
			// headers are always removed
			t.Fatalf("token %q survived strip", tok2)
		}
	})
}
