package caddypermcache

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/apigate/gateway/internal/natsconn"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestUnmarshalCaddyfile(t *testing.T) {
	d5 := func(d time.Duration) *caddy.Duration { c := caddy.Duration(d); return &c }
	tests := []struct {
		name    string
		input   string
		want    Handler
		wantErr string
	}{
		{"url argument", `permission http://127.0.0.1:9100/check`,
			Handler{URL: "http://127.0.0.1:9100/check"}, ""},
		{"everything", `permission {
			url           http://127.0.0.1:9100/check
			timeout       250ms
			cache_ttl     2m
			negative_ttl  5s
			cache_size    500
			key           {http.auth.user.id} {http.request.method} {http.request.uri.path}
			on_error      allow
			stale_if_error 5m
			roles_claim   realm_access.roles
			route         orders
		}`, Handler{
			URL: "http://127.0.0.1:9100/check", Timeout: caddy.Duration(250 * time.Millisecond),
			CacheTTL: d5(2 * time.Minute), NegativeTTL: d5(5 * time.Second), CacheSize: 500,
			Key: DefaultKey, OnError: "allow", StaleIfError: caddy.Duration(5 * time.Minute),
			RolesClaim: "realm_access.roles", Route: "orders",
		}, ""},
		{"zero ttls", "permission http://p/check {\n cache_ttl 0\n negative_ttl 0s\n}",
			Handler{URL: "http://p/check", CacheTTL: d5(0), NegativeTTL: d5(0)}, ""},
		{"quoted key", "permission http://p/check {\n key \"{http.request.header.X-Tenant} {http.request.method}\"\n}",
			Handler{URL: "http://p/check", Key: "{http.request.header.X-Tenant} {http.request.method}"}, ""},
		{"no url", "permission {\n timeout 1s\n}", Handler{}, "missing url"},
		{"url twice", "permission http://a {\n url http://b\n}", Handler{}, "url given twice"},
		{"two args", "permission http://a http://b", Handler{}, "wrong argument count"},
		{"bad duration", "permission http://a {\n cache_ttl soon\n}", Handler{}, `invalid cache_ttl "soon"`},
		{"negative duration", "permission http://a {\n negative_ttl -1s\n}", Handler{}, `invalid negative_ttl "-1s": must not be negative`},
		{"zero timeout", "permission http://a {\n timeout 0\n}", Handler{}, `invalid timeout "0": must be positive`},
		{"bad size", "permission http://a {\n cache_size 0\n}", Handler{}, `invalid cache_size "0"`},
		{"bad on_error", "permission http://a {\n on_error maybe\n}", Handler{}, `invalid on_error "maybe": must be deny or allow`},
		{"bad key", "permission http://a {\n key {http.request.method\n}", Handler{}, "invalid key"},
		{"key placeholder nothing sets, with its line", "permission http://a {\n key {http.auth.usr.id} {http.request.uri.path}\n}", Handler{},
			`invalid key "{http.auth.usr.id} {http.request.uri.path}": no identity source sets {http.auth.usr.id} (did you mean {http.auth.user.id}?), at Testfile:2`},
		{"static key", "permission http://a {\n key everyone\n}", Handler{}, "has no placeholder"},
		{"missing arg", "permission http://a {\n route\n}", Handler{}, "wrong argument count"},
		{"extra arg", "permission http://a {\n timeout 1s 2s\n}", Handler{}, "wrong argument count"},
		{"invalidate_subject, older spellings", "permission http://a {\n invalidate_subject gateway.perm.invalidate\n nats_servers nats://n1:4222,nats://n2:4222 nats://n3:4222\n nats_creds_file /etc/gw.creds\n}",
			Handler{URL: "http://a", InvalidateSubject: "gateway.perm.invalidate", NATS: &natsconn.Config{
				Servers: []string{"nats://n1:4222,nats://n2:4222", "nats://n3:4222"}, Creds: "/etc/gw.creds"}}, ""},
		{"invalidate_subject, nats block", "permission http://a {\n invalidate_subject x\n nats {\n  servers nats://n1:4222\n  nkey /u.nk\n  tls {\n   ca /ca.pem\n  }\n  name gw-perm\n }\n}",
			Handler{URL: "http://a", InvalidateSubject: "x", NATS: &natsconn.Config{
				Servers: []string{"nats://n1:4222"}, NKey: "/u.nk", TLS: &natsconn.TLSConfig{CA: "/ca.pem"}, Name: "gw-perm"}}, ""},
		{"nats block, unknown", "permission http://a {\n nats {\n  bucket x\n }\n}", Handler{}, "unrecognized NATS subdirective 'bucket'"},
		{"bad invalidate_subject", "permission http://a {\n invalidate_subject gateway..x\n}", Handler{}, `invalid invalidate_subject "gateway..x"`},
		{"empty nats_servers", "permission http://a {\n nats_servers\n}", Handler{}, "wrong argument count"},
		{"unknown", "permission http://a {\n cache yes\n}", Handler{}, "unrecognized subdirective 'cache'"},
		{"dry_run", "permission http://a {\n dry_run\n}", Handler{URL: "http://a", DryRun: true}, ""},
		{"dry_run false", "permission http://a {\n dry_run false\n}", Handler{URL: "http://a"}, ""},
		{"dry_run yes", "permission http://a {\n dry_run yes\n}", Handler{}, `invalid dry_run "yes": must be true or false`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", h, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		h       Handler
		wantErr string
	}{
		{"ok", Handler{URL: "https://perm.internal/check"}, ""},
		{"env placeholder", Handler{URL: "{env.PERMCACHE_TEST_URL}"}, ""},
		{"no url", Handler{}, "url is required"},
		{"relative url", Handler{URL: "/check"}, "must be an absolute http:// or https:// URL"},
		{"other scheme", Handler{URL: "ftp://x/check"}, "must be an absolute http:// or https:// URL"},
		{"bad roles claim", Handler{URL: "http://x", RolesClaim: "a..b"}, "invalid roles_claim"},
		{"bad on_error", Handler{URL: "http://x", OnError: "ALLOW"}, `invalid on_error "ALLOW"`},
		{"negative size", Handler{URL: "http://x", CacheSize: -1}, "invalid cache_size -1"},
		{"key placeholder nothing sets", Handler{URL: "http://x", Key: "{http.auth.jwt.claim.sub} {http.request.method}"}, "did you mean {http.auth.jwt.claims.<name>}?"},
		{"key with a claim", Handler{URL: "http://x", Key: "{http.auth.jwt.claims.sub} {http.request.method}"}, ""},
	}
	t.Setenv("PERMCACHE_TEST_URL", "http://127.0.0.1:1/check")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestCaddyfileAdapt compares testdata/*.caddyfiletest: a Caddyfile, a line
// of ten dashes, and the JSON it adapts to. Run with -update to rewrite.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			input, expected, ok := strings.Cut(string(data), "\n----------\n")
			if !ok {
				t.Fatalf("%s has no ---------- separator", f)
			}
			if *update {
				out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), nil)
				if err != nil {
					t.Fatal(err)
				}
				var pretty bytes.Buffer
				if err := json.Indent(&pretty, out, "", "\t"); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, []byte(input+"\n----------\n"+pretty.String()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !caddytest.CompareAdapt(t, f, input, "caddyfile", strings.TrimRight(expected, "\n")) {
				t.Fatalf("%s: adapted JSON differs (see the diff above)", f)
			}
		})
	}
}
