package fleettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestRestartedMemberServesLastGoodSet: a fleet member that restarts
// serves its last good route set, the other hosts' services included,
// from its first request and while it catches up with the bucket: here
// the bucket cannot be read at all (NATS down), so its state file (in its
// data directory, kept across restarts) is all it has; once NATS is back
// it follows the bucket again.
func TestRestartedMemberServesLastGoodSet(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"ra", "rb"})
	nats := natstest.StartCluster(t, 3)
	ports := freeport.Ports(t, 4)
	a := &fleetHost{name: "a", pod: pods[0], admin: ports[0], http: ports[1], config: discoConfig, home: t.TempDir()}
	b := &fleetHost{name: "b", pod: pods[1], admin: ports[2], http: ports[3], config: discoConfig, home: t.TempDir()}
	a.start(t, bin, nats.URL())
	b.start(t, bin, nats.URL())

	p := freeport.Port(t)
	want := podmantest.Expect(b.url("/far/x"), 200, "far /far/x")
	runStep(t, "B routes A's container and keeps it in its state file", func(t *testing.T) {
		if err := a.pod.Run("far", p, discoLabels("far", p, "/far")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B routes A's", 20*time.Second, want)
		state := filepath.Join(b.home, "data", "caddy", "docker", "routes-gateway.json")
		podmantest.Eventually(t, "B's state file", 10*time.Second, func() string {
			b, err := os.ReadFile(state)
			if err != nil || !strings.Contains(string(b), `"node": "host-a"`) {
				return fmt.Sprintf("%s: %v", state, err)
			}
			return ""
		})
	})

	outer := t
	runStep(t, "B restarted with NATS down: A's service from the first request on", func(t *testing.T) {
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

	runStep(t, "NATS back: B follows the bucket again", func(t *testing.T) {
		nats.RestartAll()
		late := freeport.Port(t)
		if err := a.pod.Run("late", late, discoLabels("late", late, "/late")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B routes A's new container", 30*time.Second, podmantest.Expect(b.url("/late/x"), 200, "late /late/x"))
		podmantest.Eventually(t, "B still routes A's first", 5*time.Second, want)
	})
}
