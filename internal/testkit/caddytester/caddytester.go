// Package caddytester loads a Caddyfile into the Caddy that runs inside a
// test binary (Caddy's caddytest), for the modules' end-to-end tests.
package caddytester

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
)

// Load loads config (a Caddyfile) with the admin API on adminPort and
// returns a tester bound to t. caddytest skips the calling test when Caddy
// cannot start or load the config (and the skip ends that goroutine, so a
// check after it never runs); Load loads in a subtest and fails t instead:
// a test that needs Caddy never passes as skipped.
func Load(t *testing.T, adminPort int, config string) *caddytest.Tester {
	t.Helper()
	return load(t, adminPort, config, "caddyfile")
}

// LoadJSON is Load for a JSON config.
func LoadJSON(t *testing.T, adminPort int, config string) *caddytest.Tester {
	t.Helper()
	return load(t, adminPort, config, "json")
}

func load(t *testing.T, adminPort int, config, adapter string) *caddytest.Tester {
	t.Helper()
	overrides := caddytest.Config{
		AdminPort:          adminPort,
		LoadRequestTimeout: 30 * time.Second,
		TestRequestTimeout: 30 * time.Second,
	}
	loaded := false
	t.Run("load config", func(t *testing.T) {
		caddytest.NewTester(t).WithDefaultOverrides(overrides).InitServer(config, adapter)
		loaded = !t.Failed() && !t.Skipped()
	})
	if !loaded {
		t.Fatal("caddy did not start or did not load the config")
	}
	return caddytest.NewTester(t).WithDefaultOverrides(overrides)
}

// StopServers stops the servers of the config loaded in this test binary
// (if any), keeping the admin API on adminPort. On a reload to the same
// ports Caddy's http app returns from Stop before its old servers finish
// shutting down (with tests' short grace periods), and a connection one of
// them accepts then gets EOF: a test that is not about reloads calls it
// before Load (fastpath's TestHijack and TestIdleHoldsNoState saw it).
// Not for tests of what outlives a reload (caddyh1's pools).
func StopServers(t *testing.T, adminPort int) {
	t.Helper()
	if caddy.ActiveContext().Context == nil {
		return
	}
	if err := caddy.Load([]byte(fmt.Sprintf(`{"admin":{"listen":"localhost:%d"}}`, adminPort)), true); err != nil {
		t.Fatalf("stopping the previous config's servers: %v", err)
	}
}
