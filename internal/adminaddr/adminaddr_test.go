package adminaddr

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// probe is an app that records, while Caddy provisions it, what For and
// configured read from its provisioning context: the way the docker app
// and the dashboard handler use this package.
type probe struct {
	Override string `json:"override,omitempty"`
}

var probed struct {
	ep       Endpoint
	err      error
	listen   string
	disabled bool
	readErr  error
	warnings int
}

func (probe) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "adminaddr_probe", New: func() caddy.Module { return new(probe) }}
}

func (p *probe) Provision(ctx caddy.Context) error {
	core, logs := observer.New(zap.WarnLevel)
	probed.ep, probed.err = For(ctx, p.Override, zap.New(core))
	probed.listen, probed.disabled, probed.readErr = configured(ctx)
	probed.warnings = logs.Len()
	return nil
}

func (p *probe) Start() error { return nil }
func (p *probe) Stop() error  { return nil }

func init() { caddy.RegisterModule(probe{}) }

// TestReadsPinnedCaddy provisions real Caddy configs (caddy.Validate
// provisions every app of a config, as a load does) and checks what a
// module reads from its provisioning context. It fails when the pinned
// Caddy no longer links a Context to its Config the way configured reads
// it: then bump this package along with Caddy.
func TestReadsPinnedCaddy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		admin    *caddy.AdminConfig
		override string
		want     Endpoint
		wantErr  error
	}{
		{name: "no admin block: Caddy's default", admin: nil,
			want: Endpoint{"tcp", caddy.DefaultAdminListen, caddy.DefaultAdminListen}},
		{name: "moved", admin: &caddy.AdminConfig{Listen: "127.0.0.1:2999"},
			want: Endpoint{"tcp", "127.0.0.1:2999", "127.0.0.1:2999"}},
		{name: "unix socket with a file mode", admin: &caddy.AdminConfig{Listen: "unix//run/gw/admin.sock|0660"},
			want: Endpoint{"unix", "/run/gw/admin.sock", "localhost"}},
		{name: "override wins", admin: &caddy.AdminConfig{Listen: "127.0.0.1:2999"}, override: "localhost:3000",
			want: Endpoint{"tcp", "localhost:3000", "localhost:3000"}},
		{name: "admin off", admin: &caddy.AdminConfig{Disabled: true}, wantErr: ErrDisabled},
		{name: "admin off, override or not", admin: &caddy.AdminConfig{Disabled: true}, override: "localhost:3000", wantErr: ErrDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed.ep, probed.err, probed.readErr = Endpoint{}, nil, nil
			raw, _ := json.Marshal(probe{Override: tc.override})
			cfg := &caddy.Config{Admin: tc.admin, AppsRaw: caddy.ModuleMap{"adminaddr_probe": raw}}
			if err := caddy.Validate(cfg); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if probed.readErr != nil {
				t.Fatalf("reading the config from a module's context: %v (did caddy.Context change in the Caddy version go.mod pins? update configured)", probed.readErr)
			}
			if probed.warnings != 0 {
				t.Errorf("%d warnings logged", probed.warnings)
			}
			if tc.admin != nil && (probed.listen != tc.admin.Listen || probed.disabled != tc.admin.Disabled) {
				t.Errorf("read listen %q disabled %v, want %q %v", probed.listen, probed.disabled, tc.admin.Listen, tc.admin.Disabled)
			}
			if !errors.Is(probed.err, tc.wantErr) || probed.ep != tc.want {
				t.Errorf("For = %+v, %v; want %+v, %v", probed.ep, probed.err, tc.want, tc.wantErr)
			}
		})
	}

	t.Run("the active context, after a load", func(t *testing.T) {
		raw, _ := json.Marshal(probe{})
		sock := filepath.Join(t.TempDir(), "admin.sock")
		cfg := caddy.Config{Admin: &caddy.AdminConfig{Listen: "unix/" + sock}, AppsRaw: caddy.ModuleMap{"adminaddr_probe": raw}}
		js, _ := json.Marshal(cfg)
		if err := caddy.Load(js, true); err != nil {
			t.Fatalf("load: %v", err)
		}
		defer func() { _ = caddy.Stop() }()
		ep, err := For(caddy.ActiveContext(), "", nil)
		if err != nil || ep != (Endpoint{"unix", sock, "localhost"}) {
			t.Fatalf("For(ActiveContext) = %+v, %v", ep, err)
		}
	})

	t.Run("a context of no config: the default", func(t *testing.T) {
		ep, err := For(caddy.Context{}, "", nil)
		if err != nil || ep.Address != caddy.DefaultAdminListen {
			t.Fatalf("For(Context{}) = %+v, %v", ep, err)
		}
	})
}

func TestParse(t *testing.T) {
	t.Setenv("ADMINADDR_TEST_PORT", "2998")
	for _, tc := range []struct {
		in      string
		want    Endpoint
		wantErr string
	}{
		{in: "", want: Endpoint{"tcp", caddy.DefaultAdminListen, caddy.DefaultAdminListen}},
		{in: "localhost:2999", want: Endpoint{"tcp", "localhost:2999", "localhost:2999"}},
		{in: "tcp/127.0.0.1:2999", want: Endpoint{"tcp", "127.0.0.1:2999", "127.0.0.1:2999"}},
		{in: "[::1]:2999", want: Endpoint{"tcp", "[::1]:2999", "[::1]:2999"}},
		{in: "127.0.0.1:{env.ADMINADDR_TEST_PORT}", want: Endpoint{"tcp", "127.0.0.1:2998", "127.0.0.1:2998"}},
		{in: "unix//tmp/admin.sock", want: Endpoint{"unix", "/tmp/admin.sock", "localhost"}},
		{in: "unix//tmp/admin.sock|0222", want: Endpoint{"unix", "/tmp/admin.sock", "localhost"}},
		{in: "localhost:2000-2010", wantErr: `invalid admin address "localhost:2000-2010": must be one TCP address or a unix socket`},
		{in: "localhost:http", wantErr: `invalid admin address "localhost:http"`},
		{in: "127.0.0.1:{unknown.placeholder}", wantErr: `invalid admin address "127.0.0.1:{unknown.placeholder}"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || len(err.Error()) < len(tc.wantErr) || err.Error()[:len(tc.wantErr)] != tc.wantErr {
					t.Fatalf("Parse(%q) = %+v, %v; want error %q...", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}
