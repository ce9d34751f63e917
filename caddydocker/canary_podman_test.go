package caddydocker

import (
	"bufio"
	"encoding/json"
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

	_ "github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/fastpath"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// Ports of the canary tests (their own, so that they run beside the
// package's other Podman tests of another worktree): admin 2971,
// listeners 19770-19779.
const (
	canaryAdmin = "localhost:2971"
	canaryAddr  = "127.0.0.1:19771"
)

func canaryConfig(p *podmantest.Podman, dir string, fast bool) string {
	wrappers := ""
	if fast {
		wrappers = "listener_wrappers {\n\t\t\tapigate\n\t\t}"
	}
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port 19770
	https_port 19779
	servers :19771 {
		name gateway
		%s
	}
	audit {
		sink file %s {
			flush_interval 10ms
		}
	}
	docker {
		host %s
		state_file %s
		server gateway
		debounce 50ms
		resync_interval 2s
		jwt_auth {
			hmac_secret %s
		}
	}
}

:19771 {
	handle /own {
		respond "own route"
	}
}
`, canaryAdmin, wrappers, filepath.Join(dir, "audit.jsonl"), p.Host(), filepath.Join(dir, "routes.json"), testSecret)
}

// canaryLabels are the labels of one replica of svc at version; extra
// adds labels (gateway.canary.* for the canary).
func canaryLabels(svc, version string, port int, auth bool, extra ...string) map[string]string {
	m := map[string]string{
		"gateway.enable":                   "true",
		"gateway.name":                     svc,
		"gateway.port":                     fmt.Sprint(port),
		"gateway.version":                  version,
		"gateway.router.api.path_prefix":   "/" + svc,
		"gateway.router.api.auth.required": fmt.Sprint(auth),
		"gateway.router.api.audit":         "false",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

var canaryClientHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

type answer struct {
	status    int
	body      string
	setCookie string
}

func canaryGet(path string, header http.Header) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+canaryAddr+path, nil)
	if err != nil {
		return answer{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := canaryClientHTTP.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Set-Cookie")}, err
}

// deployCanary runs replicas v1a, v1b (stable) and v2 (the canary, with
// canaryExtra labels and runOpts) of svc and waits until the gateway
// splits the service between them. It returns how many of the requests
// it sent to check that were answered by the canary (0 or 1: they count
// in the canary's window).
func deployCanary(t *testing.T, p *podmantest.Podman, svc string, auth bool, runOpts []string, canaryExtra ...string) (probeOnCanary int) {
	t.Helper()
	var ports []int
	for _, v := range []string{"v1a", "v1b"} {
		pt := freeport.Port(t)
		if err := p.Run(svc+"-"+v, pt, canaryLabels(svc, "v1", pt, auth)); err != nil {
			t.Fatal(err)
		}
		ports = append(ports, pt)
	}
	pt := freeport.Port(t)
	if err := p.RunOpts(svc+"-v2", pt, canaryLabels(svc, "v2", pt, auth, canaryExtra...), runOpts...); err != nil {
		t.Fatal(err)
	}
	// Every replica listens before the test's requests: a replica that
	// does not listen yet has its refused connections retried on another
	// (ReplicaStartGrace), so a client whose version is the canary's would
	// get its first answer from the stable side and move at its next
	// request. Asked directly, not through the gateway (which would count
	// the answers in the release's window).
	for _, pt := range append(ports, pt) {
		podmantest.Eventually(t, fmt.Sprintf("%s replica on port %d listening", svc, pt), 30*time.Second, func() string {
			if _, _, err := podmantest.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", pt)); err != nil {
				return err.Error()
			}
			return ""
		})
	}
	podmantest.Eventually(t, svc+" split between v1 and v2", 30*time.Second, func() string {
		if n := len(PoolOf("gateway", svc)); n != 3 {
			return fmt.Sprintf("%d replicas in the pool", n)
		}
		if c := canaryOf(t, svc); c == nil || c.Version != "v2" {
			return "no release of v2"
		}
		if auth {
			return ""
		}
		// an answer of the service (not the empty 200 of the config the
		// gateway loaded, which serves until the discovered routes apply)
		a, err := canaryGet("/"+svc+"/ready", nil)
		if err != nil || (a.status != 200 && a.status != 500) || !strings.HasPrefix(a.body, svc+"-v") {
			return fmt.Sprintf("%d %q %v", a.status, a.body, err)
		}
		if strings.HasPrefix(a.body, svc+"-v2 ") {
			probeOnCanary = 1
		}
		return ""
	})
	return probeOnCanary
}

func canaryOf(t *testing.T, svc string) *CanaryStatus {
	t.Helper()
	s, ok := Current("gateway")
	if !ok {
		return nil
	}
	for _, c := range s.Canaries {
		if c.Service == svc {
			return &c
		}
	}
	return nil
}

// auditEvents returns the audit file's events of kind for svc.
func auditEvents(t *testing.T, file, kind, svc string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["kind"] == kind && m["service"] == svc {
			out = append(out, m)
		}
	}
	return out
}

// TestCanary runs canary releases against real Podman through the
// gateway in process, once with the fast path serving the discovered
// routes and once on Caddy's own path: weights, the header override,
// stickiness by cookie (and by subject, on Caddy's path, where jwt_auth
// runs), rollback on 500s and on latency, promotion to 100%.
func TestCanary(t *testing.T) {
	p := getPodman(t)
	for _, tc := range []struct {
		name string
		fast bool
		tag  string
	}{{"fast path", true, "f"}, {"caddy path", false, "c"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(p.RemoveAll)
			dir := t.TempDir()
			startGateway(t, canaryConfig(p, dir, tc.fast))
			t.Cleanup(func() { stopGateway(t) })
			canaryOnPath(t, p, dir, tc.fast, tc.tag)
		})
	}
}

// fastServed is how many requests the fast path served on server gateway
// (gateway_fastpath_requests_total), -1 when it does not serve it.
func fastServed() int64 {
	for _, s := range fastpath.Status() {
		if s.Server == "gateway" && s.On {
			return int64(s.Requests)
		}
	}
	return -1
}

func canaryOnPath(t *testing.T, p *podmantest.Podman, dir string, fast bool, tag string) {
	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}
	served := fastServed()
	if fast != (served >= 0) {
		t.Fatalf("fast path on=%v, want %v (status %+v)", served >= 0, fast, fastpath.Status())
	}
	// counts the requests the fast path served during fn
	onFast := func(fn func()) int64 {
		before := fastServed()
		fn()
		return fastServed() - before
	}

	step("weight 10: 1,000 requests land 7-13% on the canary; the header sends testers there", func(t *testing.T) {
		svc := "cw-" + tag
		deployCanary(t, p, svc, false, nil, "gateway.canary.weight", "10", "gateway.canary.sticky", "none",
			"gateway.canary.header", "X-Canary=yes")
		var canary, total int
		n := onFast(func() {
			for range 1000 {
				a, err := canaryGet("/"+svc+"/x", nil)
				if err != nil || a.status != 200 {
					t.Fatalf("request failed: %d %q %v", a.status, a.body, err)
				}
				total++
				if strings.HasPrefix(a.body, svc+"-v2 ") {
					canary++
				} else if !strings.HasPrefix(a.body, svc+"-v1") {
					t.Fatalf("answer from neither version: %q", a.body)
				}
			}
		})
		share := 100 * float64(canary) / float64(total)
		t.Logf("%d of %d requests (%.1f%%) on the canary; fast path served %d", canary, total, share, n)
		if share < 7 || share > 13 {
			t.Fatalf("canary share %.1f%%, want 7-13%%", share)
		}
		if fast && n < 1000 {
			t.Fatalf("the fast path served %d of the 1,000 requests", n)
		}
		for range 20 {
			a, err := canaryGet("/"+svc+"/x", http.Header{"X-Canary": {"yes"}})
			if err != nil || !strings.HasPrefix(a.body, svc+"-v2 ") {
				t.Fatalf("X-Canary: yes not on the canary: %q %v", a.body, err)
			}
		}
		// the dashboard's figures: every answer counted on its side
		c := canaryOf(t, svc)
		t.Logf("window: stable %d answers, canary %d; %d refused connections of starting replicas",
			c.Sides[0].Requests, c.Sides[1].Requests, c.Starting)
		if c.State != CanaryRunning || c.Weight != 10 || c.Sides[1].Requests < canary+20 || c.Sides[0].Requests < total-canary ||
			c.Sides[0].Requests+c.Sides[1].Requests > total+20+1 { // (+1: deployCanary's probe)
			t.Fatalf("status %+v", c)
		}
	})

	step("sticky by cookie: set once, then one version per client", func(t *testing.T) {
		svc := "ck-" + tag
		deployCanary(t, p, svc, false, nil, "gateway.canary.weight", "50", "gateway.canary.sticky", "cookie")
		onCanary := 0
		for client := range 100 {
			a, err := canaryGet("/"+svc+"/x", nil)
			if err != nil || a.status != 200 || !strings.HasPrefix(a.setCookie, CanaryCookie+"=") {
				t.Fatalf("client %d: %d %q cookie %q %v", client, a.status, a.body, a.setCookie, err)
			}
			first := strings.HasPrefix(a.body, svc+"-v2 ")
			if first {
				onCanary++
			}
			cookie := http.Header{"Cookie": {strings.SplitN(a.setCookie, ";", 2)[0]}}
			for range 5 {
				b, err := canaryGet("/"+svc+"/x", cookie)
				if err != nil || b.setCookie != "" || strings.HasPrefix(b.body, svc+"-v2 ") != first {
					t.Fatalf("client %d moved or got a new cookie: %q cookie %q %v", client, b.body, b.setCookie, err)
				}
			}
		}
		t.Logf("%d of 100 cookie clients on the canary at weight 50", onCanary)
		if onCanary < 30 || onCanary > 70 {
			t.Fatalf("%d of 100 clients on the canary at weight 50", onCanary)
		}
	})

	if !fast {
		step("sticky by subject", func(t *testing.T) {
			svc := "cs-" + tag
			deployCanary(t, p, svc, true, nil, "gateway.canary.weight", "30")
			podmantest.Eventually(t, "the route with jwt_auth", 20*time.Second, func() string {
				a, err := canaryGet("/"+svc+"/x", http.Header{"Authorization": {"Bearer " + token(t, "probe")}})
				if err != nil || a.status != 200 || !strings.HasPrefix(a.body, svc+"-v") {
					return fmt.Sprintf("%d %q %v", a.status, a.body, err)
				}
				return ""
			})
			onCanary := 0
			for i := range 100 {
				hdr := http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("user-%d", i))}}
				var first bool
				for j := range 4 {
					a, err := canaryGet("/"+svc+"/x", hdr)
					if err != nil || a.status != 200 || a.setCookie != "" {
						t.Fatalf("user-%d: %d %q cookie %q %v", i, a.status, a.body, a.setCookie, err)
					}
					c := strings.HasPrefix(a.body, svc+"-v2 ")
					if j == 0 {
						first = c
					} else if c != first {
						t.Fatalf("user-%d moved between versions", i)
					}
				}
				if first {
					onCanary++
				}
			}
			t.Logf("%d of 100 subjects on the canary at weight 30", onCanary)
			if onCanary < 15 || onCanary > 45 {
				t.Fatalf("%d of 100 subjects on the canary at weight 30", onCanary)
			}
		})
	}

	step("rollback: a canary answering 500s is taken out after min_requests", func(t *testing.T) {
		svc := "cr-" + tag
		before := rollbacksOf(t, svc)
		probe := int64(deployCanary(t, p, svc, false, []string{"--env", "STATUS=500"}, "gateway.canary.weight", "10", "gateway.canary.sticky", "none"))
		const workers = 4
		var sent, failed, fromCanary, errs atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		start := time.Now()
		var rolledAt atomic.Int64
		var firstErr atomic.Value
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() && sent.Load() < 6000 {
					a, err := canaryGet("/"+svc+"/x", nil)
					sent.Add(1)
					switch {
					case err != nil:
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case a.status != 200:
						failed.Add(1)
					}
					if strings.HasPrefix(a.body, svc+"-v2 ") {
						fromCanary.Add(1)
					}
				}
			}()
		}
		podmantest.Eventually(t, "rolled back", 60*time.Second, func() string {
			if c := canaryOf(t, svc); c != nil && c.State == CanaryRolledBack {
				rolledAt.CompareAndSwap(0, int64(time.Since(start)))
				return ""
			}
			return fmt.Sprintf("%d sent, %d failed", sent.Load(), failed.Load())
		})
		// keep going a while after the rollback: nothing more fails
		afterRollback := sent.Load()
		for sent.Load() < afterRollback+1000 {
			time.Sleep(10 * time.Millisecond)
		}
		stop.Store(true)
		wg.Wait()
		c := canaryOf(t, svc)
		t.Logf("%d requests, %d failed (all from the canary: %d answers), %d errors; rolled back after %s: %s",
			sent.Load(), failed.Load(), fromCanary.Load(), errs.Load(), time.Duration(rolledAt.Load()).Round(time.Millisecond), c.Reason)
		if errs.Load() != 0 || failed.Load() != fromCanary.Load() {
			t.Fatalf("%d errors (first: %v), %d failed but %d canary answers: a stable request failed", errs.Load(), firstErr.Load(), failed.Load(), fromCanary.Load())
		}
		// the window's answers when it broke the limit (deployCanary's
		// probe among them when the canary answered it), plus at most the
		// requests already on their way to the canary (one per worker)
		if f := failed.Load() + probe; f < DefaultCanaryMinRequests || f > DefaultCanaryMinRequests+workers-1 {
			t.Fatalf("%d failed answers (%d of them deployCanary's probe), want %d (min_requests) to %d",
				f, probe, DefaultCanaryMinRequests, DefaultCanaryMinRequests+workers-1)
		}
		if c.Weight != 0 || c.Sides[1].Requests != int(fromCanary.Load()+probe) {
			t.Fatalf("status %+v", c)
		}
		for range 200 {
			a, err := canaryGet("/"+svc+"/x", nil)
			if err != nil || a.status != 200 || !strings.HasPrefix(a.body, svc+"-v1") {
				t.Fatalf("after the rollback: %d %q %v", a.status, a.body, err)
			}
		}
		if got := rollbacksOf(t, svc) - before; got != 1 {
			t.Fatalf("gateway_canary_rollbacks_total{service=%q} rose by %v, want 1", svc, got)
		}
		podmantest.Eventually(t, "the audit event", 10*time.Second, func() string {
			evs := auditEvents(t, filepath.Join(dir, "audit.jsonl"), AuditCanaryRollback, svc)
			if len(evs) != 1 {
				return fmt.Sprintf("%d canary_rollback events", len(evs))
			}
			e := evs[0]
			if e["canary_version"] != "v2" || e["requests"] != float64(DefaultCanaryMinRequests) || e["error_rate"] != 100.0 ||
				e["weight_before"] != 10.0 || e["limit"] != "error_rate" {
				return fmt.Sprintf("event %v", e)
			}
			return ""
		})
	})

	if !fast {
		step("rollback on latency: P99 above max_p99", func(t *testing.T) {
			svc := "cl-" + tag
			slow := deployCanary(t, p, svc, false, []string{"--env", "DELAY=40ms"}, "gateway.canary.weight", "50",
				"gateway.canary.sticky", "none", "gateway.canary.min_requests", "20", "gateway.canary.max_p99", "20ms")
			podmantest.Eventually(t, "rolled back on p99", 60*time.Second, func() string {
				a, err := canaryGet("/"+svc+"/x", nil)
				if err != nil || a.status != 200 {
					t.Fatalf("%d %q %v", a.status, a.body, err)
				}
				if strings.HasPrefix(a.body, svc+"-v2 ") {
					slow++
				}
				if c := canaryOf(t, svc); c.State == CanaryRolledBack {
					if !strings.Contains(c.Reason, "p99") || c.Sides[1].Requests != 20 {
						t.Fatalf("status %+v", c)
					}
					return ""
				}
				return fmt.Sprintf("%d answers of the canary", slow)
			})
			if slow != 20 {
				t.Fatalf("%d answers of the slow canary (deployCanary's probe included), want min_requests (20)", slow)
			}
		})
	}

	step("promotion: a healthy canary reaches 100% in steps of 30 every 2s", func(t *testing.T) {
		svc := "cp-" + tag
		deployCanary(t, p, svc, false, nil, "gateway.canary.weight", "10", "gateway.canary.sticky", "none",
			"gateway.canary.step", "30", "gateway.canary.interval", "2s", "gateway.canary.min_requests", "10",
			"gateway.canary.window", "10s")
		start := time.Now()
		weights := []string{}
		last := 10
		var failedReq int
		podmantest.Eventually(t, "complete", 30*time.Second, func() string {
			for range 10 {
				if a, err := canaryGet("/"+svc+"/x", nil); err != nil || a.status != 200 {
					failedReq++
				}
			}
			c := canaryOf(t, svc)
			if c.Weight != last {
				last = c.Weight
				weights = append(weights, fmt.Sprintf("%d%% at %s", c.Weight, time.Since(start).Round(10*time.Millisecond)))
			}
			if c.State != CanaryComplete {
				return fmt.Sprintf("%s at %d%% (%s)", c.State, c.Weight, c.Waiting)
			}
			return ""
		})
		took := time.Since(start)
		t.Logf("weights: %s; complete after %s", strings.Join(weights, ", "), took.Round(10*time.Millisecond))
		if failedReq != 0 {
			t.Fatalf("%d requests failed during the promotion", failedReq)
		}
		if len(weights) != 3 || took > 3*2*time.Second+3*time.Second {
			t.Fatalf("steps %v in %s, want 3 steps of 2s", weights, took)
		}
		for range 50 {
			if a, err := canaryGet("/"+svc+"/x", nil); err != nil || !strings.HasPrefix(a.body, svc+"-v2 ") {
				t.Fatalf("after completion: %q %v", a.body, err)
			}
		}
		podmantest.Eventually(t, "the audit event", 10*time.Second, func() string {
			if evs := auditEvents(t, filepath.Join(dir, "audit.jsonl"), AuditCanaryPromoted, svc); len(evs) != 1 {
				return fmt.Sprintf("%d canary_promoted events", len(evs))
			}
			return ""
		})
	})

	step("bad canary labels: skipped, with the label named", func(t *testing.T) {
		svc := "cb-" + tag
		pt := freeport.Port(t)
		if err := p.Run(svc+"-v2", pt, canaryLabels(svc, "v2", pt, false, "gateway.canary.weight", "150")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "label error in the snapshot", 20*time.Second, func() string {
			for _, d := range snapshot(t).Containers {
				if d.Container.Name == p.Prefix+svc+"-v2" {
					if len(d.Errors) == 1 && d.Errors[0].Label == "gateway.canary.weight" && d.State == StateInvalid {
						return ""
					}
					return fmt.Sprintf("errors %v state %s", d.Errors, d.State)
				}
			}
			return "not discovered yet"
		})
	})
}
