package caddyjwt

import (
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFetchFailureLevels: a JWKS fetcher or OIDC discovery whose first
// attempt fails (the provider starts with the gateway, as the demo JWKS of
// scripts/run does) logs a warning, and an error only once
// failuresBeforeError attempts in a row failed.
func TestFetchFailureLevels(t *testing.T) {
	k := keys(t)
	doc := jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", "RS256"))
	const retry = 20 * time.Millisecond

	// levels returns the levels of the failure lines, in order.
	levels := func(logs *observer.ObservedLogs) []zapcore.Level {
		var out []zapcore.Level
		for _, e := range logs.All() {
			if _, ok := e.ContextMap()["failures"]; ok {
				out = append(out, e.Level)
			}
		}
		return out
	}
	checkLevels := func(t *testing.T, got []zapcore.Level) {
		t.Helper()
		for i, l := range got {
			want := zapcore.WarnLevel
			if i+1 >= failuresBeforeError {
				want = zapcore.ErrorLevel
			}
			if l != want {
				t.Errorf("failure %d logged at %s, want %s (all: %v)", i+1, l, want, got)
			}
		}
	}
	// upAfterFirst: the provider came up after the first failure (or two,
	// if a retry came before it was up): warnings, no error line.
	upAfterFirst := func(t *testing.T, logs *observer.ObservedLogs) {
		t.Helper()
		if got := levels(logs); len(got) == 0 || len(got) >= failuresBeforeError {
			t.Fatalf("failure lines at %v, want one warning; logs: %v", got, logs.All())
		}
		checkLevels(t, levels(logs))
		if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
			t.Fatalf("%d error lines: %v", n, logs.All())
		}
	}
	// keepsFailing: the first failures are warnings, then errors.
	keepsFailing := func(t *testing.T, logs *observer.ObservedLogs) {
		t.Helper()
		waitFor(t, "an error line", func() bool { return logs.FilterLevelExact(zapcore.ErrorLevel).Len() > 0 })
		got := levels(logs)
		checkLevels(t, got)
		if len(got) < failuresBeforeError {
			t.Errorf("%d failures logged, want at least %d", len(got), failuresBeforeError)
		}
	}

	// startJWKS starts a fetcher of a JWKS endpoint that answers status,
	// logging to logs.
	startJWKS := func(t *testing.T, status int, refresh time.Duration) (*jwksServer, *JWKSet, *observer.ObservedLogs) {
		srv := newJWKSServer(t, doc)
		if status != http.StatusOK {
			srv.set([]byte("down"), status)
		}
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: refresh, Logger: zap.New(core), retry: retry})
		s.Start()
		t.Cleanup(s.Stop)
		return srv, s, logs
	}

	t.Run("jwks up after the first fetch", func(t *testing.T) {
		srv, s, logs := startJWKS(t, http.StatusServiceUnavailable, 0)
		waitFor(t, "the first fetch", s.Loaded)
		srv.set(doc, http.StatusOK)
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		upAfterFirst(t, logs)
	})

	t.Run("jwks keeps failing", func(t *testing.T) {
		_, _, logs := startJWKS(t, http.StatusServiceUnavailable, 0)
		keepsFailing(t, logs)
	})

	t.Run("jwks refresh keeps failing after keys loaded", func(t *testing.T) {
		srv, s, logs := startJWKS(t, http.StatusOK, time.Second)
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		srv.set([]byte("down"), http.StatusServiceUnavailable)
		keepsFailing(t, logs)
		if len(s.Keys()) != 1 {
			t.Fatal("the last good keys were dropped")
		}
	})

	// startOIDC starts discovery of a provider whose discovery is down.
	startOIDC := func(t *testing.T) (*oidcServer, *OIDCKeySet, *observer.ObservedLogs) {
		op := newOIDCServer(t)
		op.update(func(s *oidcServer) { s.jwks = doc; s.discoveryDown = true })
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewOIDCKeySet(OIDCConfig{Issuer: op.URL, JWKS: JWKSConfig{Logger: zap.New(core), retry: retry}})
		s.Start()
		t.Cleanup(s.Stop)
		return op, s, logs
	}

	t.Run("oidc up after the first discovery", func(t *testing.T) {
		op, s, logs := startOIDC(t)
		waitFor(t, "a failed discovery", func() bool { return len(levels(logs)) > 0 })
		op.update(func(s *oidcServer) { s.discoveryDown = false })
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		upAfterFirst(t, logs)
	})

	t.Run("oidc keeps failing", func(t *testing.T) {
		_, _, logs := startOIDC(t)
		keepsFailing(t, logs)
	})
}
