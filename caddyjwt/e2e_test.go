package caddyjwt_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package (see the team brief): admin 2901, listeners
// 19100-19199.
const (
	adminPort   = 2901
	listen      = 19102
	metricsPort = 19103 // the metrics handler's own server, as in Caddyfile.example
	claimsPort  = 19105 // TestClaimsPlaceholdersPerRequest
)

// globalOptions are the Caddyfile global options of the package's
// end-to-end tests.
var globalOptions = fmt.Sprintf(`{
	admin localhost:%d
	http_port 19100
	https_port 19101
	skip_install_trust
	grace_period 1ms
}`, adminPort)

// idp is a real JWKS endpoint whose keys a test rotates.
type idp struct {
	srv  *httptest.Server
	mu   sync.Mutex
	doc  []byte
	down bool
	hits atomic.Int32
}

func newIDP(t *testing.T) *idp {
	p := &idp{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		p.mu.Lock()
		doc, down := p.doc, p.down
		p.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(doc)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) serve(keys map[string]*rsa.PrivateKey) {
	var list []map[string]any
	for kid, k := range keys {
		list = append(list, map[string]any{
			"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
			"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
		})
	}
	doc, _ := json.Marshal(map[string]any{"keys": list})
	p.mu.Lock()
	p.doc, p.down = doc, false
	p.mu.Unlock()
}

func (p *idp) setDown() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
}

// upstream is a real HTTP server that records the headers it received.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	last http.Header
	uri  string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.uri = r.RequestURI
		u.mu.Unlock()
		io.WriteString(w, "upstream ok")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() (http.Header, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last, u.uri
}

func rsaSign(t *testing.T, k *rsa.PrivateKey, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEndToEnd runs jwt_auth in the real Caddy: a JWKS whose keys rotate
// and whose IdP goes down, forwarded claims, placeholders, an HMAC route,
// an optional route and the metrics.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body), the headers the upstream
// received, and how much each gateway_jwt_verifications_total series grew
// (but the unknown-key one, which counts the polls of a wait).
func TestEndToEnd(t *testing.T) {
	pathtest.Run(t, testEndToEnd)
}

func testEndToEnd(t *testing.T, path pathtest.Path, rec *pathtest.Recorder) {
	k1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	secret := "e2e-secret-0123456789abcdef0123456789"
	t.Setenv("CADDYJWT_E2E_SECRET", secret)

	p := newIDP(t)
	p.serve(map[string]*rsa.PrivateKey{"k1": k1})
	up := newUpstream(t)
	upAddr := strings.TrimPrefix(up.srv.URL, "http://")

	tester := path.Load(t, adminPort, fmt.Sprintf(`
%[1]s
:%[2]d {
	route /api/* {
		jwt_auth {
			jwks_url %[3]s
			jwks_cooldown 100ms
			algorithms RS256
			issuer https://idp.test
			audience orders-api
			forward_claim sub X-User-Id
			forward_claim realm_access.roles X-Roles
			strip_token
		}
		reverse_proxy %[4]s
	}
	route /h1api/* {
		jwt_auth {
			jwks_url %[3]s
			jwks_cooldown 100ms
			algorithms RS256
			issuer https://idp.test
			audience orders-api
			forward_claim sub X-User-Id
			forward_claim realm_access.roles X-Roles
			strip_token
		}
		reverse_proxy %[4]s {
			transport h1
		}
	}
	route /whoami {
		jwt_auth {
			jwks_url %[3]s
			jwks_cooldown 100ms
			from_query access_token
		}
		respond "{http.auth.user.id} roles={http.auth.jwt.claims.realm_access.roles}"
	}
	route /hmac/* {
		jwt_auth {
			hmac_secret {env.CADDYJWT_E2E_SECRET}
			realm hmac-demo
		}
		reverse_proxy %[4]s
	}
	route /public/* {
		jwt_auth {
			hmac_secret {env.CADDYJWT_E2E_SECRET}
			optional
			forward_claim sub X-User-Id
		}
		reverse_proxy %[4]s
	}
}
# its own server: the metrics handler keeps a server on Caddy's path
:%[5]d {
	metrics
}
`, globalOptions, listen, p.srv.URL, upAddr, metricsPort), "srv0")
	base := fmt.Sprintf("http://127.0.0.1:%d", listen)

	claims := func(extra ...any) jwt.MapClaims {
		c := jwt.MapClaims{
			"sub": "user-1", "iss": "https://idp.test", "aud": []string{"orders-api"},
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
			"realm_access": map[string]any{"roles": []string{"admin", "editor"}},
		}
		for i := 0; i+1 < len(extra); i += 2 {
			c[extra[i].(string)] = extra[i+1]
		}
		return c
	}
	get := func(path, token string, hdr ...string) (*http.Response, string) {
		t.Helper()
		url := base + path
		if path == "/metrics" {
			url = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
		}
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// recordUpstream records the headers of the upstream's last request
	recordUpstream := func(key string) {
		h, uri := up.seen()
		rec.Add(path, key, map[string]any{"uri": uri, "header": h})
	}
	expect := func(name string, resp *http.Response, body string, status int, bodyPart string) {
		t.Helper()
		if name != "metrics" { // the counters of both paths
			rec.Add(path, name, pathtest.Resp(resp.StatusCode, resp.Header, body))
		}
		if resp.StatusCode != status || !strings.Contains(body, bodyPart) {
			t.Fatalf("%s: got %d %q, want %d containing %q", name, resp.StatusCode, body, status, bodyPart)
		}
	}

	t1 := rsaSign(t, k1, "k1", claims())
	_, page := get("/metrics", "")
	const verifications = "gateway_jwt_verifications_total{"
	seriesBefore := pathtest.Series(page, verifications)

	t.Run("valid token reaches upstream with forwarded claims", func(t *testing.T) {
		resp, body := get("/api/orders?x=1", t1, "X-User-Id", "spoofed-admin", "X-Roles", "root")
		expect("valid", resp, body, 200, "upstream ok")
		recordUpstream("valid: upstream")
		h, _ := up.seen()
		if h.Get("X-User-Id") != "user-1" || h.Get("X-Roles") != "admin,editor" {
			t.Fatalf("upstream saw X-User-Id %q X-Roles %q", h.Get("X-User-Id"), h.Get("X-Roles"))
		}
		if h.Get("Authorization") != "" {
			t.Fatal("token not stripped before proxying")
		}
	})
	// with the h1 transport, the fast path writes the client's fields
	// from its head (the plain lane) and jwt_auth's from the map: the
	// client's X-User-Id, X-Roles and token must not go along
	t.Run("h1 transport: forwarded claims replace the client's, token stripped", func(t *testing.T) {
		resp, body := get("/h1api/orders?x=1", t1, "X-User-Id", "spoofed-admin", "X-Roles", "root", "X-Other", "kept")
		expect("valid h1", resp, body, 200, "upstream ok")
		recordUpstream("valid h1: upstream")
		h, _ := up.seen()
		if v := h.Values("X-User-Id"); len(v) != 1 || v[0] != "user-1" {
			t.Fatalf("upstream saw X-User-Id %q", v)
		}
		if v := h.Values("X-Roles"); len(v) != 1 || v[0] != "admin,editor" {
			t.Fatalf("upstream saw X-Roles %q", v)
		}
		if v := h.Values("Authorization"); len(v) != 0 {
			t.Fatalf("token not stripped before proxying: %q", v)
		}
		if h.Get("X-Other") != "kept" {
			t.Fatalf("upstream saw X-Other %q", h.Get("X-Other"))
		}
	})
	t.Run("missing token", func(t *testing.T) {
		resp, body := get("/api/orders", "")
		expect("missing", resp, body, 401, `"error":"unauthorized"`)
		if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="gateway"` {
			t.Fatalf("WWW-Authenticate %q", got)
		}
	})
	t.Run("expired token", func(t *testing.T) {
		resp, body := get("/api/orders", rsaSign(t, k1, "k1", claims("exp", time.Now().Add(-time.Hour).Unix())))
		expect("expired", resp, body, 401, `"error":"invalid_token","reason":"token expired"}`)
		if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer error="invalid_token", error_description="token expired"` {
			t.Fatalf("WWW-Authenticate %q", got)
		}
	})
	t.Run("wrong audience", func(t *testing.T) {
		resp, body := get("/api/orders", rsaSign(t, k1, "k1", claims("aud", "other")))
		expect("aud", resp, body, 401, "invalid audience")
	})
	t.Run("HS256 token on the RS256 route", func(t *testing.T) {
		hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims())
		s, _ := hs.SignedString([]byte(secret))
		resp, body := get("/api/orders", s)
		expect("hs on rs", resp, body, 401, "algorithm not allowed")
	})
	t.Run("placeholders", func(t *testing.T) {
		resp, body := get("/whoami?access_token="+t1, "")
		expect("whoami", resp, body, 200, "user-1 roles=admin,editor")
	})

	t.Run("key rotation mid-test", func(t *testing.T) {
		// the IdP rotates to k2 and drops k1
		p.serve(map[string]*rsa.PrivateKey{"k2": k2})
		t2 := rsaSign(t, k2, "k2", claims("sub", "user-2"))
		// the first request after the cooldown (100ms) refreshes early
		resp, body := eventually(t, func() (*http.Response, string) { return get("/api/orders", t2) }, 200)
		expect("new kid triggers an early refresh", resp, body, 200, "upstream ok")
		recordUpstream("new kid: upstream")
		if h, _ := up.seen(); h.Get("X-User-Id") != "user-2" {
			t.Fatalf("upstream saw %q", h.Get("X-User-Id"))
		}
		// k1 is gone: its token, although cached before, is refused now
		resp, body = get("/api/orders", t1)
		expect("token of the removed key", resp, body, 401, "invalid_token")

		// the IdP goes down: the last good keys stay in use
		p.setDown()
		hits := p.hits.Load()
		t3 := rsaSign(t, k1, "k3-unknown", claims())
		deadline := time.Now().Add(10 * time.Second)
		for p.hits.Load() == hits { // until an unknown kid made a (failing) early refresh
			resp, body = get("/api/orders", t3)
			expect("unknown kid while IdP down", resp, body, 401, "unknown key")
			if time.Now().After(deadline) {
				t.Fatal("no early refresh attempted")
			}
			time.Sleep(20 * time.Millisecond)
		}
		resp, body = get("/api/orders", t2)
		expect("last good keys while IdP down", resp, body, 200, "upstream ok")
	})

	t.Run("hmac route with env secret", func(t *testing.T) {
		hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "svc", "exp": time.Now().Add(time.Minute).Unix()})
		s, _ := hs.SignedString([]byte(secret))
		resp, body := get("/hmac/x", s)
		expect("hmac", resp, body, 200, "upstream ok")
		resp, body = get("/hmac/x", "")
		rec.Add(path, "hmac without a token", pathtest.Resp(resp.StatusCode, resp.Header, body))
		if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="hmac-demo"` {
			t.Fatalf("WWW-Authenticate %q", got)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		resp, body := get("/metrics", "")
		expect("metrics", resp, body, 200, "gateway_jwt_verifications_total")
		for _, want := range []string{
			`gateway_jwt_verifications_total{reason="token expired",result="invalid"}`,
			`gateway_jwt_verifications_total{reason="ok",result="valid"}`,
			`gateway_jwt_verifications_total{reason="missing token",result="missing"}`,
			"gateway_jwt_cache_misses_total",
			`gateway_jwt_jwks_refreshes_total{result="ok",url="` + p.srv.URL + `"}`,
			`gateway_jwt_jwks_refreshes_total{result="error",url="` + p.srv.URL + `"}`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		grew := pathtest.Grew(seriesBefore, pathtest.Series(body, verifications))
		delete(grew, `gateway_jwt_verifications_total{reason="unknown key",result="invalid"}`)
		rec.Add(path, "metrics: verifications counted", grew)
	})

	t.Run("optional route", func(t *testing.T) {
		resp, body := get("/public/x", "", "X-User-Id", "spoofed")
		expect("anonymous", resp, body, 200, "upstream ok")
		recordUpstream("anonymous: upstream")
		if h, _ := up.seen(); h.Get("X-User-Id") != "" {
			t.Fatalf("spoofed header reached upstream: %q", h.Get("X-User-Id"))
		}
		resp, body = get("/public/x", "not.a.token")
		expect("bad token on optional route", resp, body, 401, "invalid_token")
	})
}

// eventually repeats req until it answers status, for at most 10s.
func eventually(t *testing.T, req func() (*http.Response, string), status int) (*http.Response, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := req()
		if resp.StatusCode == status || time.Now().After(deadline) {
			return resp, body
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEndToEndProviders loads a real Caddy config with two providers: an
// OpenID Provider found through discovery, and an issuer with its own JWKS.
// The two publish the same kid with different keys.
//
// It runs on both request paths and compares every response.
func TestEndToEndProviders(t *testing.T) {
	pathtest.Run(t, testEndToEndProviders)
}

func testEndToEndProviders(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	corpKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	partnerKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	partners := newIDP(t)
	partners.serve(map[string]*rsa.PrivateKey{"shared-kid": partnerKey})
	corpKeys := newIDP(t)
	corpKeys.serve(map[string]*rsa.PrivateKey{"shared-kid": corpKey})
	var sso *httptest.Server
	sso = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/realms/main/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": sso.URL + "/realms/main", "jwks_uri": corpKeys.srv.URL})
	}))
	t.Cleanup(sso.Close)
	corpIss, partnerIss := sso.URL+"/realms/main", "https://partners.example"

	tester := p.Load(t, adminPort, fmt.Sprintf(`
%[1]s
:%[2]d {
	jwt_auth {
		provider corp {
			oidc     %[3]s
			audience orders-api
		}
		provider partners {
			issuer     %[4]s
			jwks_url   %[5]s
			algorithms RS256
		}
	}
	respond "{http.auth.user.id} via {http.auth.jwt.claims.iss}"
}
`, globalOptions, listen, corpIss, partnerIss, partners.srv.URL), "srv0")
	base := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	get := func(t *testing.T, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(b), corpIss, "CORP-ISSUER"))
		return resp.StatusCode, string(b)
	}
	claims := func(iss, sub string) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "iss": iss, "aud": "orders-api", "exp": time.Now().Add(time.Hour).Unix()}
	}
	cases := []struct {
		name   string
		token  string
		status int
		body   string
	}{
		{"corp token through discovery", rsaSign(t, corpKey, "shared-kid", claims(corpIss, "alice")), 200, "alice via " + corpIss},
		{"partner token", rsaSign(t, partnerKey, "shared-kid", claims(partnerIss, "bob")), 200, "bob via " + partnerIss},
		{"corp iss signed with the partner key", rsaSign(t, partnerKey, "shared-kid", claims(corpIss, "mallory")), 401, `"error":"invalid_token","reason":"invalid signature"}`},
		{"partner iss signed with the corp key", rsaSign(t, corpKey, "shared-kid", claims(partnerIss, "mallory")), 401, `"error":"invalid_token","reason":"invalid signature"}`},
		{"unknown issuer", rsaSign(t, corpKey, "shared-kid", claims("https://elsewhere.example", "eve")), 401, `"error":"invalid_token","reason":"unknown issuer"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := get(t, tc.token)
			if status != tc.status || !strings.Contains(body, tc.body) {
				t.Fatalf("got %d %q, want %d containing %q", status, body, tc.status, tc.body)
			}
		})
	}
}

// TestClaimsPlaceholdersPerRequest: {http.auth.jwt.claims.*} answers the
// token of the request in hand, never one an earlier request carried on
// the same connection or on another one (a claim the token lacks is
// empty, not an earlier token's). It runs on both request paths and
// compares every response.
func TestClaimsPlaceholdersPerRequest(t *testing.T) {
	pathtest.Run(t, testClaimsPlaceholdersPerRequest)
}

func testClaimsPlaceholdersPerRequest(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	const secret = "claims-e2e-secret-0123456789abcdef0123456789"
	p.Load(t, adminPort, fmt.Sprintf(`%s
:%d {
	jwt_auth {
		hmac_secret %s
	}
	respond "{http.auth.user.id} iss={http.auth.jwt.claims.iss} tenant={http.auth.jwt.claims.tenant}"
}
`, globalOptions, claimsPort, secret), "srv0")
	sign := func(claims jwt.MapClaims) string {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := &http.Client{Transport: &http.Transport{}}
	defer first.CloseIdleConnections()
	for _, tc := range []struct {
		name   string
		client *http.Client
		claims jwt.MapClaims
		body   string
		close  bool // close the client's connection after the request
	}{
		{"the first request", first, jwt.MapClaims{"sub": "alice", "iss": "https://a.example", "tenant": "t-a"}, "alice iss=https://a.example tenant=t-a", false},
		{"the next on the same connection", first, jwt.MapClaims{"sub": "bob", "iss": "https://b.example"}, "bob iss=https://b.example tenant=", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", claimsPort), nil)
			req.Header.Set("Authorization", "Bearer "+sign(tc.claims))
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tc.close {
				tc.client.CloseIdleConnections()
				time.Sleep(50 * time.Millisecond) // the server notices the close
			}
			rec.Add(p, tc.name, pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
			if resp.StatusCode != 200 || string(b) != tc.body {
				t.Fatalf("%d %q, want 200 %q", resp.StatusCode, b, tc.body)
			}
		})
	}
	// other clients, each on a connection of its own, after those
	// requests: the request state of a closed connection serves others
	t.Run("other connections", func(t *testing.T) {
		var wrong []string
		for i := 0; i < 20; i++ {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			sub := fmt.Sprintf("user-%d", i)
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", claimsPort), nil)
			req.Header.Set("Authorization", "Bearer "+sign(jwt.MapClaims{"sub": sub, "iss": "https://" + sub + ".example"}))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := sub + " iss=https://" + sub + ".example tenant="; string(b) != want {
				wrong = append(wrong, fmt.Sprintf("%s got %q", sub, b))
			}
		}
		rec.Add(p, "other connections: answers of another token", len(wrong) > 0)
		if len(wrong) > 0 {
			t.Fatalf("%d of 20 requests on new connections got another request's claims: %s", len(wrong), strings.Join(wrong, "; "))
		}
	})
}
