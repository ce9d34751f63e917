package caddydocker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/podmantest"
)

// TestPodmanHealth: containers with a health check are routed only while
// healthy; a service with no routable replica answers 503
// no_healthy_upstream with Retry-After; gateway.health=ignore opts out.
// Podman runs no health checks without systemd, so the test runs each
// check itself (podman healthcheck run) and the gateway sees the result at
// its next health poll (Podman sends no health event).
func TestPodmanHealth(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")))
	t.Cleanup(func() { stopGateway(t) })

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	noHealthy := func() string {
		resp, err := httpClient.Get("http://" + gatewayAddr + "/hc/x")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || string(b) != NoHealthyUpstreamBody || resp.Header.Get("Retry-After") != "5" {
			return fmt.Sprintf("%d %q Retry-After %q", resp.StatusCode, b, resp.Header.Get("Retry-After"))
		}
		return ""
	}
	state := func(name string) string {
		for _, d := range snapshot(t).Containers {
			if d.Container.Name == p.Prefix+name {
				return d.State
			}
		}
		return "not discovered"
	}

	ph := port(t)
	step("starting: 503 no_healthy_upstream", func(t *testing.T) {
		if err := p.RunOpts("hc", ph, labels("hc", ph, "/hc"), podmantest.HealthArgs(ph)...); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "503 while starting", 20*time.Second, noHealthy)
		if s := state("hc"); s != StateStarting {
			t.Fatalf("state %q, want starting", s)
		}
	})

	step("healthy: routed", func(t *testing.T) {
		podmantest.Eventually(t, "check passes", 10*time.Second, func() string {
			if err := p.HealthCheck("hc"); err != nil {
				return err.Error()
			}
			return ""
		})
		podmantest.Eventually(t, "routed once healthy", 10*time.Second, expect("/hc/x", 200, "hc /hc/x"))
	})

	step("unhealthy: out again", func(t *testing.T) {
		resp, err := httpClient.Post(fmt.Sprintf("http://127.0.0.1:%d/_sick", ph), "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if p.HealthCheck("hc") == nil {
			t.Fatal("health check passed on a sick server")
		}
		podmantest.Eventually(t, "503 once unhealthy", 10*time.Second, noHealthy)
		if s := state("hc"); s != StateUnhealthy {
			t.Fatalf("state %q, want unhealthy", s)
		}
	})

	pi := port(t)
	step("gateway.health=ignore: routed beside the unhealthy one", func(t *testing.T) {
		err := p.RunOpts("hc-ignore", pi, labels("hc", pi, "/hc", "gateway.health", "ignore"), podmantest.HealthArgs(pi)...)
		if err != nil {
			t.Fatal(err)
		}
		// never checked, so Podman says starting; the label routes it anyway
		podmantest.Eventually(t, "the ignoring replica serves", 20*time.Second, expect("/hc/x", 200, "hc-ignore /hc/x"))
		for i := 0; i < 5; i++ {
			if code, body, err := get("/hc/x"); err != nil || code != 200 || body != "hc-ignore /hc/x" {
				t.Fatalf("request %d: %d %q %v (the unhealthy replica must get none)", i, code, body, err)
			}
		}
	})
}

// TestRollingRestart: three replicas of one service, each stopped and
// replaced in turn, under 300 connections of GETs and POSTs: no request
// fails. The replicas follow docs/caddydocker.md's advice (DRAIN: keep
// serving a moment after SIGTERM, then finish the requests in flight), and
// are stopped as it advises for Podman 4: `podman kill -s TERM`, whose
// event takes the replica out of its pool before it closes anything, then
// `podman stop`.
func TestRollingRestart(t *testing.T) {
	// GATEWAY_ROLL_STOP_ONLY=1 stops replicas with `podman stop` alone,
	// to measure what Podman's late stop event costs (see the docs).
	stopOnly := os.Getenv("GATEWAY_ROLL_STOP_ONLY") != ""
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")))
	t.Cleanup(func() { stopGateway(t) })

	drain := []string{"--env", "DRAIN=1s"}
	run := func(name string) {
		t.Helper()
		pn := port(t)
		if err := p.RunOpts(name, pn, labels("roll", pn, "/roll"), drain...); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"old-1", "old-2", "old-3"} {
		run(n)
	}

	var served sync.Map // replica name -> *atomic.Int64
	var ok, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	count := func(name string) int64 {
		v, found := served.Load(name)
		if !found {
			return 0
		}
		return v.(*atomic.Int64).Load()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 300, MaxConnsPerHost: 300}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	var n atomic.Int64
	hit := func() {
		// Half are POSTs, which Caddy retries only when the dial failed:
		// a replica that dies with requests in flight fails them.
		var resp *http.Response
		var err error
		if n.Add(1)%2 == 0 {
			resp, err = client.Post("http://"+gatewayAddr+"/roll/x", "text/plain", strings.NewReader("order"))
		} else {
			resp, err = client.Get("http://" + gatewayAddr + "/roll/x")
		}
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode == 200 {
			name, _, _ := strings.Cut(string(body), " ")
			v, _ := served.LoadOrStore(name, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			ok.Add(1)
			return
		}
		failed.Add(1)
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 10 {
			if err != nil {
				failures = append(failures, err.Error())
			} else {
				failures = append(failures, fmt.Sprintf("%d %q", resp.StatusCode, body))
			}
		}
	}
	podmantest.Eventually(t, "all three old replicas serve", 30*time.Second, func() string {
		hit()
		if count("old-1") > 0 && count("old-2") > 0 && count("old-3") > 0 {
			return ""
		}
		return fmt.Sprintf("served %d %d %d", count("old-1"), count("old-2"), count("old-3"))
	})
	ok.Store(0)
	failed.Store(0)
	failures = nil

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				hit()
			}
		}()
	}
	stopLoad := func() { cancel(); wg.Wait() }
	t.Cleanup(stopLoad)

	time.Sleep(time.Second)
	for i := 1; i <= 3; i++ {
		old, repl := fmt.Sprintf("old-%d", i), fmt.Sprintf("new-%d", i)
		run(repl)
		podmantest.Eventually(t, repl+" takes traffic", 30*time.Second, func() string {
			if count(repl) > 0 {
				return ""
			}
			return "not yet"
		})
		t0 := time.Now()
		if stopOnly {
			if err := p.Stop(old); err != nil {
				t.Fatal(err)
			}
		} else {
			// Podman 4's stop reports nothing before the process exits;
			// a kill event does, so send the signal that way first
			// (docs/caddydocker.md), as `docker stop` does itself.
			if err := p.Signal(old, "TERM"); err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(old); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("stopping %s took %s", old, time.Since(t0).Round(time.Millisecond))
		podmantest.Eventually(t, old+" forgotten", 30*time.Second, func() string {
			for _, d := range snapshot(t).Containers {
				if d.Container.Name == p.Prefix+old {
					return "still discovered: " + d.State
				}
			}
			return ""
		})
	}
	time.Sleep(time.Second)
	stopLoad()
	t.Logf("%d requests answered 200, %d failed; by replica: old %d %d %d, new %d %d %d",
		ok.Load(), failed.Load(), count("old-1"), count("old-2"), count("old-3"), count("new-1"), count("new-2"), count("new-3"))
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed during the rolling restart, e.g. %v", failed.Load(), failures)
	}
	if ok.Load() < 1000 {
		t.Fatalf("only %d requests: the load did not run", ok.Load())
	}
}
