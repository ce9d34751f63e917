package caddyoidc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/credential"
)

type nopHandler struct{}

func (nopHandler) ServeHTTP(http.ResponseWriter, *http.Request) error { return nil }

// BenchmarkSessionCheck is the whole handler on a session this gateway
// holds (the common case): the cookie found, the cached session checked
// (expiry, idle), the identity set, the placeholders, one forwarded claim,
// the cookie stripped. Compare with caddyjwt's BenchmarkServeHTTPHit (the
// same work for a cached token); the goal is <= 2 µs of CPU.
func BenchmarkSessionCheck(b *testing.B) { benchSessionCheck(b, false) }

// BenchmarkSessionCheckHarness is BenchmarkSessionCheck's loop without the
// handler (each request's replacer, vars and header copy, as Caddy's
// server makes them): subtract it to read the handler's own cost.
func BenchmarkSessionCheckHarness(b *testing.B) { benchSessionCheck(b, true) }

func benchSessionCheck(b *testing.B, baseline bool) {
	ring, _ := NewKeyring([]byte(strings.Repeat("k", 32)))
	s := &Sessions{Storage: &certmagic.FileStorage{Path: b.TempDir()}, Ring: ring, Prefix: "oidc_login/bench",
		TTL: 8 * time.Hour, Idle: time.Hour, Now: time.Now, cache: newCache(DefaultCacheSize)}
	fwd, _ := identity.NewClaimHeaders([]identity.ForwardClaim{{Claim: "sub", Header: "X-User-Id"}})
	o := &OIDCLogin{RedirectPath: DefaultRedirectPath, LoginPath: DefaultLoginPath, LogoutPath: DefaultLogoutPath,
		BackchannelLogoutPath: DefaultBackchannelLogoutPath, CookieName: DefaultCookieName,
		sessions: s, forward: fwd, logger: zap.NewNop(), now: time.Now}
	o.sources[0] = []credential.TokenSource{{Kind: credential.FromCookie, Name: DefaultCookieName}}
	cookie, err := s.Create(context.Background(), &Session{Subject: "alice", Issuer: "https://idp.example",
		Claims: map[string]any{"sub": "alice", "email": "alice@example.com", "roles": []any{"admin"}}})
	if err != nil {
		b.Fatal(err)
	}
	base := httptest.NewRequest("GET", "/orders", nil)
	base.Header.Set("Cookie", "theme=dark; gateway_session="+cookie)
	base.Header.Set("Accept", "application/json")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		ctx := context.WithValue(base.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
		r := base.WithContext(ctx)
		r.Header = base.Header.Clone()
		var err error
		if baseline {
			err = nopHandler{}.ServeHTTP(w, r)
		} else {
			err = o.ServeHTTP(w, r, nopHandler{})
		}
		if err != nil {
			b.Fatal(err)
		}
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
	if d := cpuTime() - start; b.N > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// cpuTime is the process's CPU time (user + system): on a shared machine
// a benchmark's wall time includes waiting for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
