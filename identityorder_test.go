package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/apigate/gateway/identity"
)

// TestIdentityOrderWarning: adapting a Caddyfile (Caddy's adapter, as
// `caddy validate` does) warns of each duty that needs an identity with
// no identity source before it in its route, naming the server, the
// route, the directive and its line, and of nothing else.
func TestIdentityOrderWarning(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	global := "{\n\tquota {\n\t\tplan free 10/day\n\t}\n}\n"
	// (a warning with no line: its file "" and line 0)
	const both = ":0 quota: no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server srv0, route host example.com > path /a/*: its key {http.auth.user.id} resolves empty, and every request is refused with 500; put one before it in the route (quota is at Caddyfile:9, Caddyfile:13)"
	for _, tc := range []struct {
		name, site string
		want       []string // the warnings' starts, in order
	}{
		{"quota alone in a route", "route /api/* {\n\tquota\n\trespond ok\n}",
			[]string{"Caddyfile:8 quota: no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server srv0, route host example.com > path /api/*: its key {http.auth.user.id} resolves empty"}},
		{"quota after api_key in the route", "route /api/* {\n\tapi_key {\n\t\tkeys_file " + keys + "\n\t}\n\tquota\n\trespond ok\n}", nil},
		{"quota and jwt_auth as directives (the directive order)", "jwt_auth {\n\thmac_secret 0123456789abcdef0123456789abcdef\n}\nquota\nrespond ok", nil},
		{"quota with a key every request has", "route {\n\tquota {\n\t\tkey {remote_host}\n\t}\n\trespond ok\n}", nil},
		{"identity in another handle block", "handle /a/* {\n\tjwt_auth {\n\t\thmac_secret 0123456789abcdef0123456789abcdef\n\t}\n\trespond a\n}\nhandle /b/* {\n\tquota\n\trespond b\n}",
			[]string{"Caddyfile:14 quota: no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server srv0, route host example.com > path /b/*"}},
		{"quota in two handle blocks, one without identity: its line", "handle /a/* {\n\tjwt_auth {\n\t\thmac_secret 0123456789abcdef0123456789abcdef\n\t}\n\tquota\n\trespond a\n}\nhandle /b/* {\n\tquota\n\trespond b\n}",
			[]string{"Caddyfile:15 quota: no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server srv0, route host example.com > path /b/*"}},
		{"quota in two blocks with named matchers: its line", "@a path /a/*\n@b path /b/*\nhandle @a {\n\tjwt_auth {\n\t\thmac_secret 0123456789abcdef0123456789abcdef\n\t}\n\tquota\n\trespond a\n}\nhandle @b {\n\tquota\n\trespond b\n}",
			[]string{"Caddyfile:17 quota: no identity source"}},
		{"quota in two blocks the matchers do not tell apart: both lines", "handle /a/* {\n\troute {\n\t\tquota\n\t}\n}\nhandle /a/* {\n\tquota\n}",
			[]string{both, both}},
		{"rbac and openapi enforce_security without one", "route /x/* {\n\trbac {\n\t\trequire any admin\n\t}\n\topenapi {\n\t\tspec " + filepath.Join("caddyopenapi", "testdata", "orders.yaml") + "\n\t\tenforce_security\n\t}\n\trespond ok\n}",
			[]string{"Caddyfile:8 rbac: no identity source", "Caddyfile:11 openapi: no identity source"}},
		{"caddy-ratelimit keyed by user, no identity source", "route /r/* {\n\trate_limit {\n\t\tzone per_user {\n\t\t\tkey {http.auth.user.id}\n\t\t\tevents 10\n\t\t\twindow 1m\n\t\t}\n\t}\n\trespond ok\n}",
			[]string{"Caddyfile:8 rate_limit: no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server srv0, route host example.com > path /r/*: zone per_user's key {http.auth.user.id} is empty"}},
		{"caddy-ratelimit key with a typo", "route /r/* {\n\tjwt_auth {\n\t\thmac_secret 0123456789abcdef0123456789abcdef\n\t}\n\trate_limit {\n\t\tzone per_user {\n\t\t\tkey {http.auth.usr.id}\n\t\t\tevents 10\n\t\t\twindow 1m\n\t\t}\n\t}\n\trespond ok\n}",
			[]string{`Caddyfile:11 rate_limit: zone per_user in server srv0, route host example.com > path /r/*: invalid key "{http.auth.usr.id}": no identity source sets {http.auth.usr.id} (did you mean {http.auth.user.id}?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := global + "http://example.com {\n" + tc.site + "\n}\n"
			_, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range warnings {
				if strings.Contains(w.Message, "no identity source") || strings.Contains(w.Message, "identity source sets") {
					got = append(got, fmt.Sprintf("%s:%d %s: %s", w.File, w.Line, w.Directive, w.Message))
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start with %q", got[i], w)
				}
			}
		})
	}
}

// TestQuotaKeyTypoNamesLine: `caddy validate` (the adapter) refuses a
// quota key placeholder that no identity source sets, with its line.
func TestQuotaKeyTypoNamesLine(t *testing.T) {
	src := "{\n\tquota {\n\t\tplan free 10/day\n\t}\n}\nhttp://example.com {\n\tquota {\n\t\tkey {http.auth.usr.id}\n\t}\n}\n"
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), map[string]any{"filename": "Caddyfile"})
	if err == nil || !strings.Contains(err.Error(), "did you mean {http.auth.user.id}?") || !strings.Contains(err.Error(), "Caddyfile:8") {
		t.Fatalf("err = %v", err)
	}
}

// TestAuthPlaceholdersKnown: every {http.auth.*} placeholder a module of
// the gateway sets (repl.Set, or a claims prefix) is one that
// identity.UnknownAuthPlaceholder knows, so that a quota key naming it
// is not refused as a typo.
func TestAuthPlaceholdersKnown(t *testing.T) {
	set := regexp.MustCompile(`"(http\.auth\.[A-Za-z0-9_.]+)"`)
	files, _ := filepath.Glob("caddy*/*.go")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range set.FindAllStringSubmatch(string(b), -1) {
			name := m[1]
			if strings.HasSuffix(name, ".") { // a prefix: claims.<name>
				name += "x"
			}
			n++
			if unknown, _ := identity.UnknownAuthPlaceholder("{" + name + "}"); unknown != "" {
				t.Errorf("%s sets {%s}, which identity does not know", f, m[1])
			}
		}
	}
	if n < 5 {
		t.Fatalf("found %d http.auth placeholders in the modules' sources, want the identity sources' (at least 5)", n)
	}
}
