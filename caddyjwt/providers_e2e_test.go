package caddyjwt_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// providersPort is TestProvidersEndToEnd's listener (of the package's,
// see e2e_test.go).
const providersPort = 19104

// TestProvidersEndToEnd runs the provider tests (providers_test.go) through the real
// Caddy, one route each: the flat config's cross-issuer hole and the
// providers that close it, overlapping kids, per-provider rules,
// verifiers not shared between swapped configs, OIDC discovery down at
// load then up, a rotation and a JWKS outage, a discovery document of
// another issuer, and a JWKS with encryption keys.
//
// It runs on both request paths (Caddy's and the fast path) from one
// table and compares every response (status, header fields, body).
func TestProvidersEndToEnd(t *testing.T) {
	pathtest.Run(t, testProvidersEndToEnd)
}

func testProvidersEndToEnd(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	rsa1, rsa2, p256, p256b := caddyjwt.Keys(t)
	// issuers carry the run, so that no verifier (and its cache) of the
	// other path's config is shared with this one
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b)
	iss := func(name string) string { return "https://" + name + ".example/" + run }
	t.Setenv("CADDYJWT_PROVIDER_SECRET", string(caddyjwt.TestSecret))
	s1, s2 := "secret-one-0123456789abcdef0123456789", "secret-two-0123456789abcdef0123456789"

	// cross-issuer: a and b, each with its own JWKS
	a := caddyjwt.NewJWKSServer(t, caddyjwt.JWKSDoc(caddyjwt.JWKOf(&rsa1.PublicKey, "a-1", "RS256")))
	bb := caddyjwt.NewJWKSServer(t, caddyjwt.JWKSDoc(caddyjwt.JWKOf(&rsa2.PublicKey, "b-1", "RS256")))
	// overlapping kids
	ka := caddyjwt.NewJWKSServer(t, caddyjwt.JWKSDoc(caddyjwt.JWKOf(&p256.PublicKey, "key-1", "ES256")))
	kb := caddyjwt.NewJWKSServer(t, caddyjwt.JWKSDoc(caddyjwt.JWKOf(&p256b.PublicKey, "key-1", "ES256")))
	// OIDC, down at load
	op := caddyjwt.NewOIDCServer(t)
	op.SetDiscoveryDown(true)
	op.SetJWKS(caddyjwt.JWKSDoc(caddyjwt.JWKOf(&rsa1.PublicKey, "old", "RS256")))
	// OIDC whose discovery names another issuer
	evil := caddyjwt.NewOIDCServer(t)
	evil.SetIssuer("https://evil.example")
	evil.SetJWKS(caddyjwt.JWKSDoc(caddyjwt.JWKOf(&p256.PublicKey, "ec", "ES256")))
	// a JWKS with encryption keys beside the signature key
	encUse := caddyjwt.JWKOf(&rsa1.PublicKey, "enc-use", "RSA-OAEP")
	encUse["use"] = "enc"
	encAlg := caddyjwt.JWKOf(&rsa1.PublicKey, "enc-alg", "RSA-OAEP-256")
	delete(encAlg, "use")
	enc := caddyjwt.NewJWKSServer(t, caddyjwt.JWKSDoc(encUse, encAlg, caddyjwt.JWKOf(&rsa2.PublicKey, "sig", "RS256")))
	ecPEM := caddyjwt.WritePEM(t, caddyjwt.PEMOf(t, &p256.PublicKey))

	config := fmt.Sprintf(`%[1]s
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
`, globalOptions, providersPort, a.URL, bb.URL, iss("a"), iss("b"), ka.URL, kb.URL,
		iss("svc"), iss("ec"), ecPEM, iss("x"), iss("y"), s1, s2, op.URL, evil.URL, enc.URL)
	start := time.Now()
	tester := p.Load(t, adminPort, config, "srv0")
	if d := time.Since(start); d > 5*time.Second { // the load does not wait on the provider
		t.Fatalf("the load took %s", d)
	}

	rs256 := func(key any, kid, iss string, kv ...any) string {
		return caddyjwt.Sign(t, jwt.SigningMethodRS256, key, kid, caddyjwt.ClaimsFor(iss, kv...))
	}
	es256 := func(key any, kid, iss string, kv ...any) string {
		return caddyjwt.Sign(t, jwt.SigningMethodES256, key, kid, caddyjwt.ClaimsFor(iss, kv...))
	}
	hs256 := func(secret []byte, iss string, kv ...any) string {
		return caddyjwt.Sign(t, jwt.SigningMethodHS256, secret, "", caddyjwt.ClaimsFor(iss, kv...))
	}
	expired30s := time.Now().Add(-30 * time.Second).Unix()
	oidcOld := rs256(rsa1, "old", op.URL, "aud", "orders-api")
	oidcNew := rs256(rsa2, "new", op.URL, "aud", "orders-api")
	denied := func(reason string) string { return `"error":"invalid_token","reason":"` + reason + `"}` }

	for _, tc := range []struct {
		name, path, token string
		status            int
		body              string // contained in the body
		reason            string // of a 401: the body's and WWW-Authenticate's
		before            func() // changes a provider first
		wait              bool   // repeated until it answers status (a refresh)
	}{
		// TestCrossIssuerToken: the flat config's documented hole, closed by providers
		{name: "flat: the cross-issuer token passes", path: "/flat", token: rs256(rsa2, "b-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "providers: the cross-issuer token", path: "/providers", token: rs256(rsa2, "b-1", iss("a")), status: 401, body: `"error":"invalid_token"`},
		{name: "providers: a's own token", path: "/providers", token: rs256(rsa1, "a-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "providers: b's own token", path: "/providers", token: rs256(rsa2, "b-1", iss("b"), "sub", "user-2"), status: 200, body: "user-2 via " + iss("b")},
		// TestProvidersOverlappingKids
		{name: "kids: a's token", path: "/kids", token: es256(p256, "key-1", iss("a")), status: 200, body: "user-1 via " + iss("a")},
		{name: "kids: b's token", path: "/kids", token: es256(p256b, "key-1", iss("b"), "sub", "user-3"), status: 200, body: "user-3 via " + iss("b")},
		{name: "kids: a's iss, b's key", path: "/kids", token: es256(p256b, "key-1", iss("a")), status: 401},
		{name: "kids: b's iss, a's key", path: "/kids", token: es256(p256, "key-1", iss("b")), status: 401},
		// TestProviderRules
		{name: "rules: svc token", path: "/rules", token: hs256(caddyjwt.TestSecret, iss("svc"), "aud", "svc-api"), status: 200, body: "user-1 via " + iss("svc")},
		{name: "rules: svc token, ec's audience", path: "/rules", token: hs256(caddyjwt.TestSecret, iss("svc"), "aud", "ec-api"), status: 401, reason: "invalid audience"},
		{name: "rules: svc leeway covers 30s", path: "/rules", token: hs256(caddyjwt.TestSecret, iss("svc"), "aud", "svc-api", "exp", expired30s, "sub", "user-4"), status: 200, body: "user-4 via " + iss("svc")},
		{name: "rules: ec has no leeway", path: "/rules", token: es256(p256, "", iss("ec"), "aud", "ec-api", "exp", expired30s), status: 401, reason: "token expired"},
		{name: "rules: ec token", path: "/rules", token: es256(p256, "", iss("ec"), "aud", "ec-api", "sub", "user-5"), status: 200, body: "user-5 via " + iss("ec")},
		{name: "rules: HS256 with ec's iss", path: "/rules", token: hs256(caddyjwt.TestSecret, iss("ec"), "aud", "ec-api"), status: 401, reason: "algorithm not allowed"},
		{name: "rules: unknown issuer", path: "/rules", token: hs256(caddyjwt.TestSecret, "https://other.example", "aud", "svc-api"), status: 401, reason: "unknown issuer"},
		{name: "rules: no iss", path: "/rules", token: caddyjwt.Sign(t, jwt.SigningMethodHS256, caddyjwt.TestSecret, "", jwt.MapClaims{"sub": "x", "aud": "svc-api"}), status: 401, reason: "unknown issuer"},
		// TestProvidersDoNotShareVerifier
		{name: "swapped: the first config", path: "/one", token: hs256([]byte(s1), iss("x")), status: 200, body: "user-1"},
		{name: "swapped: the second config refuses x's token signed with its y key", path: "/two", token: hs256([]byte(s1), iss("x")), status: 401},
		// TestOIDCProvider
		{name: "oidc: before discovery", path: "/oidc", token: oidcOld, status: 401, reason: "unknown key"},
		{name: "oidc: once discovery is up", path: "/oidc", token: oidcOld, status: 200, body: "user-1 via " + op.URL, wait: true,
			before: func() { op.SetDiscoveryDown(false) }},
		{name: "oidc: the new kid after a rotation", path: "/oidc", token: oidcNew, status: 200, body: "user-1 via " + op.URL, wait: true,
			before: func() { op.SetJWKS(caddyjwt.JWKSDoc(caddyjwt.JWKOf(&rsa2.PublicKey, "new", "RS256"))) }},
		{name: "oidc: the removed kid after the refresh", path: "/oidc", token: oidcOld, status: 401},
		{name: "oidc: an unknown kid while the JWKS is down", path: "/oidc", token: rs256(rsa1, "unknown", op.URL, "aud", "orders-api"), status: 401,
			before: func() { op.SetJWKSDown(true) }},
		{name: "oidc: the new kid while the JWKS is down", path: "/oidc", token: oidcNew, status: 200, body: "user-1 via " + op.URL},
		// TestOIDCIssuerMismatch
		{name: "mismatch: no keys from another issuer's discovery", path: "/mismatch", token: es256(p256, "ec", evil.URL), status: 401},
		{name: "mismatch: keys once the issuer is fixed", path: "/mismatch", token: es256(p256, "ec", evil.URL), status: 200, body: "user-1", wait: true,
			before: func() { evil.SetIssuer("") }},
		// TestJWKSEncryptionKeysSkipped
		{name: "enc: a token of an encryption key", path: "/enc", token: rs256(rsa1, "enc-alg", "x"), status: 401, reason: "unknown key"},
		{name: "enc: a token of the signature key", path: "/enc", token: rs256(rsa2, "sig", "x"), status: 200, body: "user-1"},
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
