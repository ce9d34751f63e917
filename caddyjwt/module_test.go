package caddyjwt

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

func provision(t *testing.T, j *JWTAuth) caddy.Context {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := j.Provision(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { j.Cleanup() })
	return ctx
}

// request builds a request carrying what Caddy's server puts in a
// request's context: the vars table and the replacer.
func request(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
}

type recorder struct {
	called bool
	r      *http.Request
	id     *Identity
	userID string
	roles  string
	absent string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	rec.called = true
	rec.r = r
	rec.id, _ = FromRequest(r)
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	rec.userID = repl.ReplaceAll("{http.auth.user.id}", "-")
	rec.roles = repl.ReplaceAll("{http.auth.jwt.claims.realm_access.roles}", "-")
	rec.absent = repl.ReplaceKnown("[{http.auth.jwt.claims.nope}]", "")
	w.WriteHeader(http.StatusTeapot)
	return nil
}

func TestServeHTTP(t *testing.T) {
	t.Setenv("CADDYJWT_TEST_SECRET", string(testSecret))
	j := &JWTAuth{
		HMACSecrets:   []string{"{env.CADDYJWT_TEST_SECRET}"},
		Issuers:       []string{"https://idp.example"},
		FromHeaders:   []string{"Authorization"},
		FromCookies:   []string{"access_token"},
		ForwardClaims: []ForwardClaim{{Claim: "sub", Header: "x-user-id"}, {Claim: "realm_access.roles", Header: "X-Roles"}},
		StripToken:    true,
		Realm:         "orders",
	}
	ctx := provision(t, j)
	now := time.Now()
	claims := jwt.MapClaims{
		"sub": "user-1", "iss": "https://idp.example", "exp": now.Add(time.Hour).Unix(),
		"realm_access": map[string]any{"roles": []string{"admin", "editor"}},
	}
	good := sign(t, jwt.SigningMethodHS256, testSecret, "", claims)
	expired := sign(t, jwt.SigningMethodHS256, testSecret, "", with(claims, "exp", now.Add(-time.Hour).Unix()))

	cases := []struct {
		name      string
		setup     func(r *http.Request)
		status    int
		challenge string
		body      string
		denial    string
	}{
		{"valid bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+good) }, 418, "", "", ""},
		{"valid cookie", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "access_token", Value: good}) }, 418, "", "", ""},
		{"missing token", func(r *http.Request) {}, 401, `Bearer realm="orders"`,
			`{"error":"unauthorized","reason":"missing token"}`, "missing token"},
		{"expired", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+expired) }, 401,
			`Bearer error="invalid_token", error_description="token expired"`,
			`{"error":"invalid_token","reason":"token expired"}`, "token expired"},
		{"garbage", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, 401,
			`Bearer error="invalid_token", error_description="malformed token"`,
			`{"error":"invalid_token","reason":"malformed token"}`, "malformed token"},
		{"too large", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 9000)) }, 401,
			`Bearer error="invalid_token", error_description="token too large"`,
			`{"error":"invalid_token","reason":"token too large"}`, "token too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request("GET", "/orders")
			r.Header.Set("X-User-Id", "spoofed")
			r.Header.Set("X-Roles", "root")
			tc.setup(r)
			w := httptest.NewRecorder()
			rec := &recorder{}
			if err := j.ServeHTTP(w, r, rec); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tc.status, w.Body)
			}
			if r.Header.Get("X-User-Id") == "spoofed" || r.Header.Get("X-Roles") == "root" {
				t.Fatal("client-sent forward_claim header survived")
			}
			if tc.status != 418 {
				if rec.called {
					t.Fatal("next handler called on a denial")
				}
				if got := w.Header().Get("WWW-Authenticate"); got != tc.challenge {
					t.Fatalf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
				if err := problemtest.Extends(w.Body.String(), tc.status, tc.body, "/orders"); err != nil {
					t.Fatal(err)
				}
				if ct := w.Header().Get("Content-Type"); ct != problemtest.ContentType {
					t.Fatalf("content type %q", ct)
				}
				if by, reason := identity.Denial(r); by != "jwt_auth" || reason != tc.denial {
					t.Fatalf("denial (%q, %q)", by, reason)
				}
				return
			}
			if rec.id == nil || rec.id.Subject != "user-1" {
				t.Fatalf("identity %+v", rec.id)
			}
			if rec.userID != "user-1" || rec.roles != "admin,editor" || rec.absent != "[]" {
				t.Fatalf("placeholders: user %q roles %q absent %q", rec.userID, rec.roles, rec.absent)
			}
			h := rec.r.Header
			if h.Get("X-User-Id") != "user-1" || h.Get("X-Roles") != "admin,editor" {
				t.Fatalf("forwarded headers %v", h)
			}
			if h.Get("Authorization") != "" || strings.Contains(h.Get("Cookie"), "access_token") {
				t.Fatalf("token not stripped: %v", h)
			}
		})
	}

	reg := ctx.GetMetricsRegistry()
	if n := counterValue(j.metrics.verifications.WithLabelValues("invalid", "token expired")); n != 1 {
		t.Fatalf("expired counter = %v", n)
	}
	if n := counterValue(j.metrics.valid); n != 2 {
		t.Fatalf("valid counter = %v", n)
	}
	if n := counterValue(j.metrics.cacheHits); n != 1 {
		t.Fatalf("cache hits = %v", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
	}
	for _, name := range []string{"gateway_jwt_verifications_total", "gateway_jwt_cache_hits_total", "gateway_jwt_cache_misses_total"} {
		if !found[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
}

func TestServeHTTPOptional(t *testing.T) {
	j := &JWTAuth{HMACSecrets: []string{string(testSecret)}, Optional: true, ForwardClaims: []ForwardClaim{{Claim: "sub", Header: "X-User-Id"}}}
	provision(t, j)

	r := request("GET", "/")
	r.Header.Set("X-User-Id", "spoofed")
	w := httptest.NewRecorder()
	rec := &recorder{}
	j.ServeHTTP(w, r, rec)
	if w.Code != 418 || rec.id != nil || r.Header.Get("X-User-Id") != "" {
		t.Fatalf("anonymous: code %d id %v header %q", w.Code, rec.id, r.Header.Get("X-User-Id"))
	}

	r = request("GET", "/")
	r.Header.Set("Authorization", "Bearer x.y.z")
	w = httptest.NewRecorder()
	rec = &recorder{}
	j.ServeHTTP(w, r, rec)
	if w.Code != 401 || rec.called {
		t.Fatalf("bad token in optional mode: %d", w.Code)
	}
}

func TestProvisionKeySources(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	pemPath := filepath.Join(dir, "issuer.pem")
	os.WriteFile(pemPath, append(pemOf(t, &k.rsa.PublicKey), pemOf(t, k.ed.Public())...), 0o600)
	secretPath := filepath.Join(dir, "secret")
	os.WriteFile(secretPath, append(testSecret, '\n'), 0o600)
	srv := newJWKSServer(t, jwksDoc(jwkOf(&k.p256.PublicKey, "ec-1", "ES256")))

	j := &JWTAuth{
		HMACSecrets: []string{"{file." + secretPath + "}"},
		PublicKeys:  []string{pemPath},
		JWKSURLs:    []string{srv.URL},
	}
	provision(t, j)
	claims := jwt.MapClaims{"sub": "s", "exp": time.Now().Add(time.Hour).Unix()}
	for _, tok := range []string{
		sign(t, jwt.SigningMethodHS512, testSecret, "", claims),
		sign(t, jwt.SigningMethodPS256, k.rsa, "", claims),
		sign(t, jwt.SigningMethodEdDSA, k.ed, "", claims),
		sign(t, jwt.SigningMethodES256, k.p256, "ec-1", claims),
	} {
		if _, err := j.Verifier().Verify(context.Background(), tok); err != nil {
			t.Errorf("verify: %v", err)
		}
	}
}

func TestProvisionErrors(t *testing.T) {
	dir := t.TempDir()
	priv := filepath.Join(dir, "priv.pem")
	k := keys(t)
	der, _ := json.Marshal("x")
	_ = der
	os.WriteFile(priv, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	_ = k
	cases := []struct {
		name string
		j    JWTAuth
		want string
	}{
		{"no keys", JWTAuth{}, "no key configured"},
		{"unset env", JWTAuth{HMACSecrets: []string{"{env.CADDYJWT_SURELY_UNSET}"}}, "hmac_secret #1 is empty"},
		{"missing pem", JWTAuth{PublicKeys: []string{filepath.Join(dir, "nope.pem")}}, "public_key"},
		{"private pem", JWTAuth{PublicKeys: []string{priv}}, "is a private key"},
		{"bad jwks url", JWTAuth{JWKSURLs: []string{"ftp://x"}}, "invalid jwks_url"},
		{"bad algorithm", JWTAuth{HMACSecrets: []string{"s"}, Algorithms: []string{"none"}}, `"none" is never accepted`},
		{"negative leeway", JWTAuth{HMACSecrets: []string{"s"}, Leeway: -1}, "invalid leeway"},
		{"tiny refresh", JWTAuth{JWKSURLs: []string{"http://127.0.0.1:1/"}, JWKSRefresh: caddy.Duration(time.Millisecond)}, "invalid jwks_refresh"},
		{"bad header", JWTAuth{HMACSecrets: []string{"s"}, ForwardClaims: []ForwardClaim{{Claim: "sub", Header: "X Bad"}}}, "invalid forward_claim header"},
		{"bad claim path", JWTAuth{HMACSecrets: []string{"s"}, ForwardClaims: []ForwardClaim{{Claim: "a..b", Header: "X-A"}}}, "forward_claim"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			j := tc.j
			err := j.Provision(ctx)
			if err == nil {
				err = j.Validate() // as Caddy does, after Provision
			}
			j.Cleanup()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), string(testSecret)) {
				t.Fatal("error leaks the secret")
			}
		})
	}
}

func TestPoolsOutliveReload(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", "")))
	a := JWTAuth{JWKSURLs: []string{srv.URL}}
	b := JWTAuth{JWKSURLs: []string{srv.URL}, JWKSRefresh: caddy.Duration(DefaultJWKSRefresh)} // same as the default
	ctxA, cancelA := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := a.Provision(ctxA); err != nil {
		t.Fatal(err)
	}
	// the first fetch runs in the background: count from its end, or a
	// slow machine reads 0 here and blames the reload for it
	for deadline := time.Now().Add(10 * time.Second); srv.hits.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first JWKS fetch never came")
		}
	}
	hits := srv.hits.Load()
	// the reload provisions the new config before cleaning up the old one
	ctxB, cancelB := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancelB()
	if err := b.Provision(ctxB); err != nil {
		t.Fatal(err)
	}
	a.Cleanup()
	cancelA()
	if a.Verifier() != b.Verifier() {
		t.Fatal("verifier (and its token cache) not shared across the reload")
	}
	if srv.hits.Load() != hits {
		t.Fatal("reload fetched the JWKS again")
	}
	tok := sign(t, jwt.SigningMethodRS256, k.rsa, "k1", jwt.MapClaims{"sub": "s", "exp": time.Now().Add(time.Hour).Unix()})
	if _, err := b.Verifier().Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	if refs, ok := jwksPool.References(b.jwksKeys[0]); !ok || refs != 1 {
		t.Fatalf("jwks refs = %d %v", refs, ok)
	}
	set := b.Verifier().sets[0].(*JWKSet)
	b.Cleanup()
	select {
	case <-set.ctx.Done(): // the last user stopped the fetcher
	default:
		t.Fatal("JWKS fetcher still running after the last Cleanup")
	}
	if _, ok := jwksPool.References(b.jwksKeys[0]); ok {
		t.Fatal("JWKS fetcher still pooled")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
