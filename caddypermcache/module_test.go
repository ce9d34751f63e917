package caddypermcache

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

// permService is a real HTTP permission service that counts its calls.
// By default it allows paths that start with /allow and denies the rest.
type permService struct {
	*httptest.Server
	calls  atomic.Int64
	mu     sync.Mutex
	reqs   []CheckRequest
	answer func(w http.ResponseWriter, r *http.Request, req CheckRequest)
}

func newPermService(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, req CheckRequest)) *permService {
	t.Helper()
	s := &permService{answer: answer}
	if s.answer == nil {
		s.answer = func(w http.ResponseWriter, _ *http.Request, req CheckRequest) {
			if !strings.HasPrefix(req.Path, "/allow") {
				w.WriteHeader(http.StatusForbidden)
			}
		}
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		var req CheckRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("permission service: bad request body: %v", err)
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		s.answer(w, r, req)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *permService) lastRequest() CheckRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return CheckRequest{}
	}
	return s.reqs[len(s.reqs)-1]
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

type fakeClock struct{ atomic.Int64 }

func (c *fakeClock) advance(d time.Duration) { c.Add(int64(d)) }

func dur(d time.Duration) *caddy.Duration { cd := caddy.Duration(d); return &cd }

// newHandler provisions a handler against svc with a fake clock. Its route
// is the test's name, so its metrics are its own.
func newHandler(t *testing.T, svc *permService, configure func(h *Handler)) (*Handler, *fakeClock) {
	t.Helper()
	// a long timeout: the machine running the tests may be slow
	h := &Handler{URL: svc.URL + "/check", Route: t.Name(), Timeout: caddy.Duration(time.Minute)}
	if configure != nil {
		configure(h)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		cancel()
	})
	clk := &fakeClock{}
	clk.Store(1)
	h.shared.clock = clk.Load
	return h, clk
}

type reqOpt func(r *http.Request)

func withIdentity(sub string, claims map[string]any) reqOpt {
	return func(r *http.Request) {
		identity.Set(r, &identity.Identity{Subject: sub, Claims: claims})
	}
}

func withRoles(roles ...string) reqOpt {
	return func(r *http.Request) { identity.SetRoles(r, roles) }
}

// newRequest builds a request as Caddy hands it to a handler: with the vars
// table and a replacer in its context.
func newRequest(method, target string, opts ...reqOpt) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
	for _, o := range opts {
		o(r)
	}
	return r
}

var nextOK = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	_, err := w.Write([]byte("next"))
	return err
})

type result struct {
	status      int
	body        string
	deniedBy    string
	denyReason  string
	contentType string
}

func serve(t testing.TB, h *Handler, r *http.Request) result {
	t.Helper()
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, nextOK); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	by, reason := identity.Denial(r)
	body := w.Body.String()
	if w.Header().Get("Content-Type") == problemtest.ContentType {
		// a refusal: recorded as its members from before problem+json
		// when it is the problem with them
		var m struct{ Error, Reason string }
		_ = json.Unmarshal(w.Body.Bytes(), &m)
		legacy, _ := json.Marshal(map[string]string{"error": m.Error, "reason": m.Reason})
		if problemtest.Extends(body, w.Code, string(legacy), r.URL.Path) == nil {
			body = string(legacy) + "\n"
		}
	}
	return result{w.Code, body, by, reason, w.Header().Get("Content-Type")}
}

var (
	allowed = result{status: 200, body: "next", contentType: "text/plain; charset=utf-8"}
	denied  = result{status: 403, body: deniedBody, deniedBy: "permission", denyReason: "permission denied", contentType: problemtest.ContentType}
	unavail = result{status: 503, body: unavailableBody, deniedBy: "permission", denyReason: "permission service unavailable", contentType: problemtest.ContentType}
)

func expect(t *testing.T, got, want result) {
	t.Helper()
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func expectCalls(t *testing.T, svc *permService, want int64) {
	t.Helper()
	if n := svc.calls.Load(); n != want {
		t.Fatalf("permission service got %d calls, want %d", n, want)
	}
}

func TestAllowAndDenyAreCached(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, nil)
	steps := []struct {
		name  string
		sub   string
		path  string
		want  result
		calls int64
	}{
		{"allow asks", "alice", "/allow/1", allowed, 1},
		{"allow cached", "alice", "/allow/1", allowed, 1},
		{"deny asks", "alice", "/secret", denied, 2},
		{"deny cached", "alice", "/secret", denied, 2},
		{"other subject asks", "bob", "/allow/1", allowed, 3},
		{"anonymous asks", "", "/allow/1", allowed, 4},
		{"anonymous cached", "", "/allow/1", allowed, 4},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var opts []reqOpt
			if st.sub != "" {
				opts = append(opts, withIdentity(st.sub, nil))
			}
			expect(t, serve(t, h, newRequest("GET", st.path, opts...)), st.want)
			expectCalls(t, svc, st.calls)
		})
	}
	if a, d := routeHits(t.Name()); a != 2 || d != 1 {
		t.Errorf("hits = %d allow, %d deny; want 2, 1", a, d)
	}
	if misses := counterValue(missesVec.WithLabelValues(t.Name())); misses != 4 {
		t.Errorf("misses metric = %v, want 4", misses)
	}
	var m dto.Metric
	if err := latencyVec.WithLabelValues(t.Name()).(prometheus.Histogram).Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 4 {
		t.Errorf("latency histogram has %d samples (%v), want 4", m.GetHistogram().GetSampleCount(), err)
	}
}

func TestRequestBody(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, func(h *Handler) { h.RolesClaim = "realm_access.roles"; h.Route = "orders" })
	claims := map[string]any{"realm_access": map[string]any{"roles": []any{"admin", "editor"}}}
	tests := []struct {
		name string
		req  *http.Request
		want CheckRequest
	}{
		{"roles from the claim", newRequest("POST", "http://api.example:8443/allow/a", withIdentity("alice", claims)),
			CheckRequest{Subject: "alice", Roles: []string{"admin", "editor"}, Method: "POST", Host: "api.example", Path: "/allow/a", Route: "orders"}},
		{"roles from rbac win", newRequest("GET", "http://api.example/allow/b", withIdentity("alice", claims), withRoles("billing")),
			CheckRequest{Subject: "alice", Roles: []string{"billing"}, Method: "GET", Host: "api.example", Path: "/allow/b", Route: "orders"}},
		{"claim of the wrong type", newRequest("GET", "http://api.example/allow/c", withIdentity("bob", map[string]any{"realm_access": map[string]any{"roles": 3.0}})),
			CheckRequest{Subject: "bob", Roles: []string{}, Method: "GET", Host: "api.example", Path: "/allow/c", Route: "orders"}},
		{"anonymous", newRequest("DELETE", "http://[::1]:80/allow/d"),
			CheckRequest{Subject: "", Roles: []string{}, Method: "DELETE", Host: "::1", Path: "/allow/d", Route: "orders"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, serve(t, h, tc.req), allowed)
			if got := svc.lastRequest(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("service got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestJSONAnswer(t *testing.T) {
	svc := newPermService(t, func(w http.ResponseWriter, _ *http.Request, req CheckRequest) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"allow":%v}`, req.Subject == "alice")
	})
	h, _ := newHandler(t, svc, nil)
	expect(t, serve(t, h, newRequest("GET", "/x", withIdentity("alice", nil))), allowed)
	expect(t, serve(t, h, newRequest("GET", "/x", withIdentity("mallory", nil))), denied)
}

func TestTTLs(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		answer string // Cache-Control from the service
		want   result
		// the decision is still cached at fresh and asked again at expired
		fresh, expired time.Duration
	}{
		{"allow uses cache_ttl", "/allow", "", allowed, 59 * time.Second, 60 * time.Second},
		{"deny uses negative_ttl", "/deny", "", denied, 9 * time.Second, 10 * time.Second},
		{"max-age overrides cache_ttl", "/allow", "max-age=2", allowed, 1 * time.Second, 2 * time.Second},
		{"max-age overrides negative_ttl", "/deny", "max-age=120", denied, 119 * time.Second, 120 * time.Second},
		{"max-age=0 does not cache", "/allow", "max-age=0", allowed, -1, 0},
		{"no-store does not cache", "/deny", "no-store", denied, -1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := newPermService(t, func(w http.ResponseWriter, _ *http.Request, req CheckRequest) {
				if tc.answer != "" {
					w.Header().Set("Cache-Control", tc.answer)
				}
				if req.Path != "/allow" {
					w.WriteHeader(http.StatusForbidden)
				}
			})
			h, clk := newHandler(t, svc, func(h *Handler) {
				h.CacheTTL = dur(60 * time.Second)
				h.NegativeTTL = dur(10 * time.Second)
			})
			start := clk.Load()
			expect(t, serve(t, h, newRequest("GET", tc.path)), tc.want)
			expectCalls(t, svc, 1)
			calls := int64(1)
			if tc.fresh >= 0 {
				clk.Store(start + int64(tc.fresh))
				expect(t, serve(t, h, newRequest("GET", tc.path)), tc.want)
				expectCalls(t, svc, 1)
			}
			clk.Store(start + int64(tc.expired))
			expect(t, serve(t, h, newRequest("GET", tc.path)), tc.want)
			expectCalls(t, svc, calls+1)
		})
	}
}

func TestZeroTTLDisablesCaching(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, func(h *Handler) { h.CacheTTL = dur(0); h.NegativeTTL = dur(0) })
	for i := 1; i <= 3; i++ {
		expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
		expect(t, serve(t, h, newRequest("GET", "/deny")), denied)
		expectCalls(t, svc, int64(2*i))
	}
}

func TestEvictionAtSizeBound(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, func(h *Handler) { h.CacheSize = 3 })
	for i := 0; i < 5; i++ {
		serve(t, h, newRequest("GET", fmt.Sprintf("/allow/%d", i)))
	}
	expectCalls(t, svc, 5)
	if n := h.shared.cache.Len(); n != 3 {
		t.Fatalf("cache holds %d decisions, want the bound 3", n)
	}
	// the newest are cached, the oldest were evicted
	serve(t, h, newRequest("GET", "/allow/4"))
	expectCalls(t, svc, 5)
	serve(t, h, newRequest("GET", "/allow/0"))
	expectCalls(t, svc, 6)
}

func TestSingleflight(t *testing.T) {
	release := make(chan struct{})
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, _ CheckRequest) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	h, _ := newHandler(t, svc, func(h *Handler) { h.Timeout = caddy.Duration(time.Minute) })
	const n = 100
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- serve(t, h, newRequest("GET", "/allow/one", withIdentity("alice", nil)))
		}()
	}
	// wait until every request missed the cache (and so joined the call)
	misses := missesVec.WithLabelValues(t.Name())
	deadline := time.Now().Add(30 * time.Second)
	for counterValue(misses) < n {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("only %v of %d requests reached the permission check", counterValue(misses), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(results)
	for res := range results {
		expect(t, res, allowed)
	}
	expectCalls(t, svc, 1)
}

func TestServiceFailures(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request, _ CheckRequest) { <-r.Context().Done() }
	status := func(code int) func(w http.ResponseWriter, r *http.Request, _ CheckRequest) {
		return func(w http.ResponseWriter, r *http.Request, _ CheckRequest) { w.WriteHeader(code) }
	}
	tests := []struct {
		name    string
		answer  func(w http.ResponseWriter, r *http.Request, req CheckRequest)
		timeout time.Duration
		onError string
		want    result
	}{
		{"timeout, on_error deny", hang, 50 * time.Millisecond, "deny", unavail},
		{"timeout, on_error allow", hang, 50 * time.Millisecond, "allow", allowed},
		{"default on_error is deny", hang, 50 * time.Millisecond, "", unavail},
		{"500, on_error deny", status(500), time.Minute, "deny", unavail},
		{"500, on_error allow", status(500), time.Minute, "allow", allowed},
		{"401 is an error too", status(401), time.Minute, "deny", unavail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := newPermService(t, tc.answer)
			h, _ := newHandler(t, svc, func(h *Handler) {
				h.Timeout = caddy.Duration(tc.timeout)
				h.OnError = tc.onError
			})
			expect(t, serve(t, h, newRequest("GET", "/allow")), tc.want)
			// failures are not cached
			expect(t, serve(t, h, newRequest("GET", "/allow")), tc.want)
			if tc.timeout == time.Minute {
				// (a timed-out call may not have reached the service yet)
				expectCalls(t, svc, 2)
			}
			if e := counterValue(errorsVec.WithLabelValues(t.Name())); e != 2 {
				t.Fatalf("service errors metric = %v, want 2", e)
			}
		})
	}
}

func TestStaleIfError(t *testing.T) {
	var down atomic.Bool
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, req CheckRequest) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if req.Path != "/allow" {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	h, clk := newHandler(t, svc, func(h *Handler) {
		h.CacheTTL = dur(time.Minute)
		h.NegativeTTL = dur(10 * time.Second)
		h.StaleIfError = caddy.Duration(5 * time.Minute)
	})
	start := clk.Load()
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	expect(t, serve(t, h, newRequest("GET", "/deny")), denied)
	down.Store(true)

	clk.Store(start + int64(time.Minute+4*time.Minute)) // both expired, within the stale window
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	expect(t, serve(t, h, newRequest("GET", "/deny")), denied)
	if s := counterValue(staleVec.WithLabelValues(t.Name())); s != 2 {
		t.Fatalf("stale serves metric = %v, want 2", s)
	}
	expect(t, serve(t, h, newRequest("GET", "/other")), unavail) // nothing to serve

	clk.Store(start + int64(time.Minute+5*time.Minute)) // past the allow's stale window
	expect(t, serve(t, h, newRequest("GET", "/allow")), unavail)

	// back up: a fresh answer replaces the stale one
	down.Store(false)
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	calls := svc.calls.Load()
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	expectCalls(t, svc, calls)
}

func TestServiceUnreachable(t *testing.T) {
	svc := newPermService(t, nil)
	h, clk := newHandler(t, svc, func(h *Handler) { h.StaleIfError = caddy.Duration(time.Hour) })
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	svc.Close() // the service is gone: connections are refused
	clk.advance(2 * time.Minute)
	expect(t, serve(t, h, newRequest("GET", "/allow")), allowed)
	expect(t, serve(t, h, newRequest("GET", "/allow/new")), unavail)
}

func TestKeyFromPlaceholders(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, func(h *Handler) {
		h.Key = "{http.request.header.X-Tenant} {http.request.host} {http.request.method}"
	})
	req := func(tenant, host, path string) *http.Request {
		r := newRequest("GET", "http://"+host+path)
		r.Header.Set("X-Tenant", tenant)
		return r
	}
	expect(t, serve(t, h, req("t1", "a.example", "/allow/1")), allowed)
	expect(t, serve(t, h, req("t1", "a.example:8080", "/deny")), allowed) // same key: path is not in it
	expectCalls(t, svc, 1)
	expect(t, serve(t, h, req("t2", "a.example", "/deny")), denied)
	expectCalls(t, svc, 2)
}

func TestReloadKeepsCache(t *testing.T) {
	svc := newPermService(t, nil)
	h1, _ := newHandler(t, svc, nil)
	expect(t, serve(t, h1, newRequest("GET", "/allow")), allowed)
	// a second config with the same permission settings: Caddy provisions
	// the new handler before it cleans up the old one
	h2 := &Handler{URL: svc.URL + "/check", Route: t.Name(), OnError: "allow", Timeout: caddy.Duration(time.Minute)}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h2.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer h2.Cleanup()
	if err := h1.Cleanup(); err != nil {
		t.Fatal(err)
	}
	h1.shared = h2.shared // keep newHandler's cleanup harmless
	if h2.shared.cache.Len() != 1 {
		t.Fatalf("new config sees %d cached decisions, want 1", h2.shared.cache.Len())
	}
	expect(t, serve(t, h2, newRequest("GET", "/allow")), allowed)
	expectCalls(t, svc, 1)
}

func TestClientGoneDoesNotFailOthers(t *testing.T) {
	release := make(chan struct{})
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, _ CheckRequest) {
		<-release
	})
	h, _ := newHandler(t, svc, func(h *Handler) { h.Timeout = caddy.Duration(time.Minute) })
	ctx, cancel := context.WithCancel(context.Background())
	gone := httptest.NewRequest("GET", "/allow", nil).WithContext(ctx)
	gone = caddyhttp.PrepareRequest(gone, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
	errc := make(chan error, 1)
	go func() { errc <- h.ServeHTTP(httptest.NewRecorder(), gone, nextOK) }()
	deadline := time.Now().Add(30 * time.Second)
	for svc.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	err := <-errc
	if herr, ok := err.(caddyhttp.HandlerError); !ok || herr.StatusCode != 499 {
		t.Fatalf("gone client: err = %v, want a 499 handler error", err)
	}
	done := make(chan result, 1)
	go func() { done <- serve(t, h, newRequest("GET", "/allow")) }()
	close(release)
	expect(t, <-done, allowed)
	expectCalls(t, svc, 1)
}

// benchHandler returns a handler whose cache holds decisions for nKeys
// subjects on one path, and requests for them.
func benchHandler(b *testing.B, nKeys int) (*Handler, []*http.Request) {
	svc := &permService{}
	svc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	b.Cleanup(svc.Close)
	h := &Handler{URL: svc.URL, Route: b.Name()}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Cleanup() })
	h.logger = zap.NewNop() // the test context logs at debug level
	reqs := make([]*http.Request, nKeys)
	for i := range reqs {
		reqs[i] = newRequest("GET", "/orders/42", withIdentity(fmt.Sprintf("user-%d", i), nil))
		if res := serve(b, h, reqs[i]); res.status != 200 {
			b.Fatalf("warm-up: %+v", res)
		}
	}
	return h, reqs
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

var nextNop = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

// BenchmarkServeHTTPHit is the hot path: identity lookup, key building,
// cache lookup, metrics, next handler.
func BenchmarkServeHTTPHit(b *testing.B) {
	h, reqs := benchHandler(b, 1000)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.ServeHTTP(w, reqs[i%len(reqs)], nextNop); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkServeHTTPHitParallel(b *testing.B) {
	h, reqs := benchHandler(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		i := int(seq.Add(1)) * 131
		for pb.Next() {
			if err := h.ServeHTTP(w, reqs[i%len(reqs)], nextNop); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func BenchmarkServeHTTPMiss(b *testing.B) {
	h, reqs := benchHandler(b, 1)
	h.ttl = 0 // every request asks the service
	h.shared.cache.Purge()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.ServeHTTP(w, reqs[0], nextNop); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMetricsGather(t *testing.T) {
	svc := newPermService(t, nil)
	h, _ := newHandler(t, svc, nil)
	for i := 0; i < 3; i++ {
		serve(t, h, newRequest("GET", "/allow"))
		serve(t, h, newRequest("GET", "/deny"))
	}
	reg := prometheus.NewPedanticRegistry()
	if err := registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := registerMetrics(reg); err != nil { // a second handler of the same config
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := ""
			isOurs := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == t.Name() {
					isOurs = true
				} else {
					labels += "," + l.GetValue()
				}
			}
			if !isOurs {
				continue
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			got[f.GetName()+labels] = v
		}
	}
	want := map[string]float64{
		"gateway_permission_cache_hits_total,allow":          2,
		"gateway_permission_cache_hits_total,deny":           2,
		"gateway_permission_cache_misses_total":              2,
		"gateway_permission_cache_entries":                   2,
		"gateway_permission_service_call_duration_seconds":   2,
		"gateway_permission_service_errors_total":            0,
		"gateway_permission_stale_serves_total":              0,
		"gateway_permission_on_error_total,allow":            0,
		"gateway_permission_on_error_total,deny":             0,
		"gateway_permission_denials_total,false,deny":        3,
		"gateway_permission_denials_total,false,unavailable": 0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("metrics\n got %v\nwant %v", got, want)
	}
}

// The contract's answers.
const (
	deniedBody      = `{"error":"forbidden","reason":"permission denied"}` + "\n"
	unavailableBody = `{"error":"permission_unavailable","reason":"permission service unavailable"}` + "\n"
)
