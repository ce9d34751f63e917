package caddydocker

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestScopePodman: with `scope`, the gateway routes only the containers
// carrying the scope label, on an engine that runs others' labelled
// containers too.
func TestScopePodman(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	cfg := strings.Replace(gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")),
		"debounce 100ms", "debounce 100ms\n\t\tscope gateway.instance=edge", 1)
	startGateway(t, cfg)
	t.Cleanup(func() { stopGateway(t) })

	mine, theirs := freeport.Port(t), freeport.Port(t)
	if err := p.Run("mine", mine, labels("mine", mine, "/mine", "gateway.instance", "edge")); err != nil {
		t.Fatal(err)
	}
	if err := p.Run("theirs", theirs, labels("theirs", theirs, "/theirs", "gateway.instance", "internal")); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "the container in scope routed", 20*time.Second, expect("/mine/x", 200, "mine /mine/x"))
	podmantest.Eventually(t, "both listed", 10*time.Second, func() string {
		if s := snapshot(t); s.OutOfScope != 1 || len(s.Containers) != 1 {
			return "snapshot: " + strings.Join(s.Scope, ",")
		}
		return ""
	})
	if status, body, err := get("/theirs/x"); err != nil || status != 404 {
		t.Errorf("the container outside the scope: %d %q %v, want 404", status, body, err)
	}
	if s := snapshot(t); len(s.Scope) != 1 || s.Scope[0] != "gateway.instance=edge" || s.Containers[0].Container.Name != p.Prefix+"mine" {
		t.Errorf("snapshot: scope %v, containers %+v", s.Scope, s.Containers)
	}
}
