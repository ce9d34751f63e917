package caddyoidc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/oidcop"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestKeyRotation follows docs/oidc.md's key rotation through config
// reloads, on both request paths: a session sealed under the old key
// keeps working once the new key is added (second, then first), a login
// after that is sealed under the new key, and removing the old key ends
// the old session only, though this gateway holds it in memory.
func TestKeyRotation(t *testing.T) { pathtest.Run(t, testKeyRotation) }

func testKeyRotation(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	o := provider(t)
	dir := t.TempDir()
	const oldKey, newKey = "old-session-key-0123456789abcdef0123", "new-session-key-0123456789abcdef0123"
	load := func(keys ...string) {
		t.Helper()
		c := strings.Replace(config(dir, o.Issuer, "127.0.0.1:9"), "client_secret "+clientSecret,
			"client_secret "+clientSecret+"\n\t\tsession_key "+strings.Join(keys, " "), 1)
		if !strings.Contains(c, "session_key") {
			t.Fatal("the config has no session_key")
		}
		p.Load(t, adminPort, c, "srv0")
	}
	login := func() string {
		t.Helper()
		b, _ := browser(p)
		if _, status, body, err := b.Login(gw+"/", o.Username(), oidcop.Password); err != nil || status != 200 {
			t.Fatalf("login: %d %q %v", status, body, err)
		}
		return sessionCookie(t, b)
	}
	use := func(cookie string) int {
		t.Helper()
		return send(t, p, "GET", "/", map[string]string{"Accept": "application/json", "Cookie": "gateway_session=" + cookie}, "").Status
	}
	step := func(name, cookie string, want int) {
		t.Helper()
		got := use(cookie)
		rec.Add(p, name, fmt.Sprint(got))
		if got != want {
			t.Errorf("%s: %d, want %d", name, got, want)
		}
	}

	load(oldKey)
	old := login()
	step("old session, old key", old, 200)
	load(oldKey, newKey) // 1. the new key second: every gateway can read it
	step("old session, new key added second", old, 200)
	load(newKey, oldKey) // 2. the new key first: new sessions use it
	step("old session, new key first", old, 200)
	fresh := login()
	step("new session, new key first", fresh, 200)
	load(newKey) // 3. the old key removed
	step("old session, old key removed", old, 401)
	step("new session, old key removed", fresh, 200)
	load(oldKey) // the new key removed instead: the new session ends
	step("new session, only the old key", fresh, 401)
}
