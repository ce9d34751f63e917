package caddyjwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// testKeys are generated once per test binary: RSA generation is slow.
type testKeys struct {
	rsa, rsa2   *rsa.PrivateKey
	p256, p256b *ecdsa.PrivateKey
	p384        *ecdsa.PrivateKey
	p521        *ecdsa.PrivateKey
	ed          ed25519.PrivateKey
}

var (
	keysOnce sync.Once
	tk       testKeys
)

func keys(t testing.TB) *testKeys {
	t.Helper()
	keysOnce.Do(func() {
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		var err error
		tk.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		tk.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		tk.p256, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tk.p256b, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tk.p384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		must(err)
		tk.p521, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
		must(err)
		_, tk.ed, err = ed25519.GenerateKey(rand.Reader)
		must(err)
	})
	return &tk
}

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// sign signs claims with golang-jwt; kid is set when non-empty.
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("signing %s: %v", method.Alg(), err)
	}
	return s
}

// rawToken assembles a token from a header and claims, with sig appended
// as is (base64url encoded).
func rawToken(header, claims any, sig []byte) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(h) + "." + enc.EncodeToString(c) + "." + enc.EncodeToString(sig)
}

func mustKey(t testing.TB, pub crypto.PublicKey, kid string) *Key {
	t.Helper()
	k, err := NewPublicKey(pub, kid)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pemOf(t testing.TB, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// jwkOf renders a public key as a JWK map.
func jwkOf(pub crypto.PublicKey, kid, alg string) map[string]any {
	enc := base64.RawURLEncoding
	m := map[string]any{"kid": kid, "use": "sig"}
	if alg != "" {
		m["alg"] = alg
	}
	switch p := pub.(type) {
	case *rsa.PublicKey:
		m["kty"] = "RSA"
		m["n"] = enc.EncodeToString(p.N.Bytes())
		m["e"] = enc.EncodeToString(big.NewInt(int64(p.E)).Bytes())
	case *ecdsa.PublicKey:
		m["kty"] = "EC"
		size := (p.Curve.Params().BitSize + 7) / 8
		m["crv"] = p.Curve.Params().Name
		raw, _ := p.Bytes()
		m["x"] = enc.EncodeToString(raw[1 : 1+size])
		m["y"] = enc.EncodeToString(raw[1+size:])
	case ed25519.PublicKey:
		m["kty"] = "OKP"
		m["crv"] = "Ed25519"
		m["x"] = enc.EncodeToString(p)
	}
	return m
}

func jwksDoc(keys ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func b64std(s string) string   { return base64.URLEncoding.EncodeToString([]byte(s)) }
func b64bytes(b []byte) string { return base64.URLEncoding.EncodeToString(b) }

func rsaKeyOfBits(t testing.TB, bits int) (*rsa.PublicKey, error) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return &k.PublicKey, nil
}
