package fleettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/natstest"
	"github.com/apigate/gateway/internal/podmantest"
)

// Ports of the restart fleet test: two gateways ("hosts" A and B).
var (
	restartAdmin = []int{2983, 2984}
	restartHTTP  = []int{19783, 19784}
)

// TestRestartedMemberServesLastGoodSet: a fleet member that restarts
// serves its last good route set, the other hosts' services included,
// from its first request and while it catches up with the bucket: here
// the bucket cannot be read at all (NATS down), so its state file is all
// it has; once NATS is back it follows the bucket again.
func TestRestartedMemberServesLastGoodSet(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"ra", "rb"})
	nats := natstest.StartCluster(t, 3)
	// state files that outlive a host's gateway process (its data
	// directory is new at each start)
	states := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	config := func(h *fleetHost, nats, _ string) string {
		return strings.Replace(discoConfig(h, nats, ""), "server gateway\n",
			"server gateway\n\t\tstate_file "+filepath.Join(states[h.name], "routes.json")+"\n", 1)
	}
	a := &fleetHost{name: "a", pod: pods[0], admin: restartAdmin[0], http: restartHTTP[0], config: config}
	b := &fleetHost{name: "b", pod: pods[1], admin: restartAdmin[1], http: restartHTTP[1], config: config}
	a.start(t, bin, nats.URL())
	b.start(t, bin, nats.URL())

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	p, err := podmantest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	want := podmantest.Expect(b.url("/far/x"), 200, "far /far/x")
	step("B routes A's container and keeps it in its state file", func(t *testing.T) {
		if err := a.pod.Run("far", p, discoLabels("far", p, "/far")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B routes A's", 20*time.Second, want)
		podmantest.Eventually(t, "B's state file", 10*time.Second, func() string {
			b, err := os.ReadFile(filepath.Join(states["b"], "routes.json"))
			if err != nil || !strings.Contains(string(b), `"node": "host-a"`) {
				return fmt.Sprintf("%v", err)
			}
			return ""
		})
	})

	outer := t
	step("B restarted with NATS down: A's service from the first request on", func(t *testing.T) {
		b.kill()
		nats.ShutdownAll()
		b.start(outer, bin, nats.URL())
		if msg := want(); msg != "" {
			t.Fatalf("the first request after the restart: %s", msg)
		}
		// B lists its own engine at once and re-lists every 2 s
		// (resync_interval): A's container stays routed through them
		for deadline := time.Now().Add(3 * discoTTL); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if msg := want(); msg != "" {
				t.Fatalf("while the bucket cannot be read: %s", msg)
			}
		}
	})

	step("NATS back: B follows the bucket again", func(t *testing.T) {
		nats.RestartAll()
		pLate, err := podmantest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.pod.Run("late", pLate, discoLabels("late", pLate, "/late")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B routes A's new container", 30*time.Second, podmantest.Expect(b.url("/late/x"), 200, "late /late/x"))
		podmantest.Eventually(t, "B still routes A's first", 5*time.Second, want)
	})
}
