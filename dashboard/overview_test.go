package dashboard

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/apigate/gateway/caddydocker"
)

// TestContainersFromStates: each replica's health and state reach the
// dashboard, and only routed containers count as routed.
func TestContainersFromStates(t *testing.T) {
	lbl := func(extra ...string) []string {
		return append([]string{"gateway.enable", "true", "gateway.port", "8080",
			"gateway.router.api.path_prefix", "/api", "gateway.router.api.auth.required", "false", "gateway.router.api.audit", "false"}, extra...)
	}
	mk := func(name string, f func(*caddydocker.Container), labels ...string) caddydocker.Container {
		m := map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			m[labels[i]] = labels[i+1]
		}
		c := caddydocker.Container{ID: "id-" + name, Name: name, Labels: m, IP: "10.88.0.2"}
		f(&c)
		return c
	}
	ds := caddydocker.Discover([]caddydocker.Container{
		mk("a-healthy", func(c *caddydocker.Container) { c.Health = "healthy" }, lbl("gateway.name", "svc")...),
		mk("b-sick", func(c *caddydocker.Container) { c.Health = "unhealthy" }, lbl("gateway.name", "svc")...),
		mk("c-remote", func(c *caddydocker.Container) { c.Node, c.Advertise = "host-b", "10.0.0.6" }, lbl("gateway.name", "svc")...),
		mk("d-bad", func(*caddydocker.Container) {}, lbl("gateway.port", "x")...),
	}, caddydocker.LabelOptions{})
	got := ContainersFrom(caddydocker.Snapshot{Containers: ds}, true)
	if got.Routed != 1 || got.Rejected != 1 {
		t.Fatalf("routed %d rejected %d, want 1 and 1", got.Routed, got.Rejected)
	}
	want := map[string][3]string{ // state, health, node
		"a-healthy": {"routed", "healthy", ""},
		"b-sick":    {"unhealthy", "unhealthy", ""},
		"c-remote":  {"local_only", "", "host-b"},
		"d-bad":     {"rejected", "", ""},
	}
	for _, it := range got.Items {
		w := want[it.Name]
		if it.State != w[0] || it.Health != w[1] || it.Node != w[2] {
			t.Errorf("%s: state %q health %q node %q, want %v", it.Name, it.State, it.Health, it.Node, w)
		}
		if (it.State != "routed" && it.State != "rejected") != (it.Reason != "") {
			t.Errorf("%s: reason %q for state %s", it.Name, it.Reason, it.State)
		}
	}
}

// TestContainersFromEngine: the page says which engine discovery lists
// (so an unreachable one is named), the scope and the placement warnings.
func TestContainersFromEngine(t *testing.T) {
	got := ContainersFrom(caddydocker.Snapshot{Server: "gateway", Engine: "unix:///var/run/docker.sock",
		Scope: []string{"gateway.instance=edge"}, OutOfScope: 2, Placement: []string{"server gateway: ..."}}, true)
	if got.Engine != "unix:///var/run/docker.sock" || got.EngineReachable || len(got.Scope) != 1 || got.OutOfScope != 2 || len(got.Placement) != 1 {
		t.Fatalf("containers %+v", got)
	}
}

// TestOverviewSessions: the browser sessions panel reads oidc_login's own
// snapshot, and shows zero counts (not nulls) without one.
func TestOverviewSessions(t *testing.T) {
	o := Sources{}.Build(context.Background(), time.Second, 0)
	if o.Sessions.Logins == nil || o.Sessions.Checks == nil {
		t.Fatalf("without oidc_login: %+v", o.Sessions)
	}
	want := SessionStats{Logins: map[string]float64{"success": 2, "state_mismatch": 1}, Sessions: 2,
		Checks: map[string]float64{"session": 7}, Refreshes: map[string]float64{}, Revocations: map[string]float64{"logout": 1}}
	o = Sources{Sessions: func() SessionStats { return want }}.Build(context.Background(), time.Second, 0)
	b, _ := json.Marshal(o.Sessions)
	if string(b) != `{"logins":{"state_mismatch":1,"success":2},"sessions":2,"checks":{"session":7},"refreshes":{},"revocations":{"logout":1}}` {
		t.Fatalf("the overview's sessions: %s", b)
	}
}
