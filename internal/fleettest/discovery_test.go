package fleettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/natstest"
	"github.com/apigate/gateway/internal/podmantest"
)

// Ports of the discovery fleet test: two gateways ("hosts" A and B).
var (
	discoAdmin = []int{2937, 2947}
	discoHTTP  = []int{19750, 19760}
)

const discoTTL = 3 * time.Second

// discoHost is one "host": a private Podman service and a gateway
// following it, in the fleet.
type discoHost struct {
	name string
	pod  *podmantest.Podman
	idx  int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (h *discoHost) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", discoHTTP[h.idx], path)
}

func discoConfig(h *discoHost, nats string) string {
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
`, discoAdmin[h.idx], discoHTTP[h.idx], h.pod.Host(), nats, discoTTL, h.name)
}

// start runs the host's gateway and waits until it answers.
func (h *discoHost) start(t *testing.T, bin, nats string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(discoConfig(h, nats)), 0o644); err != nil {
		t.Fatal(err)
	}
	h.log = filepath.Join(dir, "caddy.log")
	logf, err := os.Create(h.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.cmd, h.done = cmd, make(chan struct{})
	done := h.done
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(h.log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("gateway %s log (tail):\n%s", h.name, b)
		}
	})
	podmantest.Eventually(t, "gateway "+h.name+" ready", 60*time.Second, func() string {
		select {
		case <-done:
			b, _ := os.ReadFile(h.log)
			t.Fatalf("gateway %s exited:\n%s", h.name, b)
		default:
		}
		code, _, err := podmantest.Get(h.url("/ready"))
		if err != nil || code != 200 {
			return fmt.Sprintf("%d %v", code, err)
		}
		return ""
	})
}

// kill SIGKILLs the gateway: it cannot delete its fleet entry.
func (h *discoHost) kill() {
	_ = h.cmd.Process.Kill()
	<-h.done
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
	root := repoRoot(t)
	var (
		wg   sync.WaitGroup
		pods [2]*podmantest.Podman
		errs [2]error
	)
	for i, name := range []string{"fa", "fb"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = podmantest.New(root, name)
		}()
	}
	wg.Wait()
	for i := range pods {
		if pods[i] != nil {
			p := pods[i]
			t.Cleanup(p.Close)
		}
		podmantest.Require(t, pods[i], errs[i])
	}
	nats := natstest.StartCluster(t, 3)
	a := &discoHost{name: "a", pod: pods[0], idx: 0}
	b := &discoHost{name: "b", pod: pods[1], idx: 1}
	a.start(t, bin, nats.URL())
	b.start(t, bin, nats.URL())

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	port := func() int {
		p, err := podmantest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

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
		for _, h := range []*discoHost{a, b} {
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
		for _, h := range []*discoHost{a, b} {
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
