package caddydocker

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestFollowsConfigAdmin: the docker app applies its routes through the
// admin API at the config's own `admin` address (here a unix socket), with
// no admin option of its own (gatewayConfig sets none either, so every
// Podman test of this package runs on the followed address).
func TestFollowsConfigAdmin(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	sock := filepath.Join(t.TempDir(), "admin.sock")
	cfg := gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json"))
	moved := strings.Replace(cfg, "admin "+adminAddr, "admin unix/"+sock+"|0600", 1)
	if moved == cfg || strings.Contains(moved, adminAddr) {
		t.Fatalf("the test config does not move the admin API as expected:\n%s", moved)
	}
	startGateway(t, moved)
	t.Cleanup(func() { stopGateway(t) })

	pn := freeport.Port(t)
	if err := p.Run("moved", pn, labels("moved", pn, "/moved")); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "routed through the admin API on the socket", 20*time.Second, expect("/moved/x", 200, "moved /moved/x"))
	if s := snapshot(t); s.LastError != "" {
		t.Fatalf("last error: %s", s.LastError)
	}
}

// TestAdminOff: a config that turns the admin API off cannot run
// discovery; the load fails and says so, with or without the app's own
// admin option.
func TestAdminOff(t *testing.T) {
	for _, dockerAdmin := range []string{"", "admin localhost:2905"} {
		t.Run("docker option "+dockerAdmin, func(t *testing.T) {
			cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`{
	admin off
	docker {
		host unix:///nonexistent/docker.sock
		`+dockerAdmin+`
	}
}

:19502 {
	respond "x"
}
`), nil)
			if err != nil {
				t.Fatal(err)
			}
			var cfg caddy.Config
			if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
				t.Fatal(err)
			}
			err = caddy.Validate(&cfg)
			const want = "docker: discovery needs the admin API, through which it applies the routes it finds, but this config turns the admin API off"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("validate: %v; want an error saying %q", err, want)
			}
		})
	}
}
