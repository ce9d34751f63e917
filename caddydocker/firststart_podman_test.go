package caddydocker

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestFirstStartRunsListedRoutes: a first start (no state file) with a
// container running starts with the engine's routes, and no config
// reload follows: the config that caddy.Load started already runs the
// container's route, the loop's first list applies without a reload (a
// reload right after the start canceled the TLS app's certificate obtains
// in flight, issue 49), and the state file is written.
func TestFirstStartRunsListedRoutes(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	pf := freeport.Port(t)
	if err := p.Run("first", pf, labels("first", pf, "/first")); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "the container serving", 20*time.Second,
		podmantest.Expect(fmt.Sprintf("http://127.0.0.1:%d/first/x", pf), 200, "first /first/x"))
	stateFile := filepath.Join(t.TempDir(), "routes.json")
	changed := ReadStats()["applies_changed"]
	startGateway(t, gatewayConfig(p, stateFile))
	t.Cleanup(func() { stopGateway(t) })

	routes, ok := ServedRoutes("gateway")
	ids := map[string]bool{}
	for _, r := range routes {
		ids[RouteID(r)] = true
	}
	if !ok || len(routes) != 2 || !ids["docker:gateway:first:api"] || !ids["docker:gateway:first:stripped"] {
		t.Fatalf("the started config runs %v %s, want the container's two routes", ok, routes)
	}
	if code, body, err := get("/first/x"); err != nil || code != 200 || body != "first /first/x" {
		t.Fatalf("first request: %d %q %v, want 200 %q", code, body, err, "first /first/x")
	}
	podmantest.Eventually(t, "the loop's first list applied", 20*time.Second, func() string {
		if s := snapshot(t); s.LastApply.IsZero() || s.AppliedHash != s.Hash {
			return "applied " + s.AppliedHash + ", listed " + s.Hash
		}
		return ""
	})
	if now := ReadStats()["applies_changed"]; now != changed {
		t.Errorf("%v applies reloaded the config after the start, want none", now-changed)
	}
	// the apply writes the state file after it records the apply
	podmantest.Eventually(t, "the state file written", 20*time.Second, func() string {
		if _, err := os.Stat(stateFile); err != nil {
			return err.Error()
		}
		return ""
	})
}
