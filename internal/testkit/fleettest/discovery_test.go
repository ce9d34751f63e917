package fleettest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// Ports of the discovery fleet test: two gateways ("hosts" A and B).
var (
	discoAdmin = []int{2937, 2947}
	discoHTTP  = []int{19750, 19760}
)

const discoTTL = 3 * time.Second

func discoConfig(h *fleetHost, nats, _ string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%[1]d
	auto_https off
	http_port %[2]d
	servers :%[2]d {
		name gateway
	}
	docker {
		host %[3]s
		server gateway
		debounce 50ms
		resync_interval 2s
		fleet {
			nats      %[4]s
			bucket    gateway_routes_test
			advertise 127.0.0.1
			ttl       %[5]s
			node      host-%[6]s
		}
	}
}

:%[2]d {
	handle /ready {
		respond "ok"
	}
}
`, h.admin, h.http, h.pod.Host(), nats, discoTTL, h.name)
}

func discoLabels(name string, port int, path string) map[string]string {
	return map[string]string{
		"gateway.enable":                   "true",
		"gateway.name":                     name,
		"gateway.port":                     fmt.Sprint(port),
		"gateway.router.api.path_prefix":   path,
		"gateway.router.api.auth.required": "false",
		"gateway.router.api.audit":         "false",
	}
}

// TestDiscoveryAcrossHosts runs two "hosts" (two private Podman services,
// two gateway processes) on one 3-node NATS cluster: a container started
// on A is served through B; replicas of one service on both hosts form one
// pool; A's gateway killed means its containers leave B within the ttl;
// with NATS unreachable each gateway keeps its last merged set and routes
// its own host's changes.
func TestDiscoveryAcrossHosts(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"fa", "fb"})
	nats := natstest.StartCluster(t, 3)
	a := &fleetHost{name: "a", pod: pods[0], admin: discoAdmin[0], http: discoHTTP[0], config: discoConfig}
	b := &fleetHost{name: "b", pod: pods[1], admin: discoAdmin[1], http: discoHTTP[1], config: discoConfig}
	a.start(t, bin, nats.URL())
	b.start(t, bin, nats.URL())

	step := func(name string, fn func(t *testing.T)) { runStep(t, name, fn) }
	port := func() int { return freeport.Port(t) }

	pOnlyA, pSharedA, pSharedB := port(), port(), port()
	step("a container on A is served through B", func(t *testing.T) {
		if err := a.pod.Run("only-a", pOnlyA, discoLabels("only-a", pOnlyA, "/only-a")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "A routes its own", 20*time.Second, podmantest.Expect(a.url("/only-a/x"), 200, "only-a /only-a/x"))
		t0 := time.Now()
		podmantest.Eventually(t, "B routes A's", 20*time.Second, podmantest.Expect(b.url("/only-a/x"), 200, "only-a /only-a/x"))
		t.Logf("A's container reached B %s after A routed it", time.Since(t0).Round(time.Millisecond))
	})

	step("one service on both hosts is one pool", func(t *testing.T) {
		if err := a.pod.Run("shared-a", pSharedA, discoLabels("shared", pSharedA, "/shared")); err != nil {
			t.Fatal(err)
		}
		if err := b.pod.Run("shared-b", pSharedB, discoLabels("shared", pSharedB, "/shared")); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*fleetHost{a, b} {
			seen := map[string]bool{}
			podmantest.Eventually(t, "both replicas through "+h.name, 20*time.Second, func() string {
				if c, body, err := podmantest.Get(h.url("/shared/q")); err == nil && c == 200 {
					seen[strings.Fields(body)[0]] = true
				}
				if seen["shared-a"] && seen["shared-b"] {
					return ""
				}
				return fmt.Sprintf("seen %v", seen)
			})
		}
	})

	step("A's gateway killed: its containers leave B within the ttl", func(t *testing.T) {
		a.kill()
		t0 := time.Now()
		podmantest.Eventually(t, "A's container gone from B", 4*discoTTL, podmantest.Expect(b.url("/only-a/x"), 404, ""))
		gone := time.Since(t0)
		t.Logf("A's container left B %s after A's gateway was killed (ttl %s)", gone.Round(time.Millisecond), discoTTL)
		if gone > discoTTL+2*time.Second {
			t.Errorf("A's containers left B after %s, more than ttl %s plus 2s", gone, discoTTL)
		}
		// B's own replica of the shared service still serves.
		for i := 0; i < 4; i++ {
			podmantest.Eventually(t, "shared through B's own replica", 5*time.Second, podmantest.Expect(b.url("/shared/q"), 200, "shared-b /shared/q"))
		}
	})
	outer := t
	step("A's gateway back: B routes A's containers again", func(t *testing.T) {
		a.start(outer, bin, nats.URL())
		podmantest.Eventually(t, "B routes A's again", 20*time.Second, podmantest.Expect(b.url("/only-a/x"), 200, "only-a /only-a/x"))
	})

	step("NATS unreachable: last merged set kept, own host still followed", func(t *testing.T) {
		nats.ShutdownAll()
		time.Sleep(3 * discoTTL) // well past the ttl
		for _, h := range []*fleetHost{a, b} {
			podmantest.Eventually(t, h.name+" keeps A's container", 5*time.Second, podmantest.Expect(h.url("/only-a/x"), 200, "only-a /only-a/x"))
		}
		pLate := port()
		if err := b.pod.Run("late-b", pLate, discoLabels("late-b", pLate, "/late-b")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B routes its new container", 20*time.Second, podmantest.Expect(b.url("/late-b/x"), 200, "late-b /late-b/x"))
		if err := b.pod.Stop("late-b"); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "B drops its stopped container", 20*time.Second, podmantest.Expect(b.url("/late-b/x"), 404, ""))
		nats.RestartAll()
		podmantest.Eventually(t, "B still routes A's once NATS is back", 30*time.Second, podmantest.Expect(b.url("/only-a/x"), 200, "only-a /only-a/x"))
	})

}
