package fleettest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// Ports of the canary fleet test: gateways A and B.
var (
	canaryAdmin = []int{2973, 2974}
	canaryHTTP  = []int{19773, 19774}
)

const canaryTTL = 3 * time.Second

// canaryConfig is a canary test host's Caddyfile: discovery in the
// fleet, and an audit file sink.
func canaryConfig(h *fleetHost, nats, dir string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%[1]d
	auto_https off
	http_port %[2]d
	servers :%[2]d {
		name gateway
	}
	audit {
		sink file %[7]s {
			flush_interval 10ms
		}
	}
	docker {
		host %[3]s
		server gateway
		debounce 50ms
		resync_interval 2s
		fleet {
			nats      %[4]s
			bucket    gateway_canary_test
			advertise 127.0.0.1
			ttl       %[5]s
			node      canary-%[6]s
		}
	}
}

:%[2]d {
	handle /ready {
		respond "ok"
	}
}
`, h.admin, h.http, h.pod.Host(), nats, canaryTTL, h.name, filepath.Join(dir, "audit.jsonl"))
}

// canaryState is the part of a release the test reads from the admin API.
type canaryState struct {
	Service string `json:"service"`
	Version string `json:"version"`
	State   string `json:"state"`
	Weight  int    `json:"weight"`
	By      string `json:"by"`
	Reason  string `json:"reason"`
}

// release reads the gateway's release of svc from GET /gateway/containers.
func release(h *fleetHost, svc string) (canaryState, error) {
	code, body, err := podmantest.Get(h.adminURL("/gateway/containers"))
	if err != nil || code != 200 {
		return canaryState{}, fmt.Errorf("GET /gateway/containers: %d %v", code, err)
	}
	var c struct {
		Canaries []canaryState `json:"canaries"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return canaryState{}, err
	}
	for _, r := range c.Canaries {
		if r.Service == svc {
			return r, nil
		}
	}
	return canaryState{}, fmt.Errorf("no release of %s", svc)
}

// metric reads one sample of the gateway's /metrics ("" when absent).
func metric(h *fleetHost, line string) string {
	resp, err := http.Get(h.adminURL("/metrics"))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), line+" ") {
			return strings.TrimPrefix(sc.Text(), line+" ")
		}
	}
	return ""
}

// TestCanaryAcrossFleet runs two "hosts" (two private Podman services,
// two gateway processes) on one NATS cluster, a canary of a service on
// host A answering 500s: both gateways split it alike (B through the
// fleet); traffic through A alone rolls it back on A, and B applies the
// rollback within the ttl (B sends it nothing more); B SIGKILLed and
// restarted is still rolled back and routes the service to v1 alone from
// its first request (its state file and canary records are in its data
// directory, kept across the restart; the bucket has them too), with no
// wait for the bucket (issue 32: a restarted B answered Caddy's empty 200
// until its routes were patched in).
func TestCanaryAcrossFleet(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"qa", "qb"})
	nats := natstest.StartCluster(t, 3)
	a := &fleetHost{name: "a", pod: pods[0], admin: canaryAdmin[0], http: canaryHTTP[0], config: canaryConfig}
	b := &fleetHost{name: "b", pod: pods[1], admin: canaryAdmin[1], http: canaryHTTP[1], config: canaryConfig, home: t.TempDir()}
	a.start(t, bin, nats.URL())
	b.start(t, bin, nats.URL())

	const svc = "fleetcanary"
	labels := func(version string, port int, extra ...string) map[string]string {
		m := map[string]string{
			"gateway.enable": "true", "gateway.name": svc, "gateway.port": fmt.Sprint(port),
			"gateway.version": version, "gateway.router.api.path_prefix": "/" + svc,
			"gateway.router.api.auth.required": "false", "gateway.router.api.audit": "false",
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	path := "/" + svc + "/x"

	runStep(t, "both gateways run the release of A's canary", func(t *testing.T) {
		for _, v := range []string{"v1a", "v1b"} {
			p := freeport.Port(t)
			if err := a.pod.Run(svc+"-"+v, p, labels("v1", p)); err != nil {
				t.Fatal(err)
			}
		}
		p := freeport.Port(t)
		if err := a.pod.RunOpts(svc+"-v2", p, labels("v2", p, "gateway.canary.weight", "20",
			"gateway.canary.sticky", "none", "gateway.canary.min_requests", "50"), "--env", "STATUS=500"); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*fleetHost{a, b} {
			podmantest.Eventually(t, h.name+" runs the release at 20%", 30*time.Second, func() string {
				r, err := release(h, svc)
				if err != nil || r.State != "running" || r.Weight != 20 || r.Version != "v2" {
					return fmt.Sprintf("%+v %v", r, err)
				}
				return ""
			})
		}
		// B reaches A's replicas (a few requests: fewer than min_requests
		// reach the canary)
		podmantest.Eventually(t, "B routes A's stable replicas", 20*time.Second, func() string {
			code, body, err := podmantest.Get(b.url(path))
			if err != nil || code != 200 || !strings.HasPrefix(body, svc+"-v1") {
				return fmt.Sprintf("%d %q %v", code, body, err)
			}
			return ""
		})
	})

	runStep(t, "A rolls back, B applies it within the ttl", func(t *testing.T) {
		var rolled time.Time
		sent := 0
		podmantest.Eventually(t, "A rolled back", 60*time.Second, func() string {
			for range 20 {
				if _, _, err := podmantest.Get(a.url(path)); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			if r, err := release(a, svc); err == nil && r.State == "rolled_back" {
				rolled = time.Now()
				return ""
			}
			return fmt.Sprintf("%d sent", sent)
		})
		podmantest.Eventually(t, "B rolled back", canaryTTL, func() string {
			r, err := release(b, svc)
			if err != nil || r.State != "rolled_back" || r.Weight != 0 || r.By != "canary-a" {
				return fmt.Sprintf("%+v %v", r, err)
			}
			return ""
		})
		t.Logf("A rolled back after %d requests through it; B applied it %s after the test saw A's", sent, time.Since(rolled).Round(time.Millisecond))
		for range 200 {
			code, body, err := podmantest.Get(b.url(path))
			if err != nil || code != 200 || !strings.HasPrefix(body, svc+"-v1") {
				t.Fatalf("through B after the rollback: %d %q %v", code, body, err)
			}
		}
		if got := metric(a, `gateway_canary_rollbacks_total{service="`+svc+`"}`); got != "1" {
			t.Errorf("A's gateway_canary_rollbacks_total = %q, want 1", got)
		}
		if got := metric(b, `gateway_canary_rollbacks_total{service="`+svc+`"}`); got != "" && got != "0" {
			t.Errorf("B's gateway_canary_rollbacks_total = %q: B did not decide it", got)
		}
	})

	outer := t
	runStep(t, "B restarted: rolled back, routed from its first request", func(t *testing.T) {
		b.kill()
		b.start(outer, bin, nats.URL())
		// from the first request on (start returns at B's first 200 of
		// /ready), with no wait for B's bucket watch
		for i := range 100 {
			code, body, err := podmantest.Get(b.url(path))
			if err != nil || code != 200 || !strings.HasPrefix(body, svc+"-v1") {
				t.Fatalf("through the restarted B, request %d: %d %q %v", i+1, code, body, err)
			}
		}
		podmantest.Eventually(t, "B knows the release", 30*time.Second, func() string {
			r, err := release(b, svc)
			if err != nil || r.State != "rolled_back" || r.Weight != 0 {
				return fmt.Sprintf("%+v %v", r, err)
			}
			return ""
		})
	})
}
