package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// The reference configuration of a gateway host with discovery
// (testdata/host.Caddyfile, shown verbatim in docs/fleet.md) runs
// unchanged: each host's settings come from the environment.
const hostTTL = 3 * time.Second

// hostShutdownDelay is the reference config's shutdown_delay in the tests
// (5s in production): long enough for the test balancers' checks.
const hostShutdownDelay = time.Second

func hostConfig(_ *fleetHost, _, _ string) string {
	b, err := os.ReadFile(filepath.Join("testdata", "host.Caddyfile"))
	if err != nil {
		panic(err)
	}
	return string(b)
}

// newRefHost is a host running the reference config, with its own ports
// and a data directory kept across its gateway's restarts.
func newRefHost(t *testing.T, name string, pod *podmantest.Podman) *fleetHost {
	t.Helper()
	ports := freeport.Ports(t, 3)
	h := &fleetHost{name: name, pod: pod, admin: ports[0], http: ports[1], config: hostConfig, home: t.TempDir()}
	https := ports[2]
	h.env = func(h *fleetHost, nats string) []string {
		return []string{
			"GATEWAY_NODE=host-" + h.name,
			"GATEWAY_ADVERTISE=127.0.0.1",
			fmt.Sprintf("GATEWAY_ADMIN=127.0.0.1:%d", h.admin),
			fmt.Sprintf("GATEWAY_HTTP_PORT=%d", h.http),
			fmt.Sprintf("GATEWAY_HTTPS_PORT=%d", https),
			"NATS_URLS=" + nats,
			"DOCKER_HOST=" + h.pod.Host(),
			"AUDIT_SPOOL=" + filepath.Join(h.home, "audit"),
			"FLEET_TTL=" + hostTTL.String(),
			"SHUTDOWN_DELAY=" + hostShutdownDelay.String(),
		}
	}
	refHTTPS[h] = https
	return h
}

// refHTTPS is each reference host's HTTPS port.
var refHTTPS = map[*fleetHost]int{}

// fingerprint is the SHA-256 of the certificate h serves for
// fleet.localhost.
func fingerprint(h *fleetHost) (string, error) { return certFingerprintAt(refHTTPS[h]) }

func refLabels(name string, port int) map[string]string {
	l := discoLabels(name, port, "/"+name)
	delete(l, "gateway.router.api.audit") // audited (the default)
	return l
}

// auditPaths reads the AUDIT stream and counts the events of each path
// that contains mark.
func auditPaths(ctx context.Context, url, mark string) (map[string]int, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "AUDIT")
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	cons, err := js.OrderedConsumer(ctx, "AUDIT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for n := uint64(0); n < info.State.Msgs; {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		k := 0
		for m := range batch.Messages() {
			k++
			var ev struct {
				Path string `json:"path"`
			}
			if json.Unmarshal(m.Data(), &ev) == nil && strings.Contains(ev.Path, mark) {
				got[ev.Path]++
			}
		}
		if k == 0 {
			break
		}
		n += uint64(k)
	}
	return got, nil
}

// sent records the paths of the audited requests a test made that the
// gateway answered.
type sent struct {
	mu    sync.Mutex
	paths map[string]bool
}

// get requests path (/<service>/...) through h; the service must answer.
func (s *sent) get(t *testing.T, h *fleetHost, path string) {
	t.Helper()
	svc := strings.Split(path, "/")[1]
	code, body, err := podmantest.Get(h.url(path))
	if err != nil || code != 200 || !strings.HasPrefix(body, svc+" ") {
		t.Fatalf("GET %s through %s: %d %q %v; want 200 from %s", path, h.name, code, body, err, svc)
	}
	s.mu.Lock()
	if s.paths == nil {
		s.paths = map[string]bool{}
	}
	s.paths[path] = true
	s.mu.Unlock()
}

// checkAudit waits until the AUDIT stream holds exactly one event of
// every path s recorded (the paths that contain mark: a test's run id).
func (s *sent) checkAudit(t *testing.T, url, mark string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got map[string]int
	podmantest.Eventually(t, "every audited request's event in the AUDIT stream", 45*time.Second, func() string {
		var err error
		if got, err = auditPaths(ctx, url, mark); err != nil {
			return err.Error()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var missing []string
		for p := range s.paths {
			if got[p] == 0 {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return fmt.Sprintf("%d of %d events missing: %v", len(missing), len(s.paths), missing[:min(len(missing), 5)])
		}
		return ""
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, n := range got {
		if n > 1 {
			t.Errorf("%s stored %d times", p, n)
		}
		if !s.paths[p] {
			t.Errorf("event of %s, which the test did not request", p)
		}
	}
	t.Logf("AUDIT stream: %d events of %d answered requests, none lost, none twice", len(got), len(s.paths))
}

// TestFleetNATSOutage runs two hosts (Podman and a gateway each) on the
// reference config (testdata/host.Caddyfile) and a one-node NATS: with
// NATS shut down, gateway A restarts (SIGTERM, then a new process) and
// routes its own host's container within 2 s of its start, serving the
// fleet's certificate from its local copy; a config reload takes no
// wait; a container started during the outage is routed by its own
// gateway; once NATS is back the other gateway routes it too, and every
// audited request of the test, the outage included, is in the AUDIT
// stream once.
func TestFleetNATSOutage(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"na", "nb"})
	cluster := natstest.StartCluster(t, 1)
	a, b := newRefHost(t, "a", pods[0]), newRefHost(t, "b", pods[1])
	a.start(t, bin, cluster.URL())
	b.start(t, bin, cluster.URL())
	run := fmt.Sprint(time.Now().UnixNano())
	var audited sent

	step := func(name string, fn func(t *testing.T)) { runStep(t, name, fn) }
	port := func() int { return freeport.Port(t) }
	pA, pB, pLate := port(), port(), port()
	var fpA string
	step("NATS up: each host's container through both gateways, one certificate", func(t *testing.T) {
		if err := a.pod.Run("svc-a", pA, refLabels("svc-a", pA)); err != nil {
			t.Fatal(err)
		}
		if err := b.pod.Run("svc-b", pB, refLabels("svc-b", pB)); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*fleetHost{a, b} {
			podmantest.Eventually(t, h.name+" routes svc-a", 20*time.Second, podmantest.Expect(h.url("/svc-a/x"), 200, "svc-a /svc-a/x"))
			podmantest.Eventually(t, h.name+" routes svc-b", 20*time.Second, podmantest.Expect(h.url("/svc-b/x"), 200, "svc-b /svc-b/x"))
		}
		podmantest.Eventually(t, "A serves fleet.localhost", 30*time.Second, func() string {
			var err error
			if fpA, err = fingerprint(a); err != nil {
				return err.Error()
			}
			return ""
		})
		podmantest.Eventually(t, "B serves A's certificate", 30*time.Second, func() string {
			fp, err := fingerprint(b)
			if err != nil {
				return err.Error()
			}
			if fp != fpA {
				return "B serves another certificate than A"
			}
			return ""
		})
		for i := 0; i < 5; i++ {
			audited.get(t, a, fmt.Sprintf("/svc-a/%s-up-%d", run, i))
			audited.get(t, b, fmt.Sprintf("/svc-b/%s-up-%d", run, i))
		}
	})

	outer := t
	step("NATS down: A restarts and routes its own host within 2s", func(t *testing.T) {
		cluster.ShutdownAll()
		// Requests during the outage are audited (spooled on disk).
		for i := 0; i < 5; i++ {
			audited.get(t, a, fmt.Sprintf("/svc-a/%s-down-%d", run, i))
		}
		a.proc.stop(t)
		t0 := time.Now()
		a.start(outer, bin, cluster.URL())
		ready := time.Since(t0)
		podmantest.Eventually(t, "A routes its own container", 20*time.Second, podmantest.Expect(a.url("/svc-a/x"), 200, "svc-a /svc-a/x"))
		routed := time.Since(t0)
		t.Logf("with NATS down, A answered /ready %v and routed its own container %v after its process started",
			ready.Round(time.Millisecond), routed.Round(time.Millisecond))
		if routed > 2*time.Second {
			t.Errorf("A routed its own host %v after it started with NATS down; the goal is 2s", routed.Round(time.Millisecond))
		}
		// Caddy's tls app loads managed certificates in the background
		// (ManageAsync), so the first handshakes after a start can find
		// none: wait until A serves one, then check it is the fleet's.
		var fp string
		podmantest.Eventually(t, "A serves fleet.localhost after its restart", 10*time.Second, func() string {
			var err error
			if fp, err = fingerprint(a); err != nil {
				return err.Error()
			}
			return ""
		})
		if fp != fpA {
			t.Errorf("A restarted during the outage serves certificate %q, want the fleet's certificate %q from its local copy", fp, fpA)
		}
		for i := 0; i < 5; i++ {
			audited.get(t, a, fmt.Sprintf("/svc-a/%s-restarted-%d", run, i))
		}
	})

	step("NATS down: a reload takes no wait", func(t *testing.T) {
		cfg := hostConfig(nil, "", "")
		req, _ := http.NewRequest("POST", a.adminURL("/load"), strings.NewReader(cfg))
		req.Header.Set("Content-Type", "text/caddyfile")
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(t0)
		if resp.StatusCode != 200 {
			t.Fatalf("POST /load during the outage: %d", resp.StatusCode)
		}
		t.Logf("a config reload during the outage took %v", took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("a reload during the outage took %v", took)
		}
		// The loaded Caddyfile has no discovered routes: the docker app
		// puts them back (through another load, which takes no wait
		// either).
		podmantest.Eventually(t, "A routes svc-a again", 5*time.Second, podmantest.Expect(a.url("/svc-a/x"), 200, "svc-a /svc-a/x"))
		audited.get(t, a, fmt.Sprintf("/svc-a/%s-reloaded", run))
	})

	step("NATS down: a new container is routed by its own gateway", func(t *testing.T) {
		t0 := time.Now()
		if err := a.pod.Run("late-a", pLate, refLabels("late-a", pLate)); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "A routes its new container", 20*time.Second, podmantest.Expect(a.url("/late-a/x"), 200, "late-a /late-a/x"))
		t.Logf("a container started during the outage was routed by its gateway %v after podman run began", time.Since(t0).Round(time.Millisecond))
		// B still routes what it knew (nothing expires while NATS is away).
		podmantest.Eventually(t, "B keeps svc-a", 5*time.Second, podmantest.Expect(b.url("/svc-a/x"), 200, "svc-a /svc-a/x"))
		audited.get(t, a, fmt.Sprintf("/late-a/%s-down", run))
	})

	step("NATS back: B routes A's new container, every event is stored", func(t *testing.T) {
		cluster.RestartAll()
		podmantest.Eventually(t, "B routes late-a", 30*time.Second, podmantest.Expect(b.url("/late-a/x"), 200, "late-a /late-a/x"))
		audited.get(t, b, fmt.Sprintf("/late-a/%s-up", run))
		audited.checkAudit(t, cluster.URL(), run)
	})
}
