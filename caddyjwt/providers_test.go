package caddyjwt

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// oidcServer is a real OpenID Provider stand-in: it serves its discovery
// document and its JWK Set, each of which a test can take down or change.
type oidcServer struct {
	*httptest.Server
	mu            sync.Mutex
	issuer        string // "" : the server's own URL
	jwks          []byte
	discoveryDown bool
	jwksDown      bool
}

func newOIDCServer(t testing.TB) *oidcServer {
	s := &oidcServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			if s.discoveryDown {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			iss := s.issuer
			if iss == "" {
				iss = s.URL
			}
			json.NewEncoder(w).Encode(map[string]any{"issuer": iss, "jwks_uri": s.URL + "/protocol/openid-connect/certs"})
		case "/protocol/openid-connect/certs":
			if s.jwksDown {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			w.Write(s.jwks)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *oidcServer) update(fn func(s *oidcServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func claimsFor(iss string, kv ...any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "user-1", "iss": iss, "exp": time.Now().Add(time.Hour).Unix()}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i].(string)] = kv[i+1]
	}
	return c
}

// serve runs the handler on a request with token and returns the status,
// the body and whether the next handler ran.
func serve(j *JWTAuth, token string) (int, string, bool) {
	r := request("GET", "/")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	rec := &recorder{}
	j.ServeHTTP(w, r, rec)
	return w.Code, w.Body.String(), rec.called
}

// TestCrossIssuerToken shows the hole of a flat config with two issuers and
// two key sources (a token claiming issuer A, signed with issuer B's key,
// is accepted) and that providers close it.
func TestCrossIssuerToken(t *testing.T) {
	k := keys(t)
	a := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "a-1", "RS256")))
	b := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa2.PublicKey, "b-1", "RS256")))
	const issA, issB = "https://a.example", "https://b.example"
	// claims iss A, signed by B
	forged := sign(t, jwt.SigningMethodRS256, k.rsa2, "b-1", claimsFor(issA))

	flat := &JWTAuth{JWKSURLs: []string{a.URL, b.URL}, Issuers: []string{issA, issB}}
	provision(t, flat)
	if code, _, _ := serve(flat, forged); code != http.StatusTeapot {
		t.Fatalf("flat config: the cross-issuer token got %d; the documented flat semantics accept it", code)
	}

	j := &JWTAuth{Providers: []IdentityProvider{
		{Name: "a", Issuer: issA, JWKSURLs: []string{a.URL}},
		{Name: "b", Issuer: issB, JWKSURLs: []string{b.URL}},
	}}
	provision(t, j)
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	code, body, called := serve(j, forged)
	if code != http.StatusUnauthorized || called || !strings.Contains(body, `"error":"invalid_token"`) {
		t.Fatalf("providers: the cross-issuer token got %d %s", code, body)
	}
	// each issuer's own tokens still pass
	for _, tok := range []string{
		sign(t, jwt.SigningMethodRS256, k.rsa, "a-1", claimsFor(issA)),
		sign(t, jwt.SigningMethodRS256, k.rsa2, "b-1", claimsFor(issB)),
	} {
		if code, body, _ := serve(j, tok); code != http.StatusTeapot {
			t.Fatalf("own token: %d %s", code, body)
		}
	}
}

// TestProvidersOverlappingKids: two providers publish the same kid with
// different keys; each token verifies with its own provider's key only.
func TestProvidersOverlappingKids(t *testing.T) {
	k := keys(t)
	a := newJWKSServer(t, jwksDoc(jwkOf(&k.p256.PublicKey, "key-1", "ES256")))
	b := newJWKSServer(t, jwksDoc(jwkOf(&k.p256b.PublicKey, "key-1", "ES256")))
	j := &JWTAuth{Providers: []IdentityProvider{
		{Name: "a", Issuer: "https://a.example", JWKSURLs: []string{a.URL}},
		{Name: "b", Issuer: "https://b.example", JWKSURLs: []string{b.URL}},
	}}
	provision(t, j)
	cases := []struct {
		name string
		key  any
		iss  string
		want int
	}{
		{"a's token", k.p256, "https://a.example", http.StatusTeapot},
		{"b's token", k.p256b, "https://b.example", http.StatusTeapot},
		{"a's iss, b's key", k.p256b, "https://a.example", http.StatusUnauthorized},
		{"b's iss, a's key", k.p256, "https://b.example", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := serve(j, sign(t, jwt.SigningMethodES256, tc.key, "key-1", claimsFor(tc.iss)))
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
		})
	}
}

// TestProviderRules: an unknown issuer is refused with its own reason, and
// each provider's algorithms, audience and leeway apply to its tokens only.
func TestProviderRules(t *testing.T) {
	k := keys(t)
	t.Setenv("CADDYJWT_PROVIDER_SECRET", string(testSecret))
	j := &JWTAuth{Providers: []IdentityProvider{
		{Name: "svc", Issuer: "https://svc.example", HMACSecrets: []string{"{env.CADDYJWT_PROVIDER_SECRET}"},
			Audiences: []string{"svc-api"}, Leeway: caddy.Duration(time.Minute)},
		{Name: "ec", Issuer: "https://ec.example", PublicKeys: []string{writePEM(t, pemOf(t, &k.p256.PublicKey))},
			Algorithms: []string{"ES256"}, Audiences: []string{"ec-api"}},
	}}
	provision(t, j)
	expired30s := time.Now().Add(-30 * time.Second).Unix()
	cases := []struct {
		name   string
		token  string
		want   int
		reason string
	}{
		{"svc token", sign(t, jwt.SigningMethodHS256, testSecret, "", claimsFor("https://svc.example", "aud", "svc-api")), 418, ""},
		{"svc token, ec's audience", sign(t, jwt.SigningMethodHS256, testSecret, "", claimsFor("https://svc.example", "aud", "ec-api")), 401, "invalid audience"},
		{"svc leeway covers 30s", sign(t, jwt.SigningMethodHS256, testSecret, "", claimsFor("https://svc.example", "aud", "svc-api", "exp", expired30s)), 418, ""},
		{"ec has no leeway", sign(t, jwt.SigningMethodES256, k.p256, "", claimsFor("https://ec.example", "aud", "ec-api", "exp", expired30s)), 401, "token expired"},
		{"ec token", sign(t, jwt.SigningMethodES256, k.p256, "", claimsFor("https://ec.example", "aud", "ec-api")), 418, ""},
		{"HS256 with ec's iss", sign(t, jwt.SigningMethodHS256, testSecret, "", claimsFor("https://ec.example", "aud", "ec-api")), 401, "algorithm not allowed"},
		{"unknown issuer", sign(t, jwt.SigningMethodHS256, testSecret, "", claimsFor("https://other.example", "aud", "svc-api")), 401, "unknown issuer"},
		{"no iss", sign(t, jwt.SigningMethodHS256, testSecret, "", jwt.MapClaims{"sub": "x", "aud": "svc-api"}), 401, "unknown issuer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request("GET", "/")
			r.Header.Set("Authorization", "Bearer "+tc.token)
			w := httptest.NewRecorder()
			j.ServeHTTP(w, r, &recorder{})
			if w.Code != tc.want {
				t.Fatalf("got %d %s, want %d", w.Code, w.Body, tc.want)
			}
			if tc.reason == "" {
				return
			}
			if body := w.Body.String(); !strings.Contains(body, `"error":"invalid_token","reason":"`+tc.reason+`"}`) {
				t.Fatalf("body %s", body)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != `Bearer error="invalid_token", error_description="`+tc.reason+`"` {
				t.Fatalf("WWW-Authenticate %q", got)
			}
		})
	}
}

func writePEM(t *testing.T, data []byte) string {
	t.Helper()
	path := t.TempDir() + "/key.pem"
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestProvidersDoNotShareVerifier: two configs that bind the same keys to
// swapped issuers must not share a verifier, or a token verified (and
// cached) for one would be accepted by the other.
func TestProvidersDoNotShareVerifier(t *testing.T) {
	s1, s2 := "secret-one-0123456789abcdef0123456789", "secret-two-0123456789abcdef0123456789"
	one := &JWTAuth{Providers: []IdentityProvider{
		{Name: "a", Issuer: "https://x.example", HMACSecrets: []string{s1}},
		{Name: "b", Issuer: "https://y.example", HMACSecrets: []string{s2}},
	}}
	two := &JWTAuth{Providers: []IdentityProvider{
		{Name: "a", Issuer: "https://y.example", HMACSecrets: []string{s1}},
		{Name: "b", Issuer: "https://x.example", HMACSecrets: []string{s2}},
	}}
	provision(t, one)
	provision(t, two)
	tok := sign(t, jwt.SigningMethodHS256, []byte(s1), "", claimsFor("https://x.example"))
	if code, body, _ := serve(one, tok); code != http.StatusTeapot {
		t.Fatalf("first config: %d %s", code, body)
	}
	if code, _, _ := serve(two, tok); code != http.StatusUnauthorized {
		t.Fatalf("second config accepted a token of x signed with its y key: %d", code)
	}
}

// TestOIDCProvider runs a provider through discovery against a real
// stand-in: down at load, up later, then a key rotation and a JWKS outage.
func TestOIDCProvider(t *testing.T) {
	k := keys(t)
	op := newOIDCServer(t)
	op.update(func(s *oidcServer) {
		s.discoveryDown = true
		s.jwks = jwksDoc(jwkOf(&k.rsa.PublicKey, "old", "RS256"))
	})
	j := &JWTAuth{JWKSCooldown: caddy.Duration(100 * time.Millisecond), Providers: []IdentityProvider{
		{Name: "corp", OIDC: op.URL, Audiences: []string{"orders-api"}},
	}}
	start := time.Now()
	provision(t, j) // the load does not wait on the provider
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Provision took %s", d)
	}
	oldTok := sign(t, jwt.SigningMethodRS256, k.rsa, "old", claimsFor(op.URL, "aud", "orders-api"))
	if code, body, _ := serve(j, oldTok); code != 401 || !strings.Contains(body, "unknown key") {
		t.Fatalf("before discovery: %d %s", code, body)
	}
	op.update(func(s *oidcServer) { s.discoveryDown = false })
	waitFor(t, "tokens to verify once discovery is up", func() bool { code, _, _ := serve(j, oldTok); return code == 418 })

	// rotation: old kid removed, new kid added
	op.update(func(s *oidcServer) { s.jwks = jwksDoc(jwkOf(&k.rsa2.PublicKey, "new", "RS256")) })
	newTok := sign(t, jwt.SigningMethodRS256, k.rsa2, "new", claimsFor(op.URL, "aud", "orders-api"))
	waitFor(t, "the new kid to verify", func() bool { code, _, _ := serve(j, newTok); return code == 418 })
	if code, _, _ := serve(j, oldTok); code != 401 {
		t.Fatalf("token of the removed kid after the refresh: %d", code)
	}

	// the JWKS goes down: the last good keys stay
	op.update(func(s *oidcServer) { s.jwksDown = true })
	if code, _, _ := serve(j, sign(t, jwt.SigningMethodRS256, k.rsa, "unknown", claimsFor(op.URL, "aud", "orders-api"))); code != 401 {
		t.Fatalf("unknown kid: %d", code)
	}
	if code, body, _ := serve(j, newTok); code != 418 {
		t.Fatalf("new kid while the JWKS is down: %d %s", code, body)
	}
}

// TestOIDCDiscoveryRetriesInBackground: with no request at all, discovery
// that failed at start is retried with backoff until it succeeds.
func TestOIDCDiscoveryRetriesInBackground(t *testing.T) {
	k := keys(t)
	op := newOIDCServer(t)
	op.update(func(s *oidcServer) {
		s.discoveryDown = true
		s.jwks = jwksDoc(jwkOf(&k.p256.PublicKey, "ec", "ES256"))
	})
	s := NewOIDCKeySet(OIDCConfig{Issuer: op.URL, JWKS: JWKSConfig{Refresh: time.Hour}})
	s.Start()
	defer s.Stop()
	waitFor(t, "the first discovery attempt", func() bool {
		select {
		case <-s.discovered:
			return true
		default:
			return false
		}
	})
	if len(s.Keys()) != 0 {
		t.Fatal("keys while discovery is down")
	}
	op.update(func(s *oidcServer) { s.discoveryDown = false })
	waitFor(t, "keys after discovery came up", func() bool { return len(s.Keys()) == 1 })
	if s.JWKSURL() != op.URL+"/protocol/openid-connect/certs" {
		t.Fatalf("jwks_uri %q", s.JWKSURL())
	}
}

// TestOIDCIssuerMismatch: a discovery document naming another issuer is
// refused, logged, and the provider has no keys until it is fixed.
func TestOIDCIssuerMismatch(t *testing.T) {
	k := keys(t)
	op := newOIDCServer(t)
	op.update(func(s *oidcServer) {
		s.issuer = "https://evil.example"
		s.jwks = jwksDoc(jwkOf(&k.p256.PublicKey, "ec", "ES256"))
	})
	core, logs := observer.New(zapcore.DebugLevel)
	s := NewOIDCKeySet(OIDCConfig{Issuer: op.URL, JWKS: JWKSConfig{Logger: zap.New(core)}})
	s.Start()
	defer s.Stop()
	if s.RefreshEarly(context.Background()) || len(s.Keys()) != 0 {
		t.Fatal("keys from a discovery document of another issuer")
	}
	if n := logs.FilterMessageSnippet("OIDC discovery failed").FilterFieldKey("error").Len(); n == 0 {
		t.Fatalf("mismatch not logged: %v", logs.All())
	}
	var msg string
	for _, e := range logs.All() {
		if err, ok := e.ContextMap()["error"].(string); ok {
			msg = err
		}
	}
	if !strings.Contains(msg, `issuer mismatch`) || !strings.Contains(msg, `"https://evil.example"`) {
		t.Fatalf("error %q", msg)
	}
	op.update(func(s *oidcServer) { s.issuer = "" })
	waitFor(t, "keys once the issuer is fixed", func() bool { s.RefreshEarly(context.Background()); return len(s.Keys()) == 1 })
}

// TestJWKSEncryptionKeysSkipped: Keycloak publishes an RSA-OAEP key beside
// its signature key; it is skipped as an encryption key (debug log), never
// used to verify, and the signature key works.
func TestJWKSEncryptionKeysSkipped(t *testing.T) {
	k := keys(t)
	encUse := jwkOf(&k.rsa.PublicKey, "enc-use", "RSA-OAEP")
	encUse["use"] = "enc"
	encAlg := jwkOf(&k.rsa.PublicKey, "enc-alg", "RSA-OAEP-256")
	delete(encAlg, "use")
	encEC := jwkOf(&k.p256.PublicKey, "enc-ecdh", "ECDH-ES+A256KW")
	delete(encEC, "use")
	wrap := jwkOf(&k.rsa.PublicKey, "wrap", "")
	delete(wrap, "use")
	wrap["key_ops"] = []string{"wrapKey", "encrypt"}
	sig := jwkOf(&k.rsa2.PublicKey, "sig", "RS256")
	doc := jwksDoc(encUse, encAlg, encEC, wrap, sig)

	got, skipped, enc, err := parseJWKS(doc, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "sig" || len(skipped) != 0 || len(enc) != 4 {
		t.Fatalf("keys %d, skipped %q, enc %q", len(got), skipped, enc)
	}

	srv := newJWKSServer(t, doc)
	core, logs := observer.New(zapcore.DebugLevel)
	set := NewJWKSet(JWKSConfig{URL: srv.URL, Logger: zap.New(core)})
	set.Start()
	defer set.Stop()
	waitFor(t, "the first fetch", set.Loaded)
	if logs.FilterMessage("skipping JWKS encryption key").FilterLevelExact(zapcore.DebugLevel).Len() != 1 ||
		logs.FilterMessage("skipping JWKS key").Len() != 0 {
		t.Fatalf("logs: %v", logs.All())
	}
	v, err := NewVerifier(Options{}, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa, "enc-alg", claimsFor("x"))); err != ErrUnknownKey {
		t.Fatalf("token of the encryption key: %v", err)
	}
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa2, "sig", claimsFor("x"))); err != nil {
		t.Fatal(err)
	}
}
