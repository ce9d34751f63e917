package caddydocker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	// The handler modules whose Caddyfile syntax the docker block embeds.
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyrbac"
)

// TestCaddyfileGolden adapts testdata/caddyfile/*.caddyfiletest (a
// Caddyfile, a line of dashes, the expected JSON) and compares.
func TestCaddyfileGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "caddyfile", "*.caddyfiletest"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in, want, ok := strings.Cut(string(raw), "\n----------\n")
			if !ok {
				t.Fatalf("no ---------- separator")
			}
			got, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(in), nil)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, got, "", "\t"); err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(f, []byte(in+"\n----------\n"+out.String()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.TrimSpace(out.String()) != strings.TrimSpace(want) {
				t.Errorf("adapted JSON differs (run with -update after checking):\n%s", out.String())
			}
		})
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input, wantErr string
	}{
		{name: "minimal", input: "docker"},
		{name: "all scalars", input: "docker {\n host unix:///run/podman/podman.sock\n debounce 50ms\n resync_interval 1m\n state_file /tmp/s.json\n server gateway\n admin localhost:2019\n}"},
		{name: "argument", input: "docker now", wantErr: "wrong argument count"},
		{name: "unknown", input: "docker {\n hots x\n}", wantErr: "unrecognized subdirective 'hots'"},
		{name: "host without value", input: "docker {\n host\n}", wantErr: "wrong argument count"},
		{name: "host two values", input: "docker {\n host a b\n}", wantErr: "wrong argument count"},
		{name: "bad debounce", input: "docker {\n debounce soon\n}", wantErr: `invalid debounce "soon"`},
		{name: "negative debounce", input: "docker {\n debounce -1s\n}", wantErr: "must not be negative"},
		{name: "short resync", input: "docker {\n resync_interval 10ms\n}", wantErr: "at least 1s"},
		{name: "stream_close_delay", input: "docker {\n stream_close_delay 0\n}"},
		{name: "bad stream_close_delay", input: "docker {\n stream_close_delay forever\n}", wantErr: `invalid stream_close_delay "forever"`},
		{name: "negative stream_close_delay", input: "docker {\n stream_close_delay -1m\n}", wantErr: "must not be negative"},
		{name: "bad jwt_auth", input: "docker {\n jwt_auth {\n  bogus x\n }\n}", wantErr: "bogus"},
		{name: "bad rbac", input: "docker {\n rbac {\n  roles_claim\n }\n}", wantErr: "wrong argument count"},
		{name: "fleet", input: "docker {\n fleet {\n  nats nats://a:4222 nats://b:4222\n  bucket r\n  advertise 10.0.0.5\n  ttl 5s\n  node h1\n }\n}"},
		{name: "fleet argument", input: "docker {\n fleet now {\n  advertise x\n }\n}", wantErr: "wrong argument count"},
		{name: "fleet without advertise", input: "docker {\n fleet {\n  nats nats://a:4222\n }\n}", wantErr: "advertise is required"},
		{name: "fleet nats without url", input: "docker {\n fleet {\n  nats\n  advertise x\n }\n}", wantErr: "expected one or more NATS URLs"},
		{name: "fleet ttl", input: "docker {\n fleet {\n  advertise x\n  ttl soon\n }\n}", wantErr: `fleet ttl "soon"`},
		{name: "fleet two buckets", input: "docker {\n fleet {\n  advertise x\n  bucket a b\n }\n}", wantErr: "fleet bucket: expected one value, got 2"},
		{name: "rate_limit_sync", input: "docker {\n rate_limit_sync 100ms\n}"},
		{name: "rate_limit_sync off", input: "docker {\n rate_limit_sync off\n}"},
		{name: "bad rate_limit_sync", input: "docker {\n rate_limit_sync often\n}", wantErr: `invalid rate_limit_sync "often"`},
		{name: "zero rate_limit_sync", input: "docker {\n rate_limit_sync 0s\n}", wantErr: `invalid rate_limit_sync "0s"`},
		{name: "fleet restart_grace", input: "docker {\n fleet {\n  advertise x\n  restart_grace 2m\n }\n}"},
		{name: "fleet restart_grace off", input: "docker {\n fleet {\n  advertise x\n  restart_grace off\n }\n}"},
		{name: "fleet bad restart_grace", input: "docker {\n fleet {\n  advertise x\n  restart_grace -1s\n }\n}", wantErr: `fleet restart_grace "-1s"`},
		{name: "fleet unknown", input: "docker {\n fleet {\n  advertise x\n  ttls 5s\n }\n}", wantErr: "unrecognized subdirective 'ttls'"},
		{name: "scope", input: "docker {\n scope com.docker.compose.project=shop gateway.instance\n scope tier=\n}"},
		{name: "scope without label", input: "docker {\n scope\n}", wantErr: "scope: expected <label>=<value>"},
		{name: "scope without key", input: "docker {\n scope =shop\n}", wantErr: `invalid scope "=shop"`},
		{name: "forget_after", input: "docker {\n forget_after 0\n}"},
		{name: "bad forget_after", input: "docker {\n forget_after later\n}", wantErr: `invalid forget_after "later"`},
		{name: "negative forget_after", input: "docker {\n forget_after -1h\n}", wantErr: "invalid forget_after \"-1h\": must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a App
			err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		app     App
		wantErr string
	}{
		{name: "ok", app: App{Host: "unix:///x.sock"}},
		{name: "host without scheme", app: App{Host: "/var/run/docker.sock"}, wantErr: `invalid host "/var/run/docker.sock"`},
		{name: "negative debounce", app: App{Debounce: -1}, wantErr: "invalid debounce"},
		{name: "short resync", app: App{ResyncInterval: 5}, wantErr: "invalid resync_interval"},
		{name: "negative stream_close_delay", app: App{StreamCloseDelay: func() *caddy.Duration { d := caddy.Duration(-1); return &d }()}, wantErr: "invalid stream_close_delay"},
		{name: "fleet ok", app: App{Fleet: &FleetOptions{Advertise: "10.0.0.5", Node: "h1", TTL: caddy.Duration(5e9)}}},
		{name: "fleet short ttl", app: App{Fleet: &FleetOptions{Advertise: "10.0.0.5", Node: "h1", TTL: caddy.Duration(1e8)}}, wantErr: "docker: fleet:"},
		{name: "fleet bad node", app: App{Fleet: &FleetOptions{Advertise: "10.0.0.5", Node: "a b"}}, wantErr: "docker: fleet:"},
		{name: "negative rate_limit_sync", app: App{RateLimitSync: func() *caddy.Duration { d := caddy.Duration(-1); return &d }()}, wantErr: "invalid rate_limit_sync"},
		{name: "fleet long restart_grace", app: App{Fleet: &FleetOptions{Advertise: "10.0.0.5", Node: "h1", RestartGrace: func() *caddy.Duration { d := caddy.Duration(48 * time.Hour); return &d }()}}, wantErr: "restart_grace"},
		{name: "fleet advertise with port", app: App{Fleet: &FleetOptions{Advertise: "10.0.0.5:80", Node: "h1"}}, wantErr: "docker: fleet:"},
		{name: "bad scope", app: App{Scope: []string{"a b=c"}}, wantErr: `docker: invalid scope "a b=c"`},
		{name: "negative forget_after", app: App{ForgetAfter: func() *caddy.Duration { d := caddy.Duration(-1); return &d }()}, wantErr: "invalid forget_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.app.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestWithHandler(t *testing.T) {
	got, err := withHandler(json.RawMessage(`{"hmac_secret":"x"}`), "jwt_auth")
	if err != nil || string(got) != `{"handler":"jwt_auth","hmac_secret":"x"}` {
		t.Fatalf("got %s %v", got, err)
	}
	if _, err := withHandler(json.RawMessage(`{"handler":"rbac"}`), "jwt_auth"); err == nil {
		t.Fatal("wrong handler name accepted")
	}
	if _, err := withHandler(json.RawMessage(`[1]`), "jwt_auth"); err == nil {
		t.Fatal("non-object accepted")
	}
	if got, _ := withHandler(nil, "audit"); got != nil {
		t.Fatal("nil became non-nil")
	}
}

func TestRBACBuilder(t *testing.T) {
	base, _ := withHandler(json.RawMessage(`{"roles_claim":"realm_access.roles"}`), "rbac")
	got, err := rbacBuilder(base)([]string{"admin", "editor"})
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if v["handler"] != "rbac" || v["roles_claim"] != "realm_access.roles" {
		t.Fatalf("got %s", got)
	}
	if !strings.Contains(string(got), `"admin","editor"`) {
		t.Fatalf("roles missing: %s", got)
	}
}
