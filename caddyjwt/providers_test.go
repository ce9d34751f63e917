package caddyjwt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/apigate/gateway/internal/pathtest"
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
			if body := w.Body.String(); !strings.Contains(body, `{"error":"invalid_token","reason":"`+tc.reason+`"}`) {
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

// The ports of TestProvidersEndToEnd: the package's (admin 2901, listeners
// 19100-19199, see e2e_test.go).
const (
	providersAdminPort = 2901
	providersPort      = 19104
)

// TestProvidersEndToEnd runs the provider tests above through the real
// Caddy, one route each: the flat config's cross-issuer hole and the
// providers that close it, overlapping kids, per-provider rules,
// verifiers not shared between swapped configs, OIDC discovery down at
// load then up, a rotation and a JWKS outage, a discovery document of
// another issuer, and a JWKS with encryption keys.
//
// It runs on both request paths (Caddy's and the fast path) from one
// table and compares every response (status, header fields, body).
func TestProvidersEndToEnd(t *testing.T) {
	rec := &pathtest.Recorder{}
	for _, p := range pathtest.Both {
		t.Run(p.Name, func(t *testing.T) { testProvidersEndToEnd(t, p, rec) })
	}
	rec.Compare(t)
}

func testProvidersEndToEnd(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	k := keys(t)
	// issuers carry the run, so that no verifier (and its cache) of the
	// other path's config is shared with this one
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b)
	iss := func(name string) string { return "https://" + name + ".example/" + run }
	t.Setenv("CADDYJWT_PROVIDER_SECRET", string(testSecret))
	s1, s2 := "secret-one-0123456789abcdef0123456789", "secret-two-0123456789abcdef0123456789"

	// cross-issuer: a and b, each with its own JWKS
	a := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "a-1", "RS256")))
	bb := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa2.PublicKey, "b-1", "RS256")))
	// overlapping kids
	ka := newJWKSServer(t, jwksDoc(jwkOf(&k.p256.PublicKey, "key-1", "ES256")))
	kb := newJWKSServer(t, jwksDoc(jwkOf(&k.p256b.PublicKey, "key-1", "ES256")))
	// OIDC, down at load
	op := newOIDCServer(t)
	op.update(func(s *oidcServer) {
		s.discoveryDown = true
		s.jwks = jwksDoc(jwkOf(&k.rsa.PublicKey, "old", "RS256"))
	})
	// OIDC whose discovery names another issuer
	evil := newOIDCServer(t)
	evil.update(func(s *oidcServer) {
		s.issuer = "https://evil.example"
		s.jwks = jwksDoc(jwkOf(&k.p256.PublicKey, "ec", "ES256"))
	})
	// a JWKS with encryption keys beside the signature key
	encUse := jwkOf(&k.rsa.PublicKey, "enc-use", "RSA-OAEP")
	encUse["use"] = "enc"
	encAlg := jwkOf(&k.rsa.PublicKey, "enc-alg", "RSA-OAEP-256")
	delete(encAlg, "use")
	enc := newJWKSServer(t, jwksDoc(encUse, encAlg, jwkOf(&k.rsa2.PublicKey, "sig", "RS256")))
	ecPEM := writePEM(t, pemOf(t, &k.p256.PublicKey))

	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19100
	https_port 19101
	skip_install_trust
	grace_period 1ms
}
:%[2]d {
	route /flat {
		jwt_auth {
			jwks_url %[3]s %[4]s
			issuer %[5]s %[6]s
		}
		respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
	}
	route /providers {
		jwt_auth {
			provider a {
				issuer %[5]s
				jwks_url %[3]s
			}
			provider b {
				issuer %[6]s
				jwks_url %[4]s
			}
		}
		respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
	}
	route /kids {
		jwt_auth {
			provider a {
				issuer %[5]s
				jwks_url %[7]s
			}
			provider b {
				issuer %[6]s
				jwks_url %[8]s
			}
		}
		respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
	}
	route /rules {
		jwt_auth {
			provider svc {
				issuer %[9]s
				hmac_secret {env.CADDYJWT_PROVIDER_SECRET}
				audience svc-api
				leeway 1m
			}
			provider ec {
				issuer %[10]s
				public_key %[11]s
				algorithms ES256
				audience ec-api
			}
		}
		respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
	}
	route /one {
		jwt_auth {
			provider a {
				issuer %[12]s
				hmac_secret %[14]s
			}
			provider b {
				issuer %[13]s
				hmac_secret %[15]s
			}
		}
		respond "{http.auth.user.id}"
	}
	route /two {
		jwt_auth {
			provider a {
				issuer %[13]s
				hmac_secret %[14]s
			}
			provider b {
				issuer %[12]s
				hmac_secret %[15]s
			}
		}
		respond "{http.auth.user.id}"
	}
	route /oidc {
		jwt_auth {
			jwks_cooldown 100ms
			provider corp {
				oidc %[16]s
				audience orders-api
			}
		}
		respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
	}
	route /mismatch {
		jwt_auth {
			jwks_cooldown 100ms
			provider m {
				oidc %[17]s
			}
		}
		respond "{http.auth.user.id}"
	}
	route /enc {
		jwt_auth {
			jwks_url %[18]s
		}
		respond "{http.auth.user.id}"
	}
}
`, providersAdminPort, providersPort, a.URL, bb.URL, iss("a"), iss("b"), ka.URL, kb.URL,
		iss("svc"), iss("ec"), ecPEM, iss("x"), iss("y"), s1, s2, op.URL, evil.URL, enc.URL)
	start := time.Now()
	tester := p.Load(t, providersAdminPort, config, "srv0")
	if d := time.Since(start); d > 5*time.Second { // the load does not wait on the provider
		t.Fatalf("the load took %s", d)
	}

	rs256 := func(key any, kid, iss string, kv ...any) string {
		return sign(t, jwt.SigningMethodRS256, key, kid, claimsFor(iss, kv...))
	}
	es256 := func(key any, kid, iss string, kv ...any) string {
		return sign(t, jwt.SigningMethodES256, key, kid, claimsFor(iss, kv...))
	}
	hs256 := func(secret []byte, iss string, kv ...any) string {
		return sign(t, jwt.SigningMethodHS256, secret, "", claimsFor(iss, kv...))
	}
	expired30s := time.Now().Add(-30 * time.Second).Unix()
	oidcOld := rs256(k.rsa, "old", op.URL, "aud", "orders-api")
	oidcNew := rs256(k.rsa2, "new", op.URL, "aud", "orders-api")
	denied := func(reason string) string { return `{"error":"invalid_token","reason":"` + reason + `"}` }

	for _, tc := range []struct {
		name, path, token string
		status            int
		body              string // contained in the body
		reason            string // of a 401: the body's and WWW-Authenticate's
		before            func() // changes a provider first
		wait              bool   // repeated until it answers status (a refresh)
	}{
		// TestCrossIssuerToken: the flat config's documented hole, closed by providers
		{name: "flat: the cross-issuer token passes", path: "/flat", token: rs256(k.rsa2, "b-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "providers: the cross-issuer token", path: "/providers", token: rs256(k.rsa2, "b-1", iss("a")), status: 401, body: `"error":"invalid_token"`},
		{name: "providers: a's own token", path: "/providers", token: rs256(k.rsa, "a-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "providers: b's own token", path: "/providers", token: rs256(k.rsa2, "b-1", iss("b"), "sub", "user-2"), status: 200, body: "user-2 via " + iss("b")},
		// TestProvidersOverlappingKids
		{name: "kids: a's token", path: "/kids", token: es256(k.p256, "key-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "kids: b's token", path: "/kids", token: es256(k.p256b, "key-1", iss("b"), "sub", "user-3"), status: 200, body: "user-3 via " + iss("b")},
		{name: "kids: a's iss, b's key", path: "/kids", token: es256(k.p256b, "key-1", iss("a")), status: 401},
		{name: "kids: b's iss, a's key", path: "/kids", token: es256(k.p256, "key-1", iss("b")), status: 401},
		// TestProviderRules
		{name: "rules: svc token", path: "/rules", token: hs256(testSecret, iss("svc"), "aud", "svc-api"), status: 200, body: "user-1 via " + iss("svc")},
		{name: "rules: svc token, ec's audience", path: "/rules", token: hs256(testSecret, iss("svc"), "aud", "ec-api"), status: 401, reason: "invalid audience"},
		{name: "rules: svc leeway covers 30s", path: "/rules", token: hs256(testSecret, iss("svc"), "aud", "svc-api", "exp", expired30s, "sub", "user-4"), status: 200, body: "user-4 via " + iss("svc")},
		{name: "rules: ec has no leeway", path: "/rules", token: es256(k.p256, "", iss("ec"), "aud", "ec-api", "exp", expired30s), status: 401, reason: "token expired"},
		{name: "rules: ec token", path: "/rules", token: es256(k.p256, "", iss("ec"), "aud", "ec-api", "sub", "user-5"), status: 200, body: "user-5 via " + iss("ec")},
		{name: "rules: HS256 with ec's iss", path: "/rules", token: hs256(testSecret, iss("ec"), "aud", "ec-api"), status: 401, reason: "algorithm not allowed"},
		{name: "rules: unknown issuer", path: "/rules", token: hs256(testSecret, "https://other.example", "aud", "svc-api"), status: 401, reason: "unknown issuer"},
		{name: "rules: no iss", path: "/rules", token: sign(t, jwt.SigningMethodHS256, testSecret, "", jwt.MapClaims{"sub": "x", "aud": "svc-api"}), status: 401, reason: "unknown issuer"},
		// TestProvidersDoNotShareVerifier
		{name: "swapped: the first config", path: "/one", token: hs256([]byte(s1), iss("x")), status: 200, body: "user-1"},
		{name: "swapped: the second config refuses x's token signed with its y key", path: "/two", token: hs256([]byte(s1), iss("x")), status: 401},
		// TestOIDCProvider
		{name: "oidc: before discovery", path: "/oidc", token: oidcOld, status: 401, reason: "unknown key"},
		{name: "oidc: once discovery is up", path: "/oidc", token: oidcOld, status: 200, body: "user-1 via " + op.URL, wait: true,
			before: func() { op.update(func(s *oidcServer) { s.discoveryDown = false }) }},
		{name: "oidc: the new kid after a rotation", path: "/oidc", token: oidcNew, status: 200, body: "user-1 via " + op.URL, wait: true,
			before: func() { op.update(func(s *oidcServer) { s.jwks = jwksDoc(jwkOf(&k.rsa2.PublicKey, "new", "RS256")) }) }},
		{name: "oidc: the removed kid after the refresh", path: "/oidc", token: oidcOld, status: 401},
		{name: "oidc: an unknown kid while the JWKS is down", path: "/oidc", token: rs256(k.rsa, "unknown", op.URL, "aud", "orders-api"), status: 401,
			before: func() { op.update(func(s *oidcServer) { s.jwksDown = true }) }},
		{name: "oidc: the new kid while the JWKS is down", path: "/oidc", token: oidcNew, status: 200, body: "user-1 via " + op.URL},
		// TestOIDCIssuerMismatch
		{name: "mismatch: no keys from another issuer's discovery", path: "/mismatch", token: es256(k.p256, "ec", evil.URL), status: 401},
		{name: "mismatch: keys once the issuer is fixed", path: "/mismatch", token: es256(k.p256, "ec", evil.URL), status: 200, body: "user-1", wait: true,
			before: func() { evil.update(func(s *oidcServer) { s.issuer = "" }) }},
		// TestJWKSEncryptionKeysSkipped
		{name: "enc: a token of an encryption key", path: "/enc", token: rs256(k.rsa, "enc-alg", "x"), status: 401, reason: "unknown key"},
		{name: "enc: a token of the signature key", path: "/enc", token: rs256(k.rsa2, "sig", "x"), status: 200, body: "user-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			get := func() (*http.Response, string) {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", providersPort, tc.path), nil)
				req.Header.Set("Authorization", "Bearer "+tc.token)
				resp, err := tester.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp, string(body)
			}
			resp, body := get()
			for deadline := time.Now().Add(10 * time.Second); tc.wait && resp.StatusCode != tc.status && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				resp, body = get()
			}
			rec.Add(p, tc.name, pathtest.Resp(resp.StatusCode, resp.Header, body, run, "RUN", op.URL, "OP", evil.URL, "EVIL"))
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if tc.reason == "" {
				return
			}
			if !strings.Contains(body, denied(tc.reason)) {
				t.Fatalf("body %s", body)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer error="invalid_token", error_description="`+tc.reason+`"` {
				t.Fatalf("WWW-Authenticate %q", got)
			}
		})
	}
}
