// The golden and end-to-end tests live in an external test package, so that
// caddy-ratelimit (which they import) is initialized after caddyjwt, as in
// the real binary, and the directive order is the production one.
package caddyjwt_test

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/goldentest"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"

	"github.com/apigate/gateway/caddyjwt"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line. Run with
// -update to rewrite the expected JSON after a deliberate change.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{AllowUnformatted: true})
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	cases := []struct {
		name, input, want string
	}{
		{"argument on directive", `jwt_auth foo`, "wrong argument count"},
		{"unknown subdirective", "jwt_auth {\n\tbogus 1\n}", "unrecognized subdirective 'bogus'"},
		{"hmac_secret without value", "jwt_auth {\n\thmac_secret\n}", "wrong argument count"},
		{"bad duration", "jwt_auth {\n\tleeway soon\n}", `invalid leeway "soon"`},
		{"two durations", "jwt_auth {\n\tjwks_refresh 1m 2m\n}", "wrong argument count"},
		{"forward_claim one arg", "jwt_auth {\n\tforward_claim sub\n}", "wrong argument count"},
		{"forward_claim three args", "jwt_auth {\n\tforward_claim sub X-A X-B\n}", "wrong argument count"},
		{"optional with arg", "jwt_auth {\n\toptional yes\n}", "wrong argument count"},
		{"bad cache_size", "jwt_auth {\n\tcache_size many\n}", `invalid cache_size "many"`},
		{"zero max_token_size", "jwt_auth {\n\tmax_token_size 0\n}", `invalid max_token_size "0"`},
		{"realm twice", "jwt_auth {\n\trealm a b\n}", "wrong argument count"},
		{"provider without name", "jwt_auth {\n\tprovider {\n\t\tissuer x\n\t}\n}", "wrong argument count"},
		{"provider unknown subdirective", "jwt_auth {\n\tprovider a {\n\t\tissuer x\n\t\thmac_secret s\n\t\tfrom_cookie c\n\t}\n}", `provider "a": unrecognized subdirective 'from_cookie'`},
		{"provider without key source", "jwt_auth {\n\tprovider a {\n\t\tissuer https://a.example\n\t\taudience x\n\t}\n}", `provider "a": no key source`},
		{"provider without issuer", "jwt_auth {\n\tprovider a {\n\t\tjwks_url https://a.example/k\n\t}\n}", `provider "a": set oidc <issuer-url>, or issuer`},
		{"oidc with issuer", "jwt_auth {\n\tprovider a {\n\t\toidc https://a.example\n\t\tissuer https://a.example\n\t}\n}", `provider "a": oidc discovers the issuer and the keys`},
		{"oidc with jwks_url", "jwt_auth {\n\tprovider a {\n\t\toidc https://a.example\n\t\tjwks_url https://a.example/k\n\t}\n}", `provider "a": oidc discovers the issuer and the keys`},
		{"oidc not a URL", "jwt_auth {\n\tprovider a {\n\t\toidc sso.example\n\t}\n}", `provider "a": invalid oidc "sso.example"`},
		{"duplicate provider names", "jwt_auth {\n\tprovider a {\n\t\toidc https://a.example\n\t}\n\tprovider a {\n\t\toidc https://b.example\n\t}\n}", `provider "a" is defined twice`},
		{"duplicate issuers", "jwt_auth {\n\tprovider a {\n\t\toidc https://a.example\n\t}\n\tprovider b {\n\t\tissuer https://a.example\n\t\thmac_secret s\n\t}\n}", `providers "a" and "b" have the same issuer "https://a.example"`},
		{"flat key beside providers", "jwt_auth {\n\tjwks_url https://x.example/k\n\tprovider a {\n\t\toidc https://a.example\n\t}\n}", "jwks_url outside a provider block"},
		{"flat audience beside providers", "jwt_auth {\n\taudience x\n\tprovider a {\n\t\toidc https://a.example\n\t}\n}", "audience outside a provider block"},
		{"provider leeway bad", "jwt_auth {\n\tprovider a {\n\t\tleeway soon\n\t}\n}", `invalid leeway "soon"`},
		{"provider issuer twice", "jwt_auth {\n\tprovider a {\n\t\tissuer x y\n\t}\n}", "wrong argument count"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var j caddyjwt.JWTAuth
			err := j.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	var j caddyjwt.JWTAuth
	err := j.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`jwt_auth {
		hmac_secret a b
		hmac_secret c
		forward_claim sub X-User-Id
		cache_size off
		optional
		strip_token
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(j.HMACSecrets) != 3 || j.CacheSize != -1 || !j.Optional || !j.StripToken ||
		len(j.ForwardClaims) != 1 || j.ForwardClaims[0] != (caddyjwt.ForwardClaim{Claim: "sub", Header: "X-User-Id"}) {
		t.Fatalf("%+v", j)
	}
}
