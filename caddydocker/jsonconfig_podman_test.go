package caddydocker

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestJSONConfigWithoutHandlers: a JSON config whose server has no
// docker_routes handler gets them (in front, and the catch-all) through
// the admin API once the app starts, and routes.
func TestJSONConfigWithoutHandlers(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	// take the handlers the adapter placed out again
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	srv := cfg["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["gateway"].(map[string]any)
	var own []any
	for _, r := range srv["routes"].([]any) {
		raw, _ := json.Marshal(r)
		if !HasRoutesHandler([]json.RawMessage{raw}) && !isCatchAll(raw) {
			own = append(own, r)
		}
	}
	srv["routes"] = own
	js, _ := json.Marshal(cfg)
	if err := caddy.Load(js, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGateway(t) })

	pn := freeport.Port(t)
	if err := p.Run("json", pn, labels("json", pn, "/json")); err != nil {
		t.Fatal(err)
	}
	podmantest.Eventually(t, "routed", 20*time.Second, expect("/json/x", 200, "json /json/x"))
	podmantest.Eventually(t, "own route", 5*time.Second, expect("/own", 200, "own route"))
	podmantest.Eventually(t, "the catch-all", 5*time.Second, expect("/nothing", 404, answerBody("no_route", "/nothing")))
}
