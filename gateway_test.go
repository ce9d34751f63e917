package gateway

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"
)

var update = flag.Bool("update", false, "rewrite testdata/Caddyfile.example.json")

// exampleEnv are the adapt-time variables Caddyfile.example reads; the
// golden file is made with all of them unset (the defaults).
var exampleEnv = []string{"GATEWAY_SITE", "GATEWAY_LISTEN", "AUDIT_SPOOL", "AUDIT_FILE",
	"DOCKER_ROUTES_STATE", "JWKS_URL", "PERMISSION_URL", "UPSTREAM", "GATEWAY_DEV_DIR", "SHUTDOWN_DELAY"}

func adaptExample(t *testing.T) []byte {
	t.Helper()
	for _, k := range exampleEnv {
		if v, ok := os.LookupEnv(k); ok {
			os.Unsetenv(k)
			t.Cleanup(func() { os.Setenv(k, v) })
		}
	}
	body, err := os.ReadFile("Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	out, warnings, err := adapter.Adapt(body, map[string]any{"filename": "Caddyfile.example"})
	if err != nil {
		t.Fatalf("Caddyfile.example does not adapt: %v", err)
	}
	fast := false
	for _, w := range warnings {
		// (the fast path's report of each server is the one expected
		// warning: the example's server runs on it)
		if w.Directive == "apigate" && strings.HasPrefix(w.Message, "fast path on for server") {
			fast = true
			continue
		}
		t.Errorf("adapt warning: %s", w.String())
	}
	if !fast {
		t.Error("adapting the example does not report its server on the fast path")
	}
	return out
}

// TestCaddyfileExample: the example users copy adapts cleanly, matches its
// golden JSON, and provisions (every module accepts its config).
func TestCaddyfileExample(t *testing.T) {
	out := adaptExample(t)
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "\t"); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	const golden = "testdata/Caddyfile.example.json"
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestCaddyfileExample -update)", err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Errorf("adapted Caddyfile.example differs from %s; if the change is intended, run: go test -run TestCaddyfileExample -update\ngot:\n%s", golden, pretty.String())
	}

	t.Run("provisions", func(t *testing.T) {
		t.Setenv("JWT_SECRET", strings.Repeat("k", 32))
		// the data and state paths of the example point at /var/lib; keep
		// validation inside the test's own directories
		cfg := bytes.ReplaceAll(out, []byte("/var/lib/gateway"), []byte(t.TempDir()))
		cfg = bytes.ReplaceAll(cfg, []byte("/var/log/gateway"), []byte(t.TempDir()))
		if err := caddy.Validate(mustConfig(t, cfg)); err != nil {
			t.Fatalf("Caddyfile.example does not provision: %v", err)
		}
	})
}

func mustConfig(t *testing.T, b []byte) *caddy.Config {
	t.Helper()
	var cfg caddy.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// TestDirectiveOrder: outside route blocks the duties take the contract's
// order whatever order they are written in (quota after the identity and
// the other duties: what they refuse is not counted).
func TestDirectiveOrder(t *testing.T) {
	src := `:19601 {
	reverse_proxy 127.0.0.1:1
	quota
	permission {
		url http://127.0.0.1:1/check
	}
	rate_limit {
		zone z {
			key {http.auth.user.id}
			events 1
			window 1m
		}
	}
	rbac {
		require any admin
	}
	jwt_auth {
		hmac_secret 0123456789abcdef0123456789abcdef
	}
	audit
}`
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			if h, ok := t["handler"].(string); ok {
				order = append(order, h)
			}
			for _, k := range []string{"routes", "handle"} {
				if c, ok := t[k]; ok {
					walk(c)
				}
			}
			if apps, ok := t["apps"]; ok {
				walk(apps.(map[string]any)["http"].(map[string]any)["servers"])
			}
			if _, ok := t["srv0"]; ok {
				walk(t["srv0"])
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	walk(cfg)
	want := []string{"audit", "jwt_auth", "rbac", "rate_limit", "permission", "quota", "reverse_proxy"}
	var got []string
	for _, h := range order {
		for _, w := range want {
			if h == w {
				got = append(got, h)
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("handler order %v, want %v (full: %v)", got, want, order)
	}
}
