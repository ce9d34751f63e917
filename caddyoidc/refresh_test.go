package caddyoidc

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/internal/credential"
	"github.com/apigate/gateway/internal/testkit/oidcop"
)

// Ports: the provider 20691, the gateway 20625 (this package's range).
const refreshGW = "http://127.0.0.1:20625"

// TestRefreshOncePerFleet: two gateways (their own caches, one storage)
// find the same session's access token expiring at the same moment; the
// provider sees one refresh, and both serve the refreshed tokens. A
// refresh the provider refuses ends the session.
func TestRefreshOncePerFleet(t *testing.T) {
	const secret = "refresh-test-client-secret-0123456789abcdef"
	op, err := oidcop.Start("127.0.0.1:20691", oidcop.Client{ID: "gateway-refresh", Secret: secret, RedirectURIs: []string{refreshGW + "/oauth2/callback"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Close() })
	ks := caddyjwt.NewOIDCKeySet(caddyjwt.OIDCConfig{Issuer: op.Issuer})
	ks.Start()
	t.Cleanup(ks.Stop)
	st := &certmagic.FileStorage{Path: t.TempDir()}
	mk := func() *OIDCLogin {
		o := &OIDCLogin{Issuer: op.Issuer, ClientID: "gateway-refresh", ClientSecret: secret,
			Scopes: []string{"openid", "email", "offline_access"}}
		o.setDefaults()
		o.secret, o.now, o.logger, o.client = secret, time.Now, zap.NewNop(), &http.Client{Timeout: 10 * time.Second}
		ring, err := o.keyring(caddy.NewReplacer())
		if err != nil {
			t.Fatal(err)
		}
		o.keySet = ks
		if o.verifier, err = caddyjwt.NewProvidersVerifier(caddyjwt.Options{CacheSize: -1},
			[]caddyjwt.Provider{{Name: "t", Issuer: op.Issuer, Sets: []caddyjwt.KeySet{ks}, Audiences: []string{o.ClientID}, Leeway: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		o.login = &loginState{cache: newCache(100)}
		o.sessions = &Sessions{Storage: st, Ring: ring, Prefix: "oidc_login/" + namespace(o.Issuer, o.ClientID),
			TTL: time.Hour, Idle: time.Hour, Now: time.Now, cache: o.login.cache}
		o.sources[0] = []credential.TokenSource{{Kind: credential.FromCookie, Name: o.CookieName}}
		return o
	}
	a, b := mk(), mk()
	a.sessions.Bus = busFunc(func(m Invalidation) { b.login.cache.Apply(m) })
	b.sessions.Bus = busFunc(func(m Invalidation) { a.login.cache.Apply(m) })

	// gateway a serves the login
	ln, err := net.Listen("tcp", "127.0.0.1:20625")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
		_ = a.ServeHTTP(w, r.WithContext(ctx), caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			_, err := w.Write([]byte("in"))
			return err
		}))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	br := oidcop.NewBrowser()
	if _, status, body, err := br.Login(refreshGW+"/", op.Username(), oidcop.Password); err != nil || body != "in" {
		t.Fatalf("login: %d %q %v", status, body, err)
	}
	u, _ := url.Parse(refreshGW)
	var cookie string
	for _, c := range br.Jar.Cookies(u) {
		if c.Name == "gateway_session" {
			cookie = c.Value
		}
	}
	ctx := context.Background()
	ea, _ := a.sessions.Lookup(ctx, cookie)
	eb, _ := b.sessions.Lookup(ctx, cookie)
	if ea == nil || eb == nil || ea.sess.RefreshToken == "" {
		t.Fatalf("the session on both gateways, with a refresh token: %v %v", ea, eb)
	}
	oldAccess := ea.sess.AccessToken

	before := op.TokenRequests("refresh_token")
	var wg sync.WaitGroup
	results := make([]string, 2)
	for i, g := range []struct {
		o *OIDCLogin
		e *entry
	}{{a, ea}, {b, eb}} {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = g.o.refresh(ctx, cookie, g.e) }()
	}
	wg.Wait()
	// the one that found the lock taken reads the refreshed session (the
	// other's invalidation dropped its cached copy)
	for i, g := range []*OIDCLogin{a, b} {
		if results[i] == "busy" {
			if e, _ := g.sessions.Lookup(ctx, cookie); e != nil && e.sess.AccessToken != oldAccess {
				results[i] = "adopted"
			}
		}
	}
	if n := op.TokenRequests("refresh_token") - before; n != 1 {
		t.Fatalf("the provider saw %d refreshes of one session by two gateways (results %v), want 1", n, results)
	}
	if !(results[0] == "ok" && results[1] == "adopted" || results[0] == "adopted" && results[1] == "ok") {
		t.Errorf("results %v: want one ok and one adopted", results)
	}
	for name, g := range map[string]*OIDCLogin{"a": a, "b": b} {
		e, _ := g.sessions.Lookup(ctx, cookie)
		if e == nil || e.sess.AccessToken == oldAccess || e.sess.AccessToken == "" {
			t.Errorf("gateway %s does not serve the refreshed tokens", name)
		}
	}

	// the provider refuses the refresh token (the user was logged out
	// there): the session ends on both gateways
	e, _ := a.sessions.Lookup(ctx, cookie)
	e.sess.RefreshToken = "revoked-" + strings.Repeat("x", 8)
	if err := a.sessions.save(ctx, e.name, e.sess); err != nil {
		t.Fatal(err)
	}
	e.sess.TokenExpiry = time.Now().Add(time.Hour) // the stored copy is not newer
	cur, _ := a.sessions.load(ctx, e.name)
	e.sess = cur
	if r := a.refresh(ctx, cookie, e); r != "revoked" {
		t.Fatalf("a refused refresh: %s", r)
	}
	for name, g := range map[string]*OIDCLogin{"a": a, "b": b} {
		if e, _ := g.sessions.Lookup(ctx, cookie); e != nil {
			t.Errorf("gateway %s still serves a session whose refresh the provider refused", name)
		}
	}
}
