package caddydocker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/fastpath"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestPodmanHealth: containers with a health check are routed only while
// healthy; a service with no routable replica answers 503
// no_healthy_upstream with Retry-After; gateway.health=ignore opts out.
// Podman runs no health checks without systemd, so the test runs each
// check itself (podman healthcheck run) and the gateway sees the result at
// its next health poll (Podman sends no health event).
func TestPodmanHealth(t *testing.T) {
	for _, path := range requestPaths {
		t.Run(path.name, func(t *testing.T) { podmanHealth(t, path.fast) })
	}
}

// requestPaths are the two paths a discovered route's requests can take:
// Caddy's server, and the fast path (the apigate listener wrapper) serving
// the same routes.
var requestPaths = []struct {
	name string
	fast bool
}{{"caddy path", false}, {"fast path", true}}

// onPath is the test gateway's Caddyfile cfg with the gateway server
// behind the apigate listener wrapper when fast.
func onPath(t *testing.T, cfg string, fast bool) string {
	t.Helper()
	if !fast {
		return cfg
	}
	const at = "\t\tname gateway\n"
	if !strings.Contains(cfg, at) {
		t.Fatal("the test Caddyfile has no gateway server block")
	}
	return strings.Replace(cfg, at, at+"\t\tlistener_wrappers {\n\t\t\tapigate\n\t\t}\n", 1)
}

// requireServedBy fails t unless the gateway server is on the path
// wanted, and returns a function that, on the fast path, fails t unless
// the fast path served at least min requests since.
func requireServedBy(t *testing.T, fast bool) (atLeast func(min int64)) {
	t.Helper()
	before := fastServed()
	if fast != (before >= 0) {
		t.Fatalf("fast path on=%v, want %v (status %+v)", before >= 0, fast, fastpath.Status())
	}
	return func(min int64) {
		t.Helper()
		if n := fastServed() - before; fast && n < min {
			t.Fatalf("the fast path served %d requests, want at least %d", n, min)
		}
	}
}

func podmanHealth(t *testing.T, fast bool) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, onPath(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")), fast))
	t.Cleanup(func() { stopGateway(t) })
	servedAtLeast := requireServedBy(t, fast)

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
		if resp.StatusCode != 503 || string(b) != answerBody("no_healthy_upstream", "/hc/x") || resp.Header.Get("Retry-After") != "5" {
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

	ph := freeport.Port(t)
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

	pi := freeport.Port(t)
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
	servedAtLeast(5)
}

// TestRollingRestart: three replicas of one service, each stopped and
// replaced in turn with a plain `podman stop -t 4` (Podman 4 reports
// nothing until the process exits), under 300 connections of GETs and
// POSTs. The app sees the replica leave the running list as the stop
// begins and drains it (TestPodmanStopDrains); what a replica cuts when it
// exits is retried for GETs (caddyh1.RetryOnAnother).
//
//   - Replicas that keep serving through the grace period, until Podman
//     kills them at its end (DRAIN=30s): no request fails. The grace,
//     rollGrace, is 4 s (Podman's default is 10): the replica leaves its
//     pool within StopPoll and a list of its SIGTERM (TestPodmanStopDrains
//     logs it: at most 0.8 s after at a load average of 20-25), so the
//     rest is margin for a loaded machine, and each second less is 6 s off
//     the test.
//   - Replicas that keep serving a moment after SIGTERM, then finish the
//     requests in flight (DRAIN=2s; docs/caddydocker.md's advice): no
//     request fails.
//   - Replicas that exit at once on SIGTERM: no GET fails; a POST they
//     were serving may (it is not sent twice), and is counted.
//
// GATEWAY_ROLL_SIGNAL_FIRST=1 adds the older advice's way, `podman kill -s
// TERM` (a kill event at once), then `podman stop`.
func TestRollingRestart(t *testing.T) {
	modes := []rollMode{
		{name: "podman stop, replicas serve until killed", drain: "30s"},
		{name: "podman stop, replicas drain", drain: "2s"},
		{name: "podman stop, replicas exit at once", postsMayFail: true},
	}
	if os.Getenv("GATEWAY_ROLL_SIGNAL_FIRST") != "" {
		modes = append(modes, rollMode{name: "kill -s TERM, then podman stop, replicas drain", drain: "1s", signalFirst: true})
	}
	for _, path := range requestPaths {
		t.Run(path.name, func(t *testing.T) {
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) { rollingRestart(t, m, path.fast) })
			}
		})
	}
}

// rollGrace is TestRollingRestart's `podman stop -t`.
const rollGrace = 4 * time.Second

type rollMode struct {
	name         string
	drain        string // the replicas' DRAIN ("": they exit at once on SIGTERM)
	signalFirst  bool   // podman kill -s TERM before podman stop
	postsMayFail bool
}

func rollingRestart(t *testing.T, m rollMode, fast bool) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, withoutResync(t, onPath(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")), fast)))
	t.Cleanup(func() { stopGateway(t) })
	servedAtLeast := requireServedBy(t, fast)

	var opts []string
	if m.drain != "" {
		opts = []string{"--env", "DRAIN=" + m.drain}
	}
	start := func(name string) error { // no t.Fatal: it runs in goroutines
		ps, err := freeport.Get(1)
		if err != nil {
			return err
		}
		pn := ps[0]
		return p.RunOpts(name, pn, labels("roll", pn, "/roll"), opts...)
	}
	run := func(name string) {
		t.Helper()
		if err := start(name); err != nil {
			t.Fatal(err)
		}
	}
	// the old replicas start side by side (each podman run takes a while)
	var starts sync.WaitGroup
	startErrs := make([]error, 3)
	for i, n := range []string{"old-1", "old-2", "old-3"} {
		starts.Add(1)
		go func() { defer starts.Done(); startErrs[i] = start(n) }()
	}
	starts.Wait()
	for _, err := range startErrs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var served sync.Map // replica name -> *atomic.Int64
	var okGET, okPOST, failedGET, failedPOST atomic.Int64
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
		var resp *http.Response
		var err error
		post := n.Add(1)%2 == 0
		if post {
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
			if post {
				okPOST.Add(1)
			} else {
				okGET.Add(1)
			}
			return
		}
		method := "GET"
		if post {
			failedPOST.Add(1)
			method = "POST"
		} else {
			failedGET.Add(1)
		}
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 10 {
			if err != nil {
				failures = append(failures, method+": "+err.Error())
			} else {
				failures = append(failures, fmt.Sprintf("%s: %d %q", method, resp.StatusCode, body))
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
	okGET.Store(0)
	okPOST.Store(0)
	failedGET.Store(0)
	failedPOST.Store(0)
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

	time.Sleep(300 * time.Millisecond) // the load runs before the first stop
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
		if m.signalFirst {
			if err := p.Signal(old, "TERM"); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.StopGrace(old, rollGrace); err != nil {
			t.Fatal(err)
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
	time.Sleep(300 * time.Millisecond) // the load runs after the last stop
	stopLoad()
	total := okGET.Load() + okPOST.Load() + failedGET.Load() + failedPOST.Load()
	t.Logf("%d requests: GET %d ok, %d failed; POST %d ok, %d failed; by replica: old %d %d %d, new %d %d %d",
		total, okGET.Load(), failedGET.Load(), okPOST.Load(), failedPOST.Load(),
		count("old-1"), count("old-2"), count("old-3"), count("new-1"), count("new-2"), count("new-3"))
	if failedGET.Load() != 0 || failedPOST.Load() != 0 && !m.postsMayFail {
		t.Fatalf("%d GETs and %d POSTs failed during the rolling restart, e.g. %v", failedGET.Load(), failedPOST.Load(), failures)
	}
	if failedPOST.Load() != 0 {
		t.Logf("POSTs cut by replicas exiting at once (not sent twice): %d, e.g. %v", failedPOST.Load(), failures)
	}
	if okGET.Load()+okPOST.Load() < 1000 {
		t.Fatalf("only %d requests: the load did not run", okGET.Load()+okPOST.Load())
	}
	servedAtLeast(total)
}

// TestPodmanStopDrains: a plain `podman stop` (no kill event until the
// process exits) takes the replica out of its pool as the stop begins,
// while it still serves during its grace period: the watcher re-lists
// every StopPoll while Podman has routed containers, and a container
// being stopped leaves the running list at once.
//
// Nothing else could drain it within the wait: the replica serves for
// drain after SIGTERM (no die event), and the resync is 5m. The wait is
// no time limit on the gateway: it counts from the `podman stop` command,
// which takes seconds to signal on a loaded machine (0.4-8.3 s in 18 runs
// at a load average of 20-25; a 4 s limit here failed a CI run). The
// gateway's own delay, from the replica's SIGTERM to its leaving the pool,
// is logged: -0.5 to +0.8 s in those runs (negative: Podman marks the
// container stopping before its runtime signals it).
func TestPodmanStopDrains(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, withoutResync(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json"))))
	t.Cleanup(func() { stopGateway(t) })

	// The replica serves this long after SIGTERM; Podman would kill it
	// only after the stop's grace. The test kills it once it has seen
	// the drain, so neither is waited for.
	const drain, grace, wait = time.Minute, 2 * time.Minute, 45 * time.Second
	ps, po := freeport.Port(t), freeport.Port(t)
	if err := p.RunOpts("stopped", ps, labels("drn", ps, "/drn"), "--env", "DRAIN="+drain.String()); err != nil {
		t.Fatal(err)
	}
	if err := p.Run("other", po, labels("drn", po, "/drn")); err != nil {
		t.Fatal(err)
	}
	stoppedDial := fmt.Sprintf("127.0.0.1:%d", ps)
	podmantest.Eventually(t, "both replicas in the pool", 30*time.Second, func() string {
		if got := PoolOf("gateway", "drn"); len(got) != 2 {
			return fmt.Sprintf("pool %v", got)
		}
		return ""
	})
	if !engineStopsUnannounced(t) {
		t.Fatal("the engine is Podman, but the app does not know it")
	}

	t0 := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- p.StopGrace("stopped", grace) }()
	var left time.Time
	podmantest.Eventually(t, "the stopped replica leaves the pool (within its grace period, with no event and no resync)", wait, func() string {
		if slices.Contains(PoolOf("gateway", "drn"), stoppedDial) {
			return fmt.Sprintf("still in the pool %v, %s after `podman stop` was run", PoolOf("gateway", "drn"), time.Since(t0).Round(time.Millisecond))
		}
		left = time.Now()
		return ""
	})
	// It left while it still served (its grace period), not when it
	// exited. Podman marks the container stopping before its runtime
	// signals the process: on a loaded machine the pool can drop the
	// replica before the SIGTERM arrives.
	var since time.Time
	podmantest.Eventually(t, "the replica has its SIGTERM and still serves", wait, func() string {
		resp, err := http.Get(fmt.Sprintf("http://%s/drn/x", stoppedDial))
		if err != nil {
			t.Fatalf("the replica stopped serving (it left its pool %s after `podman stop` was run): %v", left.Sub(t0).Round(time.Millisecond), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("the replica answers %d, want 200 while it drains", resp.StatusCode)
		}
		h := resp.Header.Get("X-Draining-Since")
		if h == "" {
			return "no SIGTERM yet"
		}
		if since, err = time.Parse(time.RFC3339Nano, h); err != nil {
			t.Fatalf("X-Draining-Since %q: %v", h, err)
		}
		return ""
	})
	t.Logf("`podman stop` signalled the replica %s after it was run; the replica left its pool %s after its SIGTERM (StopPoll %s; negative: before it), while still serving",
		since.Sub(t0).Round(time.Millisecond), left.Sub(since).Round(time.Millisecond), StopPoll)
	for i := 0; i < 8; i++ {
		if code, body, err := get("/drn/x"); err != nil || code != 200 || body != "other /drn/x" {
			t.Fatalf("request %d after the drain: %d %q %v, want the other replica", i, code, body, err)
		}
	}
	if err := p.Kill("stopped"); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// engineStopsUnannounced reads the running app's engine flag.
func engineStopsUnannounced(t *testing.T) bool {
	t.Helper()
	currentMu.RLock()
	defer currentMu.RUnlock()
	w, ok := current["gateway"]
	if !ok {
		t.Fatal("no running watcher for server gateway")
	}
	return w.engine.StopsUnannounced()
}

// withoutResync sets a config's resync_interval to 5m, so that within a
// test only events and the stop poll make the app re-list (a resync every
// 2s, gatewayConfig's, would hide whether a stop is seen early).
func withoutResync(t *testing.T, cfg string) string {
	t.Helper()
	out := strings.Replace(cfg, "resync_interval 2s", "resync_interval 5m", 1)
	if out == cfg {
		t.Fatal("the test config's resync_interval is not where expected")
	}
	return out
}
