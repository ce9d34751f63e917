package identity

import (
	"net/http"
	"strings"
	"testing"
)

// TestClaimHeaders: Apply removes the client's forwarded headers, then
// sets them from the identity's claims (arrays joined, control characters
// made spaces), whatever source made the identity.
func TestClaimHeaders(t *testing.T) {
	c, err := NewClaimHeaders([]ForwardClaim{{Claim: "sub", Header: "x-user-id"}, {Claim: "roles", Header: "X-User-Roles"}, {Claim: "org.name", Header: "X-Org"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   *Identity
		want map[string][]string
	}{
		{"anonymous: removed", nil, map[string][]string{"X-User-Id": nil, "X-User-Roles": nil, "X-Org": nil}},
		{"api key", &Identity{Method: MethodAPIKey, Claims: map[string]any{"sub": "ci-bot", "roles": []any{"deploy", "read"}}},
			map[string][]string{"X-User-Id": {"ci-bot"}, "X-User-Roles": {"deploy,read"}, "X-Org": nil}},
		{"client certificate", &Identity{Method: MethodClientCert, Claims: map[string]any{"sub": "spiffe://x/y", "roles": []any{}}},
			map[string][]string{"X-User-Id": {"spiffe://x/y"}, "X-User-Roles": {""}, "X-Org": nil}},
		{"token with a nested claim and a control character", &Identity{Method: MethodJWT, Claims: map[string]any{"sub": "a\r\nb", "org": map[string]any{"name": "acme"}}},
			map[string][]string{"X-User-Id": {"a  b"}, "X-User-Roles": nil, "X-Org": {"acme"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"X-User-Id": {"admin"}, "X-User-Roles": {"admin", "root"}, "X-Org": {"evil"}, "Accept": {"*/*"}}
			c.Apply(h, tc.id)
			for k, want := range tc.want {
				if got := h[k]; strings.Join(got, "|") != strings.Join(want, "|") || (want == nil) != (got == nil) {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			if h.Get("Accept") != "*/*" {
				t.Error("another header was touched")
			}
		})
	}
	var none *ClaimHeaders
	none.Apply(http.Header{}, &Identity{}) // no rules: nothing, no panic

	for _, bad := range []struct {
		fc   ForwardClaim
		want string
	}{
		{ForwardClaim{Claim: "sub"}, "both a claim and a header are required"},
		{ForwardClaim{Claim: "sub", Header: "X Bad"}, `invalid forward_claim header "X Bad"`},
		{ForwardClaim{Claim: "a..b", Header: "X-A"}, "forward_claim: claim path"},
	} {
		if _, err := NewClaimHeaders([]ForwardClaim{bad.fc}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error containing %q", bad.fc, err, bad.want)
		}
	}
}

func BenchmarkClaimHeadersApply(b *testing.B) {
	c, _ := NewClaimHeaders([]ForwardClaim{{Claim: "sub", Header: "X-User-Id"}})
	id := &Identity{Claims: map[string]any{"sub": "alice"}}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		c.Apply(h, id)
	}
}
