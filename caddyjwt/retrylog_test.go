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
	checkLevels := func(t *testing.T, got []zapcore.Level, keepsFailing bool) {
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
		if keepsFailing && len(got) < failuresBeforeError {
			t.Errorf("%d failures logged, want at least %d", len(got), failuresBeforeError)
		}
	}

	t.Run("jwks up after the first fetch", func(t *testing.T) {
		srv := newJWKSServer(t, doc)
		srv.set([]byte("starting"), http.StatusServiceUnavailable)
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewJWKSet(JWKSConfig{URL: srv.URL, Logger: zap.New(core), retry: retry})
		s.Start()
		defer s.Stop()
		waitFor(t, "the first fetch", s.Loaded)
		srv.set(doc, http.StatusOK)
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		// one failure, or two if the retry came before the provider was up
		if got := levels(logs); len(got) == 0 || len(got) >= failuresBeforeError {
			t.Fatalf("failure lines at %v, want one warning; logs: %v", got, logs.All())
		}
		checkLevels(t, levels(logs), false)
		if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
			t.Fatalf("%d error lines: %v", n, logs.All())
		}
	})

	t.Run("jwks keeps failing", func(t *testing.T) {
		srv := newJWKSServer(t, doc)
		srv.set([]byte("down"), http.StatusServiceUnavailable)
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewJWKSet(JWKSConfig{URL: srv.URL, Logger: zap.New(core), retry: retry})
		s.Start()
		defer s.Stop()
		waitFor(t, "an error line", func() bool { return logs.FilterLevelExact(zapcore.ErrorLevel).Len() > 0 })
		checkLevels(t, levels(logs), true)
	})

	t.Run("jwks refresh keeps failing after keys loaded", func(t *testing.T) {
		srv := newJWKSServer(t, doc)
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Second, Logger: zap.New(core), retry: retry})
		s.Start()
		defer s.Stop()
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		srv.set([]byte("down"), http.StatusServiceUnavailable)
		waitFor(t, "an error line", func() bool { return logs.FilterLevelExact(zapcore.ErrorLevel).Len() > 0 })
		checkLevels(t, levels(logs), true)
		if len(s.Keys()) != 1 {
			t.Fatal("the last good keys were dropped")
		}
	})

	t.Run("oidc up after the first discovery", func(t *testing.T) {
		op := newOIDCServer(t)
		op.update(func(s *oidcServer) { s.jwks = doc; s.discoveryDown = true })
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewOIDCKeySet(OIDCConfig{Issuer: op.URL, JWKS: JWKSConfig{Logger: zap.New(core), retry: retry}})
		s.Start()
		defer s.Stop()
		waitFor(t, "a failed discovery", func() bool { return len(levels(logs)) > 0 })
		op.update(func(s *oidcServer) { s.discoveryDown = false })
		waitFor(t, "the keys", func() bool { return len(s.Keys()) == 1 })
		// one failure, or two if the retry came before the provider was up
		if got := levels(logs); len(got) == 0 || len(got) >= failuresBeforeError {
			t.Fatalf("failure lines at %v, want one warning; logs: %v", got, logs.All())
		}
		checkLevels(t, levels(logs), false)
		if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
			t.Fatalf("%d error lines: %v", n, logs.All())
		}
	})

	t.Run("oidc keeps failing", func(t *testing.T) {
		op := newOIDCServer(t)
		op.update(func(s *oidcServer) { s.jwks = doc; s.discoveryDown = true })
		core, logs := observer.New(zapcore.DebugLevel)
		s := NewOIDCKeySet(OIDCConfig{Issuer: op.URL, JWKS: JWKSConfig{Logger: zap.New(core), retry: retry}})
		s.Start()
		defer s.Stop()
		waitFor(t, "an error line", func() bool { return logs.FilterLevelExact(zapcore.ErrorLevel).Len() > 0 })
		checkLevels(t, levels(logs), true)
	})
}
