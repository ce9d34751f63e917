package fastpath

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// TestCaddyInternals checks, against the pinned Caddy, what each
// unexported function the fast path calls (caddylink.go) does: a Caddy
// update that changes one fails here (one that removes one fails the
// build).
func TestCaddyInternals(t *testing.T) {
	t.Run("Host.countRequest", func(t *testing.T) {
		var h reverseproxy.Host
		if err := hostCountRequest(&h, 2); err != nil || h.NumRequests() != 2 {
			t.Fatalf("count 2: NumRequests %d, err %v", h.NumRequests(), err)
		}
		if err := hostCountRequest(&h, -3); err == nil {
			t.Fatal("a count below 0 is not an error")
		}
	})
	t.Run("Handler.provisionUpstream and countFailure", func(t *testing.T) {
		loadTwin(t, "", `	reverse_proxy 127.0.0.1:1 {
		transport h1
		fail_duration 1m
		max_fails 1
		unhealthy_request_count 7
	}`)
		h := proxyHandler(t, "fast")
		u := &reverseproxy.Upstream{Dial: "127.0.0.1:2"}
		handlerProvisionUpstream(*h, u, true)
		if u.Host == nil || u.MaxRequests != 7 {
			t.Fatalf("dynamic upstream not provisioned: host %v, max_requests %d", u.Host, u.MaxRequests)
		}
		if !u.Healthy() {
			t.Fatal("a fresh upstream is unhealthy")
		}
		handlerCountFailure(h, u)
		if u.Host.Fails() != 1 || u.Healthy() {
			t.Fatalf("after a failure: fails %d, healthy %v (want 1, false: max_fails 1)", u.Host.Fails(), u.Healthy())
		}
	})
	t.Run("in-flight requests", func(t *testing.T) {
		count := func() int64 {
			if v, ok := inFlightRequests.Load("127.0.0.1:9"); ok {
				return v.(*atomic.Int64).Load()
			}
			return 0
		}
		incInFlight("127.0.0.1:9")
		incInFlight("127.0.0.1:9")
		if n := count(); n != 2 {
			t.Fatalf("after two incInFlight: %d in flight", n)
		}
		decInFlightRequest("127.0.0.1:9")
		decInFlightRequest("127.0.0.1:9")
		if _, ok := inFlightRequests.Load("127.0.0.1:9"); ok {
			t.Fatal("the entry stays after the count reached 0")
		}
		// a static upstream's entry stays at zero (decInFlight keep)
		incInFlight("127.0.0.1:9")
		decInFlight("127.0.0.1:9", true)
		if v, ok := inFlightRequests.Load("127.0.0.1:9"); !ok || v.(*atomic.Int64).Load() != 0 {
			t.Fatalf("decInFlight(keep): entry %v, present %v (want a zero count kept)", v, ok)
		}
		incInFlight("127.0.0.1:9")
		if n := count(); n != 1 {
			t.Fatalf("incInFlight on a kept entry: %d in flight", n)
		}
		decInFlight("127.0.0.1:9", false)
		if _, ok := inFlightRequests.Load("127.0.0.1:9"); ok {
			t.Fatal("decInFlight(no keep): the entry stays after the count reached 0")
		}
	})
	t.Run("trustedProxies", func(t *testing.T) {
		loadTwinOpts(t, twinOpts{serverOpts: "\t\ttrusted_proxies static 10.0.0.0/8"}, `	respond "x"`)
		if !planOf(t, "fast").trusted {
			t.Fatal("a server with trusted_proxies: hasTrustedProxies is false")
		}
		loadTwin(t, "", `	respond "x"`)
		if planOf(t, "fast").trusted {
			t.Fatal("a server without trusted_proxies: hasTrustedProxies is true")
		}
	})
	t.Run("replacer reset", func(t *testing.T) {
		r := caddy.NewReplacer()
		n := replacerProviders(r)
		if n != 3 {
			t.Fatalf("a new replacer has %d providers, want Caddy's 3", n)
		}
		r.Map(func(key string) (any, bool) { return "mapped", key == "req.x" })
		r.Set("req.y", "set")
		if r.ReplaceAll("{req.x} {req.y}", "-") != "mapped set" {
			t.Fatal("the request's provider and value do not replace")
		}
		resetReplacer(r, n)
		if got := r.ReplaceAll("{req.x} {req.y} {system.os}", "-"); got != "- - "+runtime.GOOS {
			t.Fatalf("after reset: %q, want the request's gone and Caddy's own there", got)
		}
		r.Set("req.z", "again")
		if r.ReplaceAll("{req.z}", "-") != "again" {
			t.Fatal("a reset replacer takes no new values")
		}
	})
	// newMetricsInstrumentedRoute and its ServeHTTP: TestMetrics (every
	// caddy_http_* series the same on both paths).
}

// planOf is server's plan in the running config.
func planOf(t *testing.T, server string) *plan {
	t.Helper()
	statusMu.Lock()
	e, ok := statuses[server]
	statusMu.Unlock()
	if !ok || e.owner.plan == nil {
		t.Fatalf("no plan for server %q", server)
	}
	return e.owner.plan
}

// proxyHandler finds the provisioned reverse_proxy handler of the first
// route of server's plan.
func proxyHandler(t *testing.T, server string) *reverseproxy.Handler {
	t.Helper()
	statusMu.Lock()
	e, ok := statuses[server]
	statusMu.Unlock()
	if !ok || e.owner.plan == nil {
		t.Fatalf("no plan for server %q", server)
	}
	for _, s := range e.owner.plan.routes[0].steps {
		switch s := s.(type) {
		case *proxyStep:
			return s.h
		case *subroute:
			for _, s2 := range s.routes[0].steps {
				if p, ok := s2.(*proxyStep); ok {
					return p.h
				}
			}
		}
	}
	t.Fatal("no reverse_proxy in the first route")
	return nil
}
