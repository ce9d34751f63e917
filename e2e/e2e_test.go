package e2e

import (
	"bytes"

	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestDutyChain walks one route with every duty through the happy path and
// each denial, and checks that every request produced exactly one audit
// event, with the right decision, in both the webhook and NATS sinks.
//
// It runs in every variant, and on the fast path in its map mode, and
// compares, request by request, what the client got and the audit event
// between each fast run and Caddy's path (with the same transport).
func TestDutyChain(t *testing.T) {
	rec := &pathtest.Recorder{}
	for _, v := range append(variants, mapsOnlyVariant) {
		t.Run(v.name, func(t *testing.T) { testDutyChain(t, v, rec) })
	}
	rec.CompareNamed(t, "transport h1", "fast path")
	rec.CompareNamed(t, "transport h1", mapsOnlyVariant.name)
}

func testDutyChain(t *testing.T, v variant, rec *pathtest.Recorder) {
	s := newStack(t)
	s.use(v)
	s.permDeny.Store("carol", true)
	s.start()

	reader := []string{"reader"}
	expired := s.token("alice", reader, -time.Minute, nil)
	type want struct {
		status   int
		decision string
		reason   string // substring of the audit reason, "" = any
	}
	cases := []struct {
		name   string
		path   string
		token  string
		header http.Header
		want   want
	}{
		{"allowed", "/api/chain/allowed", s.token("alice", reader, time.Hour, nil), nil, want{200, "allow", ""}},
		{"no token", "/api/chain/notoken", "", nil, want{401, "deny", ""}},
		{"expired token", "/api/chain/expired", expired, nil, want{401, "deny", "expired"}},
		{"garbage token", "/api/chain/garbage", "not.a.token", nil, want{401, "deny", ""}},
		{"missing role", "/api/chain/norole", s.token("bob", []string{"guest"}, time.Hour, nil), nil, want{403, "deny", "role"}},
		{"permission denied", "/api/chain/permdeny", s.token("carol", reader, time.Hour, nil), nil, want{403, "deny", "permission"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, "GET", tc.path, tc.token, tc.header)
			rec.AddNamed(v.name, tc.path, clientSaw(resp, body))
			if resp.StatusCode != tc.want.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.want.status, body)
			}
			switch resp.StatusCode {
			case 401:
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without a Bearer challenge: %q", resp.Header.Get("WWW-Authenticate"))
				}
				if tc.token == "" && strings.Contains(resp.Header.Get("WWW-Authenticate"), "error=") {
					t.Errorf("no-token 401 must not carry an error code (RFC 6750): %q", resp.Header.Get("WWW-Authenticate"))
				}
			case 403:
				if !strings.Contains(body, `"error":"forbidden"`) {
					t.Errorf("403 body %s lacks the contract's error", body)
				}
			}
		})
	}

	t.Run("claims forwarded, spoofed header and token removed", func(t *testing.T) {
		for len(s.upHeads) > 0 {
			<-s.upHeads
		}
		h := http.Header{"X-User-Id": {"admin"}, "X-User-Roles": {"admin"}}
		resp, body := do(t, "GET", "/api/chain/forward", s.token("alice", reader, time.Hour, nil), h)
		rec.AddNamed(v.name, "/api/chain/forward", clientSaw(resp, body))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := <-s.upHeads
		up := got.Clone()
		up.Del("X-Forwarded-For") // (the same on both)
		rec.AddNamed(v.name, "/api/chain/forward upstream", up)
		if v := got.Values("X-User-Id"); len(v) != 1 || v[0] != "alice" {
			t.Errorf("upstream X-User-Id = %q, want only alice", v)
		}
		if v := got.Values("X-User-Roles"); len(v) != 1 || v[0] != "reader" {
			t.Errorf("upstream X-User-Roles = %q, want only reader", v)
		}
		if a := got.Get("Authorization"); a != "" {
			t.Errorf("strip_token: upstream still got Authorization %q", a)
		}
	})

	t.Run("rate limit per user", func(t *testing.T) {
		tok := s.token("dave", reader, time.Hour, nil)
		for i := 1; i <= 5; i++ {
			resp, body := do(t, "GET", fmt.Sprintf("/api/ratelimit/%d", i), tok, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
			}
		}
		resp, body := do(t, "GET", "/api/ratelimit/6", tok, nil)
		rec.AddNamed(v.name, "/api/ratelimit/6", clientSaw(resp, body))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("6th request in the window: status %d, want 429", resp.StatusCode)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		// another user is not limited by dave
		resp, _ = do(t, "GET", "/api/ratelimit-other/1", s.token("erin", reader, time.Hour, nil), nil)
		if resp.StatusCode != 200 {
			t.Errorf("second user: status %d, want 200", resp.StatusCode)
		}
	})

	// every request above produced exactly one event in each sink
	expect := map[string]want{}
	for _, tc := range cases {
		expect[tc.path] = tc.want
	}
	expect["/api/chain/forward"] = want{200, "allow", ""}
	for i := 1; i <= 5; i++ {
		expect[fmt.Sprintf("/api/ratelimit/%d", i)] = want{200, "allow", ""}
	}
	expect["/api/ratelimit/6"] = want{429, "deny", "rate"}
	expect["/api/ratelimit-other/1"] = want{200, "allow", ""}
	for sinkName, log := range map[string]*eventLog{"webhook": s.webhook, "nats": s.natsLog} {
		t.Run("audit via "+sinkName, func(t *testing.T) {
			evs := log.waitPath(t, "/api/", len(expect), 20*time.Second)
			perPath := map[string]int{}
			for _, e := range evs {
				perPath[e.Path]++
				w, ok := expect[e.Path]
				if !ok {
					t.Errorf("unexpected event for %s", e.Path)
					continue
				}
				if e.Status != w.status || e.Decision != w.decision {
					t.Errorf("%s: event status %d decision %q, want %d %q", e.Path, e.Status, e.Decision, w.status, w.decision)
				}
				if w.reason != "" && !strings.Contains(strings.ToLower(e.Reason), w.reason) {
					t.Errorf("%s: event reason %q lacks %q", e.Path, e.Reason, w.reason)
				}
				if e.RequestID == "" || e.Method != "GET" || e.Time == "" {
					t.Errorf("%s: incomplete event %+v", e.Path, e)
				}
				if e.Status == 200 && e.Subject == "" {
					t.Errorf("%s: allowed event without subject", e.Path)
				}
				if strings.Contains(e.Reason, "eyJ") {
					t.Errorf("%s: reason looks like it carries a token: %q", e.Path, e.Reason)
				}
			}
			for p := range expect {
				if perPath[p] != 1 {
					t.Errorf("%s: %d events, want exactly 1", p, perPath[p])
				}
			}
			for _, e := range evs {
				e.Time, e.RequestID, e.DurationMS = "", "", 0
				rec.AddNamed(v.name, sinkName+" event "+e.Path, e)
			}
			if log.copies != 0 {
				t.Errorf("%d duplicate deliveries without any fault", log.copies)
			}
		})
	}
}

// TestHostileInput sends what attackers send; each gets a fast 4xx or a
// response that stays within its route, and the gateway keeps serving.
func TestHostileInput(t *testing.T) {
	s := newStack(t)
	s.start()
	noRole := s.token("mallory", []string{"guest"}, time.Hour, nil)

	t.Run("oversized and absurd tokens", func(t *testing.T) {
		claims := map[string]any{}
		for i := 0; i < 10000; i++ {
			claims[fmt.Sprintf("c%d", i)] = i
		}
		deep := strings.Repeat("[", 3000) + strings.Repeat("]", 3000)
		cases := []struct{ name, token string }{
			{"1 MB token", strings.Repeat("a", 1<<20)},
			{"10000 claims", s.token("mallory", []string{"reader"}, time.Hour, claims)},
			{"deep nesting", "eyJhbGciOiJSUzI1NiJ9." + b64(`{"sub":"x","n":`+deep+`}`) + ".c2ln"},
			{"many dots", strings.Repeat(".", 5000)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				start := time.Now()
				req, _ := http.NewRequest("GET", gwBase+"/api/hostile/token", nil)
				req.Header.Set("Authorization", "Bearer "+tc.token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("request failed: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 400 || resp.StatusCode >= 500 {
					t.Errorf("status %d, want a 4xx", resp.StatusCode)
				}
				t.Logf("%s: %d in %s", tc.name, resp.StatusCode, time.Since(start))
			})
		}
	})

	t.Run("header flood", func(t *testing.T) {
		req, _ := http.NewRequest("GET", gwBase+"/api/hostile/flood", nil)
		for i := 0; i < 5000; i++ {
			req.Header.Add(fmt.Sprintf("X-Flood-%d", i), strings.Repeat("v", 200))
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Errorf("status %d, want a 4xx", resp.StatusCode)
			}
		}
	})

	t.Run("path tricks stay within their route", func(t *testing.T) {
		// /bulk/* only authenticates; /api/* also checks roles. No trick
		// may reach an /api path upstream through the weaker route, or
		// /api without the role.
		paths := []string{
			"/bulk/../api/orders/1",
			"/bulk/%2e%2e/api/orders/1",
			"/bulk/%2E%2E/api/orders/1",
			"/bulk/..%2fapi/orders/1",
			"/bulk/..%2Fapi/orders/1",
			"//api/orders/1",
			"/API/orders/1",
			"/Api/orders/1",
			"/api%2forders/1",
			"/bulk/./../api/orders/1",
			"/bulk//..//api/orders/1",
		}
		for _, p := range paths {
			t.Run(p, func(t *testing.T) {
				resp, body := rawGet(t, p, noRole)
				if resp.StatusCode != 200 {
					return // denied or not found: fine
				}
				var up struct {
					Path string `json:"path"`
				}
				if err := jsonUnmarshal(body, &up); err != nil {
					t.Fatalf("200 with a body not from the upstream: %s", body)
				}
				clean := strings.ToLower(path.Clean(up.Path))
				if !strings.HasPrefix(clean, "/bulk/") {
					t.Errorf("a token without the role reached upstream path %q (clean %q) with 200", up.Path, clean)
				}
			})
		}
	})

	t.Run("slow and oversized permission answers are cut off", func(t *testing.T) {
		for name, h := range map[string]http.HandlerFunc{
			"slow": func(w http.ResponseWriter, r *http.Request) { time.Sleep(3 * time.Second); w.WriteHeader(200) },
			"huge": func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(200)
				w.Write([]byte(`{"allow":true,"pad":"`))
				chunk := bytes.Repeat([]byte("x"), 64<<10)
				for i := 0; i < 160; i++ { // 10 MB
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
				w.Write([]byte(`"}`))
			},
		} {
			t.Run(name, func(t *testing.T) {
				s.perm.set(h)
				defer s.perm.set(s.permission)
				start := time.Now()
				resp, body := do(t, "GET", "/api/hostile/perm-"+name, s.token("perm-"+name, []string{"reader"}, time.Hour, nil), nil)
				took := time.Since(start)
				t.Logf("%s permission answer: %d in %s: %s", name, resp.StatusCode, took, body)
				if name == "slow" && resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("slow service: status %d, want 503 (on_error deny)", resp.StatusCode)
				}
				if took > 2500*time.Millisecond {
					t.Errorf("took %s: the 500ms timeout did not cut the call off", took)
				}
			})
		}
	})

	// still serving
	resp, body := do(t, "GET", "/api/hostile/after", s.token("alice", []string{"reader"}, time.Hour, nil), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("after hostile input: %d %s", resp.StatusCode, body)
	}
}

// TestFaults takes each peer down in turn; the gateway keeps serving and
// loses no audit event.
func TestFaults(t *testing.T) {
	s := newStack(t)
	s.start()
	alice := s.token("alice", []string{"reader"}, time.Hour, nil)

	t.Run("JWKS server down: known keys keep working", func(t *testing.T) {
		if resp, _ := do(t, "GET", "/api/faults/jwks-before", alice, nil); resp.StatusCode != 200 {
			t.Fatalf("before: %d", resp.StatusCode)
		}
		s.jwks.down()
		defer s.jwks.up(t)
		fresh := s.token("frank", []string{"reader"}, time.Hour, nil) // same kid, new token: a cache miss
		if resp, body := do(t, "GET", "/api/faults/jwks-down", fresh, nil); resp.StatusCode != 200 {
			t.Fatalf("JWKS down, known kid: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("permission service down: cached decisions served, new ones denied", func(t *testing.T) {
		grace := s.token("grace", []string{"reader"}, time.Hour, nil)
		if resp, _ := do(t, "GET", "/api/faults/perm", grace, nil); resp.StatusCode != 200 {
			t.Fatalf("before: %d", resp.StatusCode)
		}
		s.perm.down()
		defer s.perm.up(t)
		if resp, body := do(t, "GET", "/api/faults/perm", grace, nil); resp.StatusCode != 200 {
			t.Errorf("cached decision with the service down: %d %s", resp.StatusCode, body)
		}
		heidi := s.token("heidi", []string{"reader"}, time.Hour, nil)
		resp, body := do(t, "GET", "/api/faults/perm", heidi, nil)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("uncached decision with the service down: %d %s, want 503", resp.StatusCode, body)
		}
	})

	t.Run("audit receiver and NATS down under load: every event delivered after recovery", func(t *testing.T) {
		s.recvDown.Store(true)
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
		n := load(t, "/bulk/outage/", alice, 20, 600)
		time.Sleep(300 * time.Millisecond)
		s.recvDown.Store(false)
		s.restartNATS()
		s.webhook.waitPath(t, "/bulk/outage/", n, 60*time.Second)
		s.natsLog.waitPath(t, "/bulk/outage/", n, 60*time.Second)
	})

	t.Run("SIGKILL under load: spooled events come back after restart", func(t *testing.T) {
		s.recvDown.Store(true)
		n := load(t, "/bulk/crash/", alice, 20, 800)
		time.Sleep(500 * time.Millisecond) // let the queues spill to the spool
		s.stop(true)
		s.recvDown.Store(false)
		s.start()
		// Events still in a sink's memory queue (queue_size 256) or in the
		// batch being sent (batch_size 50) when the process is killed die
		// with it; everything that overflowed to the spool must come back.
		got := s.webhook.waitPath(t, "/bulk/crash/", n-256-50, 60*time.Second)
		t.Logf("SIGKILL: %d of %d events delivered after restart (at most queue_size 256 + batch_size 50 may die with the process)", len(got), n)
	})
}

// TestSIGKILLDiskDurability kills the gateway (SIGKILL) while 300
// connections send requests and the audit receiver is down; after a
// restart, every request that received a response has its event
// delivered, to the webhook and to JetStream (durability disk).
func TestSIGKILLDiskDurability(t *testing.T) {
	for _, v := range variants[1:] {
		t.Run(v.name, func(t *testing.T) { testSIGKILLDiskDurability(t, v) })
	}
}

func testSIGKILLDiskDurability(t *testing.T, v variant) {
	s := newStack(t)
	s.use(v)
	s.durability = "disk"
	s.start()
	tok := s.token("crash", []string{"reader"}, time.Hour, nil)
	s.recvDown.Store(true)

	var answered sync.Map // path -> true, for each 200 response
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 300, MaxConnsPerHost: 300}, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for c := 0; c < 300; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				path := fmt.Sprintf("/bulk/kill/%d-%d", c, i)
				req, _ := http.NewRequest("GET", gwBase+path, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == 200 {
					answered.Store(path, true)
					n.Add(1)
				}
			}
		}(c)
	}
	// Kill mid-load, once a good number of requests were answered.
	deadline := time.Now().Add(30 * time.Second)
	for n.Load() < 3000 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	s.stop(true)
	cancel()
	wg.Wait()
	total := int(n.Load())
	if total == 0 {
		t.Fatal("no request answered before the kill")
	}
	s.recvDown.Store(false)
	s.start()

	paths := map[string]bool{}
	answered.Range(func(k, _ any) bool { paths[k.(string)] = true; return true })
	for name, log := range map[string]*eventLog{"webhook": s.webhook, "JetStream": s.natsLog} {
		deadline := time.Now().Add(90 * time.Second)
		var missing []string
		for {
			got := map[string]bool{}
			for _, e := range log.byPath("/bulk/kill/") {
				got[e.Path] = true
			}
			missing = missing[:0]
			for p := range paths {
				if !got[p] {
					missing = append(missing, p)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(missing) > 0 {
			t.Errorf("%s: %d of %d answered requests have no event after SIGKILL and restart (durability disk); e.g. %v",
				name, len(missing), total, missing[:min(5, len(missing))])
		} else {
			t.Logf("%s: all %d answered requests have their event after SIGKILL under load at 300 connections", name, total)
		}
	}
}

// TestReloadUnderLoad reloads the config ten times through the admin API
// while 300 connections send requests; no client request may fail.
func TestReloadUnderLoad(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { testReloadUnderLoad(t, v) })
	}
}

func testReloadUnderLoad(t *testing.T, v variant) {
	s := newStack(t)
	s.use(v)
	s.start()
	tok := s.token("loader", []string{"reader"}, time.Hour, nil)
	ld := startLoad(tok, "/bulk/reload", 300)
	base := s.caddyfile()
	reloads := 10
	if v := os.Getenv("E2E_RELOADS"); v != "" {
		reloads, _ = strconv.Atoi(v)
	}
	for i := 0; i < reloads; i++ {
		time.Sleep(500 * time.Millisecond)
		cfg := strings.Replace(base, "handle {", fmt.Sprintf("handle /reload-%d {\n\t\trespond \"v%d\"\n\t}\n\thandle {", i, i), 1)
		req, _ := http.NewRequest("POST", "http://"+adminAddr+"/load", strings.NewReader(cfg))
		req.Header.Set("Content-Type", "text/caddyfile")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("reload %d: %d %s", i, resp.StatusCode, body)
		}
		if r, b := do(t, "GET", fmt.Sprintf("/reload-%d", i), "", nil); r.StatusCode != 200 || b != fmt.Sprintf("v%d", i) {
			t.Fatalf("reload %d not serving: %d %q", i, r.StatusCode, b)
		}
	}
	time.Sleep(500 * time.Millisecond)
	r := ld.stop()
	t.Logf("reload under load: %d requests, %d succeeded, %d wrong answers, %d connection errors (%d on reused connections; first: %v), over %d reloads at 300 connections",
		r.total(), r.ok, r.wrong, r.connErrs, r.reusedErrs, r.firstErr, reloads)
	// Caddy binds each config's listener with SO_REUSEPORT; when a reload
	// closes the old socket, Linux resets the connections still in its
	// accept queue unless net.ipv4.tcp_migrate_req=1 moves them to the new
	// socket (docs/operations.md; scripts/test sets it as root). check
	// fails on any wrong answer and any failure on a kept-alive
	// connection; it allows up to 5% connection errors on new
	// connections, which machines saturated by other test suites showed
	// (up to 2.7%; 0 on a quiet machine and under CPU stress alone).
	if !migrateReq() {
		t.Logf("!!! net.ipv4.tcp_migrate_req=0: connections queued on the old listener at a reload are reset; set it to 1 (docs/operations.md)")
	}
	r.check(t)
}

// load sends n requests to prefix+<i> with `workers` concurrent clients and
// returns how many got a response (any status).
func load(t testing.TB, prefix, token string, workers, n int) int {
	t.Helper()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s%s%d", gwBase, prefix, i), nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(done.Load())
}

// migrateReq reports whether Linux migrates queued connections of a closed
// SO_REUSEPORT listener to another listener of the group.
func migrateReq() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
