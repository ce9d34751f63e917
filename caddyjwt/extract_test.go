package caddyjwt

import (
	"context"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify feeds arbitrary tokens to the verifier: no panic, every
// failure is an *Error, and nothing is accepted without a valid signature.
func FuzzVerify(f *testing.F) {
	hk, _ := NewHMACKey(testSecret, "")
	// deterministic: fuzz workers are separate processes that rebuild it
	good := sign(f, jwt.SigningMethodHS256, testSecret, "", jwt.MapClaims{"sub": "u", "exp": 4102444800})
	f.Add(good)
	f.Add(good + "x")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("..")
	f.Add(rawToken(map[string]any{"alg": "HS256", "crit": []string{"x"}}, map[string]any{}, []byte("s")))
	f.Add(rawToken(map[string]any{"alg": "HS256", "kid": 5}, map[string]any{"exp": "x"}, []byte("s")))
	v, err := NewVerifier(Options{CacheSize: 16}, []*Key{hk})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		id, err := v.Verify(context.Background(), token)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if token != good || id == nil {
			t.Fatalf("accepted %q", token)
		}
	})
}

// FuzzParseJWKS feeds arbitrary documents to the JWKS parser.
func FuzzParseJWKS(f *testing.F) {
	k := keys(f)
	f.Add(string(jwksDoc(jwkOf(&k.rsa.PublicKey, "r", "RS256"), jwkOf(&k.p256.PublicKey, "e", ""), jwkOf(k.ed.Public(), "d", "EdDSA"))))
	f.Add(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`)
	f.Add(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQABAQAB"}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		keys, _, err := ParseJWKS([]byte(doc), "fuzz")
		if err != nil && keys != nil {
			t.Fatal("keys with an error")
		}
	})
}
