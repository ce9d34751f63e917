package caddyaudit

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
)

// TestHandlerExtra checks include_header/include_claim/include_query: the
// values land under extra with their keys, headers and query as the client
// sent them, claims from the verified identity, and redacted headers never.
func TestHandlerExtra(t *testing.T) {
	h := &Handler{
		IncludeHeaders: []Include{{Name: "X-Tenant"}, {Name: "x-trace", Key: "trace"}, {Name: "X-Client-*"}},
		IncludeClaims:  []Include{{Name: "tenant"}, {Name: "org.id", Key: "org"}, {Name: "groups"}, {Name: "absent"}},
		IncludeQuery:   []Include{{Name: "page"}, {Name: "tag", Key: "tags"}},
		RedactHeaders:  []string{"x-client-secret"},
	}
	var err error
	if h.extra, err = h.provisionExtra(); err != nil {
		t.Fatal(err)
	}
	h.app = &App{}
	r := newRequest("GET", "http://api.test/orders?page=2&tag=a&tag=b&other=x")
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("X-Trace", "t-1")
	r.Header.Set("X-Client-Version", "1.2")
	r.Header.Set("X-Client-Secret", "hunter2")
	r.Header.Set("Authorization", "Bearer secret-token")
	r.Header.Set("Cookie", "session=secret")
	r.Header.Set("X-Other", "not included")
	err = h.ServeHTTP(httptest.NewRecorder(), r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		identity.Set(r, &identity.Identity{Subject: "alice", Claims: map[string]any{
			"tenant": "acme-claim", "org": map[string]any{"id": float64(42)}, "groups": []any{"a", "b"}}})
		r.Header.Set("X-Tenant", "rewritten") // a later handler's change is not what the client sent
		r.URL.RawQuery = ""
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := Recent(1)[0].Extra
	want := Fields{{"X-Client-Version", "1.2"}, {"X-Tenant", "acme"}, {"groups", "a,b"}, {"org", "42"},
		{"page", "2"}, {"tags", "a,b"}, {"tenant", "acme-claim"}, {"trace", "t-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extra\n got %v\nwant %v", got, want)
	}
	b := string((&Event{Extra: got}).AppendJSON(nil))
	for _, secret := range []string{"hunter2", "secret-token", "session=secret", "not included"} {
		if strings.Contains(b, secret) {
			t.Errorf("event holds %q: %s", secret, b)
		}
	}

	// A long value is cut, inside the limit.
	r = newRequest("GET", "http://api.test/")
	r.Header.Set("X-Tenant", strings.Repeat("é", maxExtraValue))
	h.ServeHTTP(httptest.NewRecorder(), r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	v, _ := Recent(1)[0].Extra.Get("X-Tenant")
	if len(v) > maxExtraValue || !strings.HasSuffix(v, truncatedMark) || !strings.HasPrefix(v, "éé") {
		t.Errorf("long value: %d bytes, ends %q", len(v), v[len(v)-20:])
	}
}

func TestHandlerExtraErrors(t *testing.T) {
	for _, tc := range []struct {
		h    Handler
		want string
	}{
		{Handler{IncludeHeaders: []Include{{Name: "authorization"}}}, "never recorded"},
		{Handler{IncludeHeaders: []Include{{Name: "X-Key"}}, RedactHeaders: []string{"x-key"}}, "never recorded"},
		{Handler{IncludeHeaders: []Include{{Name: "X-*", Key: "k"}}}, "takes no key"},
		{Handler{IncludeHeaders: []Include{{Name: "X-*-Y"}}}, "not a header name"},
		{Handler{IncludeHeaders: []Include{{Name: "tenant"}}, IncludeClaims: []Include{{Name: "tenant"}}}, `extra key "tenant" is already used by include_header tenant`},
		{Handler{IncludeClaims: []Include{{Name: "a..b"}}}, "include_claim"},
		{Handler{IncludeQuery: []Include{{Name: "p", Key: "bad key"}}}, "printable ASCII"},
		{Handler{RedactHeaders: []string{"a b"}}, "not a header name"},
	} {
		_, err := tc.h.provisionExtra()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.h, err, tc.want)
		}
	}
}
