package caddyquota

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
)

// testApp is a started quota app with one plan, "free", and its default
// handler, made as Provision makes them (without a Caddy config).
func testApp(tb testing.TB, limits ...string) (*App, *Handler) {
	tb.Helper()
	a := &App{Plans: map[string]PlanConfig{"free": {Limits: limits}}, Dir: tb.TempDir(), SyncInterval: caddy.Duration(time.Hour)}
	if err := a.compile(); err != nil {
		tb.Fatal(err)
	}
	a.logger, a.clock, a.starting = zap.NewNop(), time.Now, new(starting)
	a.released, a.unknown, a.storeKey = new(atomic.Bool), new(sync.Map), a.Dir
	if err := a.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Cleanup() })
	h := &Handler{Key: DefaultKey, keyName: "http.auth.user.id", app: a, decider: identity.NewDecider("quota", ""),
		logger: zap.NewNop(), lastErr: new(errorLog), counters: map[string]*decisionCounters{"free": newDecisionCounters("free")},
		none: newDecisionCounters("")}
	return a, h
}

// consumerRequest is a request as Caddy's server prepares it, of the
// consumer an identity source recorded.
func consumerRequest(consumer string) *http.Request {
	r := httptest.NewRequest("GET", "/api/orders", nil)
	repl := caddy.NewReplacer()
	repl.Set("http.auth.user.id", consumer)
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
}

type nextHandler struct{ called int }

func (n *nextHandler) ServeHTTP(http.ResponseWriter, *http.Request) error { n.called++; return nil }

// BenchmarkServeHTTP: the quota duty's cost per admitted request, one
// consumer, with the RateLimit fields written (compare with a proxied
// request's CPU on the fast path, docs/caddyquota.md#cost).
func BenchmarkServeHTTP(b *testing.B) {
	for _, limits := range [][]string{{"2000000000/day"}, {"2000000000/day", "2000000000/month"}, {"2000000000/minute", "2000000000/day"}} {
		b.Run(strconv.Itoa(len(limits))+" limits "+limits[0][len("2000000000/"):], func(b *testing.B) {
			_, h := testApp(b, limits...)
			r, next, w := consumerRequest("alice"), &nextHandler{}, httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				if err := h.ServeHTTP(w, r, next); err != nil {
					b.Fatal(err)
				}
			}
			if next.called == 0 {
				b.Fatal("no request admitted")
			}
		})
	}
}

// BenchmarkServeHTTPParallel: the quota duty as the bench's gw-fast-quota
// row drives it: many requests at once, all of ONE consumer (one token),
// one plan of two calendar limits. With -cpu 1 (the bench's GOMAXPROCS)
// and -cpu 2 it shows what one hot consumer costs beyond the handler's
// serial work: lock waits (-mutexprofile, -blockprofile), allocations.
func BenchmarkServeHTTPParallel(b *testing.B) {
	_, h := testApp(b, "2000000000/day", "2000000000/month")
	var admitted atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r, next, w := consumerRequest("bench-user"), &nextHandler{}, httptest.NewRecorder()
		for pb.Next() {
			if err := h.ServeHTTP(w, r, next); err != nil {
				b.Error(err)
				return
			}
		}
		admitted.Add(int64(next.called))
	})
	if admitted.Load() == 0 {
		b.Fatal("no request admitted")
	}
}

// BenchmarkUsageOneConsumer: GET /gateway/usage?consumer=K's work (the
// days of this and the previous month, the windows now) for one
// consumer among 100,000 (the goal: 50 ms).
func BenchmarkUsageOneConsumer(b *testing.B) {
	a, h := testApp(b, "1000/day", "20000/month")
	w, next := httptest.NewRecorder(), &nextHandler{}
	for i := 0; i < 100_000; i++ {
		if err := h.ServeHTTP(w, consumerRequest("consumer-"+strconv.Itoa(i)), next); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		u, err := a.consumerUsage("consumer-77777", "", "")
		if err != nil || len(u.Days) != 1 || u.Days[0].Admitted != 1 {
			b.Fatalf("%+v %v", u, err)
		}
	}
}

// TestServeHTTPCounts: the handler admits up to the plan's limit with
// the RateLimit fields, then refuses with 429, Retry-After and the JSON
// body, and records the plan for audit; a request without a consumer is
// refused with 500 (the config's mistake) and counted nowhere.
func TestServeHTTPCounts(t *testing.T) {
	a, h := testApp(t, "3/day")
	next := &nextHandler{}
	for i := 1; i <= 3; i++ {
		w, r := httptest.NewRecorder(), consumerRequest("alice")
		if err := h.ServeHTTP(w, r, next); err != nil || next.called != i {
			t.Fatalf("request %d: %v, %d admitted", i, err, next.called)
		}
		if got, want := w.Header().Get("RateLimit"), `"free-day";r=`+strconv.Itoa(3-i)+";t="; len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("request %d: RateLimit %q, want %s...", i, got, want)
		}
		if identity.PlanOf(r) != "free" {
			t.Errorf("request %d: plan %q recorded", i, identity.PlanOf(r))
		}
	}
	w, r := httptest.NewRecorder(), consumerRequest("alice")
	if err := h.ServeHTTP(w, r, next); err != nil || next.called != 3 || w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("4th request: %v, %d admitted, status %d, Retry-After %q", err, next.called, w.Code, w.Header().Get("Retry-After"))
	}
	w, r = httptest.NewRecorder(), consumerRequest("")
	// an empty key is the config's mistake: 500, never a 401 that blames
	// the client's credential
	if err := h.ServeHTTP(w, r, next); err != nil || w.Code != 500 || next.called != 3 || w.Header().Get("WWW-Authenticate") != "" ||
		!strings.Contains(w.Body.String(), `"error":"quota_key_empty"`) {
		t.Fatalf("no consumer: %v, status %d %s", err, w.Code, w.Body)
	}
	if st, _ := a.store(); st.Consumers() != 1 {
		t.Errorf("%d consumers counted, want 1", st.Consumers())
	}
}

// TestPlanPlaceholder: {http.quota.plan} names the plan a request was
// counted on, admitted or refused, for a handler with a plan of its own
// (answered by the handler's provider) as for the consumer's plan.
func TestPlanPlaceholder(t *testing.T) {
	a, h := testApp(t, "1/day")
	forced := &Handler{Key: DefaultKey, Plan: "free", forced: a.plans["free"], app: a, decider: h.decider,
		logger: zap.NewNop(), lastErr: new(errorLog), counters: h.counters, none: h.none}
	forced.compileKey()
	forced.setForced()
	for _, tc := range []struct {
		name     string
		h        *Handler
		consumer string
	}{{"the consumer's plan", h, "alice"}, {"the handler's plan", forced, "bob"}} {
		t.Run(tc.name, func(t *testing.T) {
			for i, want := range []int{200, 429} {
				w, r := httptest.NewRecorder(), consumerRequest(tc.consumer)
				if err := tc.h.ServeHTTP(w, r, &nextHandler{}); err != nil || w.Code != want {
					t.Fatalf("request %d: %v, status %d, want %d", i+1, err, w.Code, want)
				}
				repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
				if got := repl.ReplaceAll("{http.quota.plan}", "-"); got != "free" {
					t.Errorf("request %d: {http.quota.plan} = %q, want free", i+1, got)
				}
			}
		})
	}
}

// TestConsumerKeyDirect: the keys consumerKey reads without the
// replacer ({http.request.remote.host}, {http.vars.*}) are what the
// replacer of a request Caddy's server prepared answers, for every
// kind of remote address and var; and without a finished TLS handshake
// the remote host is empty, as Caddy's.
func TestConsumerKeyDirect(t *testing.T) {
	vars := map[string]any{"client_ip": "198.51.100.7", "n": 42, "nothing": nil, "id": identity.NewPlanLabel("x")}
	cases := []struct{ name, key, remote string }{
		{"ipv4", "{http.request.remote.host}", "192.0.2.1:5000"},
		{"ipv6", "{http.request.remote.host}", "[2001:db8::1]:443"},
		{"unix socket", "{http.request.remote.host}", "@"},
		{"no port", "{http.request.remote.host}", "192.0.2.1"},
		{"var string", "{http.vars.client_ip}", "192.0.2.1:5000"},
		{"var int", "{http.vars.n}", "192.0.2.1:5000"},
		{"var nil", "{http.vars.nothing}", "192.0.2.1:5000"},
		{"var unset", "{http.vars.missing}", "192.0.2.1:5000"},
		{"var Stringer", "{http.vars.id}", "192.0.2.1:5000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{Key: tc.key}
			h.compileKey()
			if h.keyFrom == keyReplacer {
				t.Fatalf("key %s read through the replacer", tc.key)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			repl := caddy.NewReplacer()
			r = caddyhttp.PrepareRequest(r, repl, httptest.NewRecorder(), nil)
			for k, v := range vars {
				caddyhttp.SetVar(r.Context(), k, v)
			}
			want, _ := repl.GetString(tc.key[1 : len(tc.key)-1])
			if got := h.consumerKey(r, repl); got != want {
				t.Errorf("key %s of %s: %q, the replacer's %q", tc.key, tc.remote, got, want)
			}
			if tc.name == "ipv4" {
				r.TLS = &tls.ConnectionState{}
				want, _ := repl.GetString(tc.key[1 : len(tc.key)-1])
				if got := h.consumerKey(r, repl); got != want || got != "" {
					t.Errorf("before the handshake ends: %q, the replacer's %q (want both empty)", got, want)
				}
			}
		})
	}
	h := &Handler{Key: "{http.auth.user.id}"}
	if h.compileKey(); h.keyFrom != keyReplacer || h.keyName != "http.auth.user.id" {
		t.Errorf("{http.auth.user.id}: read from %d as %q, want the replacer's", h.keyFrom, h.keyName)
	}
}

// TestDescribeConfig: the dashboard's summary of a quota handler.
func TestDescribeConfig(t *testing.T) {
	for raw, want := range map[string]string{
		`{"handler":"quota","plan":"docker_gateway_shop_api","limits":["100/30s"],"counts":{}}`:                        "docker_gateway_shop_api 100/30s",
		`{"handler":"quota","plan":"r","limits":["100/1m0s","1000/day"],"counts":{"fleet":{"bucket":"x_rate_limit"}}}`: "r 100/minute 1000/day, shared by the fleet",
		`{"handler":"quota","plan":"gold"}`:  "plan gold",
		`{"handler":"quota","dry_run":true}`: "the consumer's plan, dry_run",
		`not json`:                           "",
	} {
		if got := DescribeConfig(json.RawMessage(raw)); got != want {
			t.Errorf("%s: %q, want %q", raw, got, want)
		}
	}
}
