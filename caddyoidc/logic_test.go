package caddyoidc

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/apigate/gateway/identity"
)

func TestSafeReturnPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/app?x=1#f", "/app?x=1#f"},
		{"/a/b%20c", "/a/b%20c"},
		{"", "/"},
		{"app", "/"},
		{"//evil.example/x", "/"},
		{"/\\evil.example", "/"},
		{"/\\/evil.example", "/"},
		{"https://evil.example/", "/"},
		{"http:/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"/%2F%2Fevil.example", "/"},
		{"/%2f/evil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/%252F%252Fevil.example", "/"},
		{"%2F%2Fevil.example", "/"},
		{"\t//evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\r\nLocation: x", "/"},
		{"/\u3002evil", "/"},
		{"/" + strings.Repeat("a", maxReturnPath), "/"},
		{"/%zz", "/"},
	} {
		if got := SafeReturnPath(tc.in); got != tc.want {
			t.Errorf("SafeReturnPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzSafeReturnPath(f *testing.F) {
	for _, s := range []string{"/", "//x", "/\\x", "/%2F%2Fx", "https://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := SafeReturnPath(p)
		if got == "/" {
			return
		}
		// what passes is a path on this site however a browser reads it
		if got != p || !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\t\r\n ") {
			t.Fatalf("SafeReturnPath(%q) = %q", p, got)
		}
	})
}

func TestSameSiteAndNavigation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		host   string
		https  bool
		header map[string]string
		want   bool
	}{
		{"nothing", "app.example.com", true, nil, false},
		{"fetch same-origin", "app.example.com", true, map[string]string{"Sec-Fetch-Site": "same-origin"}, true},
		{"fetch same-site", "app.example.com", true, map[string]string{"Sec-Fetch-Site": "same-site"}, true},
		{"fetch none", "app.example.com", true, map[string]string{"Sec-Fetch-Site": "none"}, true},
		{"fetch cross-site wins over origin", "app.example.com", true, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example.com"}, false},
		{"origin same", "app.example.com", true, map[string]string{"Origin": "https://app.example.com"}, true},
		{"origin sibling", "app.example.com", true, map[string]string{"Origin": "https://www.example.com"}, true},
		{"origin other site", "app.example.com", true, map[string]string{"Origin": "https://example.org"}, false},
		{"origin on a public suffix", "a.github.io", true, map[string]string{"Origin": "https://b.github.io"}, false},
		{"origin other scheme", "app.example.com", true, map[string]string{"Origin": "http://app.example.com"}, false},
		{"origin null", "app.example.com", true, map[string]string{"Origin": "null"}, false},
		{"origin ip", "127.0.0.1:8080", false, map[string]string{"Origin": "http://127.0.0.1:8080"}, true},
		{"origin other ip", "127.0.0.1:8080", false, map[string]string{"Origin": "http://127.0.0.2:8080"}, false},
	} {
		r := httptest.NewRequest("POST", "http://"+tc.host+"/x", nil)
		r.Host = tc.host
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := SameSite(r, tc.https); got != tc.want {
			t.Errorf("%s: SameSite = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		method, accept, mode string
		want                 bool
	}{
		{"GET", "text/html,application/xhtml+xml", "", true},
		{"GET", "text/html", "navigate", true},
		{"HEAD", "Text/HTML", "", true},
		{"GET", "text/html", "cors", false},
		{"GET", "application/json", "", false},
		{"GET", "*/*", "", false},
		{"POST", "text/html", "navigate", false},
	} {
		r := httptest.NewRequest(tc.method, "/", nil)
		r.Header.Set("Accept", tc.accept)
		if tc.mode != "" {
			r.Header.Set("Sec-Fetch-Mode", tc.mode)
		}
		if got := Navigation(r); got != tc.want {
			t.Errorf("Navigation(%s, %q, %q) = %v", tc.method, tc.accept, tc.mode, got)
		}
	}
}

func TestKeyring(t *testing.T) {
	old, err := NewKeyring([]byte(strings.Repeat("o", 32)))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := NewKeyring([]byte(strings.Repeat("n", 32)), []byte(strings.Repeat("o", 32)))
	if err != nil {
		t.Fatal(err)
	}
	sealed := old.Seal([]byte("tokens"), []byte("key-a"))
	if pt, err := rotated.Open(sealed, []byte("key-a")); err != nil || string(pt) != "tokens" {
		t.Fatalf("a rotated ring does not open the old key's record: %q %v", pt, err)
	}
	if _, err := rotated.Open(sealed, []byte("key-b")); err == nil {
		t.Error("a record opened under another storage key")
	}
	for i := range sealed {
		bad := append([]byte(nil), sealed...)
		bad[i] ^= 0x40
		if _, err := rotated.Open(bad, []byte("key-a")); err == nil {
			t.Fatalf("a record with byte %d changed opened", i)
		}
	}
	fresh, _ := NewKeyring([]byte(strings.Repeat("n", 32)))
	if _, err := fresh.Open(sealed, []byte("key-a")); err == nil {
		t.Error("a ring without the old key opened its record")
	}
	id := old.NewSessionID()
	if len(id) != SessionIDLen {
		t.Fatalf("session id of %d characters", len(id))
	}
	name, ok := rotated.CheckSessionID(id)
	if !ok || len(name) != 64 {
		t.Fatalf("a rotated ring refuses the old key's session id")
	}
	if _, ok := fresh.CheckSessionID(id); ok {
		t.Error("a session id signed by a key the ring does not hold passed")
	}
	for i := range id {
		b := []byte(id)
		b[i] = "AB"[(b[i]&1)^0] // change the character
		if b[i] == id[i] {
			b[i] = 'C'
		}
		if _, ok := old.CheckSessionID(string(b)); ok {
			t.Fatalf("a session id with character %d changed passed", i)
		}
	}
	if _, err := NewKeyring([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
}

// TestSessionsLifetime checks expiry, idle timeout, revocation and the
// storage's view with a clock the test moves, on Caddy's file storage.
func TestSessionsLifetime(t *testing.T) {
	ring, _ := NewKeyring([]byte(strings.Repeat("k", 32)))
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	st := &certmagic.FileStorage{Path: t.TempDir()}
	mk := func() *Sessions {
		return &Sessions{Storage: st, Ring: ring, Prefix: "oidc_login/test", TTL: 8 * time.Hour, Idle: time.Hour,
			Now: func() time.Time { return now }, cache: newCache(10)}
	}
	a, b := mk(), mk() // two gateways on one storage
	ctx := context.Background()
	sess := &Session{Subject: "alice", Issuer: "https://idp", Claims: map[string]any{"sub": "alice", "roles": []any{"admin"}},
		IDToken: "id.token.value", RefreshToken: "refresh-secret-value"}
	cookie, err := a.Create(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	// the storage holds no usable token
	keys, _ := st.List(ctx, "oidc_login/test", true)
	for _, k := range keys {
		v, _ := st.Load(ctx, k)
		if strings.Contains(string(v), "refresh-secret-value") || strings.Contains(string(v), "alice") || strings.Contains(k, cookie) {
			t.Fatalf("the storage holds a token, the subject or the cookie in clear: %s", k)
		}
	}
	e, err := b.Lookup(ctx, cookie)
	if err != nil || e == nil || e.id.Subject != "alice" || e.id.Method != identity.MethodOIDCSession {
		t.Fatalf("the other gateway does not find the session: %v %v", e, err)
	}
	// idle on b for 50 minutes, used on a meanwhile (a writes LastSeen back)
	for i := 0; i < 5; i++ {
		now = now.Add(10 * time.Minute)
		if e, _ := a.Lookup(ctx, cookie); e == nil {
			t.Fatalf("session gone on a after %d minutes of use", (i+1)*10)
		}
	}
	// a wrote LastSeen back (every quarter of the idle timeout, in the background)
	waitFor(t, func() bool {
		s, _ := a.load(ctx, e.name)
		return s != nil && !s.LastSeen.Before(now.Add(-20*time.Minute))
	})
	now = now.Add(30 * time.Minute) // b last saw it 80 minutes ago, a 30
	if e, _ := b.Lookup(ctx, cookie); e == nil {
		t.Fatal("b ended a session a used 30 minutes ago")
	}
	// idle for more than an hour everywhere: gone
	now = now.Add(61 * time.Minute)
	if e, _ := a.Lookup(ctx, cookie); e != nil {
		t.Fatal("a session idle for 61 minutes lives")
	}
	// expiry: session_ttl whatever the use
	cookie, _ = a.Create(ctx, &Session{Subject: "bob", Issuer: "https://idp"})
	for i := 0; i < 17; i++ {
		now = now.Add(30 * time.Minute)
		e, _ := a.Lookup(ctx, cookie)
		if (e != nil) != (i < 15) {
			t.Fatalf("after %d minutes: session %v", (i+1)*30, e != nil)
		}
		if e != nil { // the clock jumps: let the write-back of LastSeen land first
			waitFor(t, func() bool {
				s, _ := a.load(ctx, e.name)
				return s != nil && !s.LastSeen.Before(now.Add(-30*time.Minute))
			})
		}
	}
	// revocation: by cookie, by subject; the cached copy on the other
	// gateway goes with an invalidation
	cookie, _ = a.Create(ctx, &Session{Subject: "carol", Issuer: "https://idp"})
	if e, _ := b.Lookup(ctx, cookie); e == nil {
		t.Fatal("b does not find carol's session")
	}
	b.Bus = busFunc(func(m Invalidation) { a.cache.Apply(m) })
	a.Bus = busFunc(func(m Invalidation) { b.cache.Apply(m) })
	if n, err := a.RevokeSubject(ctx, "https://idp", "carol"); n != 1 || err != nil {
		t.Fatalf("RevokeSubject: %d %v", n, err)
	}
	if e, _ := b.Lookup(ctx, cookie); e != nil {
		t.Fatal("b still serves a revoked session")
	}
	// a forged cookie costs no storage read
	if e, err := a.Lookup(ctx, strings.Repeat("A", SessionIDLen)); e != nil || err != nil {
		t.Fatal("a forged cookie found a session")
	}
	// the sweeper deletes what expired
	now = now.Add(9 * time.Hour)
	if n, err := a.Sweep(ctx); err != nil || n == 0 {
		t.Fatalf("Sweep: %d %v", n, err)
	}
	if keys, _ := st.List(ctx, "oidc_login/test/sessions", true); len(keys) != 0 {
		t.Errorf("after the sweep: %v", keys)
	}
}

type busFunc func(Invalidation)

func (f busFunc) Publish(m Invalidation) { f(m) }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCheckIDToken(t *testing.T) {
	o := &OIDCLogin{ClientID: "gw"}
	id := func(claims map[string]any, aud ...string) *identity.Identity {
		return &identity.Identity{Subject: "s", Audience: aud, Claims: claims}
	}
	for _, tc := range []struct {
		name           string
		id             *identity.Identity
		nonce, subject string
		wantErr        bool
	}{
		{"good", id(map[string]any{"nonce": "n1"}, "gw"), "n1", "", false},
		{"other nonce", id(map[string]any{"nonce": "n2"}, "gw"), "n1", "", true},
		{"no nonce", id(map[string]any{}, "gw"), "n1", "", true},
		{"several audiences, azp ours", id(map[string]any{"nonce": "n1", "azp": "gw"}, "gw", "other"), "n1", "", false},
		{"several audiences, no azp", id(map[string]any{"nonce": "n1"}, "gw", "other"), "n1", "", true},
		{"refresh, same subject", id(map[string]any{}, "gw"), "", "s", false},
		{"refresh, other subject", id(map[string]any{}, "gw"), "", "t", true},
	} {
		if got := o.checkIDToken(tc.id, tc.nonce, tc.subject); (got != "") != tc.wantErr {
			t.Errorf("%s: %q", tc.name, got)
		}
	}
}
