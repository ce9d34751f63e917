package caddyjwt

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var fixedNow = time.Unix(1_800_000_000, 0)

func nowFn() time.Time { return fixedNow }

func baseClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"sub": "user-1",
		"iss": "https://idp.example",
		"aud": "orders-api",
		"exp": fixedNow.Add(time.Hour).Unix(),
		"iat": fixedNow.Add(-time.Minute).Unix(),
		"realm_access": map[string]any{
			"roles": []string{"admin", "editor"},
		},
	}
}

func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// staticSet is a KeySet whose keys a test swaps, counting early refreshes.
type staticSet struct {
	keys      atomic.Pointer[[]*Key]
	next      []*Key // installed by RefreshEarly
	gen       atomic.Uint64
	refreshes atomic.Int32
}

func (s *staticSet) Keys() []*Key {
	if p := s.keys.Load(); p != nil {
		return *p
	}
	return nil
}
func (s *staticSet) Generation() uint64 { return s.gen.Load() }
func (s *staticSet) RefreshEarly(context.Context) bool {
	s.refreshes.Add(1)
	if s.next != nil {
		n := s.next
		s.keys.Store(&n)
		s.gen.Add(1)
	}
	return true
}

func TestVerifyAlgorithms(t *testing.T) {
	k := keys(t)
	hmacKey, _ := NewHMACKey(testSecret, "")
	static := []*Key{
		hmacKey,
		mustKey(t, &k.rsa.PublicKey, ""),
		mustKey(t, &k.p256.PublicKey, ""),
		mustKey(t, &k.p384.PublicKey, ""),
		mustKey(t, &k.p521.PublicKey, ""),
		mustKey(t, k.ed.Public(), ""),
	}
	v, err := NewVerifier(Options{Now: nowFn, CacheSize: -1}, static)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method jwt.SigningMethod
		key    any
	}{
		{jwt.SigningMethodHS256, testSecret},
		{jwt.SigningMethodHS384, testSecret},
		{jwt.SigningMethodHS512, testSecret},
		{jwt.SigningMethodRS256, k.rsa},
		{jwt.SigningMethodRS384, k.rsa},
		{jwt.SigningMethodRS512, k.rsa},
		{jwt.SigningMethodPS256, k.rsa},
		{jwt.SigningMethodPS384, k.rsa},
		{jwt.SigningMethodPS512, k.rsa},
		{jwt.SigningMethodES256, k.p256},
		{jwt.SigningMethodES384, k.p384},
		{jwt.SigningMethodES512, k.p521},
		{jwt.SigningMethodEdDSA, k.ed},
	}
	for _, tc := range cases {
		t.Run(tc.method.Alg(), func(t *testing.T) {
			tok := sign(t, tc.method, tc.key, "", baseClaims())
			id, err := v.Verify(context.Background(), tok)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if id.Subject != "user-1" || id.Algorithm != tc.method.Alg() || id.Issuer != "https://idp.example" ||
				len(id.Audience) != 1 || id.Audience[0] != "orders-api" || !id.ExpiresAt.Equal(fixedNow.Add(time.Hour)) {
				t.Fatalf("identity = %+v", id)
			}
		})
	}
}

func TestVerifyRules(t *testing.T) {
	k := keys(t)
	hmacKey, _ := NewHMACKey(testSecret, "")
	rsaKey := mustKey(t, &k.rsa.PublicKey, "rsa-1")
	ecKey := mustKey(t, &k.p256.PublicKey, "ec-1")
	opts := Options{
		Now:           nowFn,
		Issuers:       []string{"https://idp.example"},
		Audiences:     []string{"orders-api", "billing-api"},
		Leeway:        30 * time.Second,
		RequireClaims: []string{"sub", "exp", "realm_access.roles"},
		CacheSize:     -1,
	}
	hsOnly, err := NewVerifier(opts, []*Key{hmacKey})
	if err != nil {
		t.Fatal(err)
	}
	pubOnly, err := NewVerifier(opts, []*Key{rsaKey, ecKey})
	if err != nil {
		t.Fatal(err)
	}
	rsOnlyAllowed, err := NewVerifier(with2(opts, []string{"RS256"}), []*Key{rsaKey})
	if err != nil {
		t.Fatal(err)
	}

	// The RSA public key in PEM form, as an attacker would use it as an
	// HMAC secret in the classic confusion attack.
	der, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, "", c) }
	rs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodRS256, k.rsa, "rsa-1", c) }
	good := hs(baseClaims())
	parts := strings.Split(good, ".")

	cases := []struct {
		name  string
		v     *Verifier
		token string
		want  *Error // nil: valid
		label string // for errors built per claim
	}{
		{"valid HS256", hsOnly, good, nil, ""},
		{"valid RS256 with kid", pubOnly, rs(baseClaims()), nil, ""},
		{"valid ES256 with kid", pubOnly, sign(t, jwt.SigningMethodES256, k.p256, "ec-1", baseClaims()), nil, ""},
		{"audience array", hsOnly, hs(with(baseClaims(), "aud", []string{"x", "billing-api"})), nil, ""},
		{"expired within leeway", hsOnly, hs(with(baseClaims(), "exp", fixedNow.Add(-20*time.Second).Unix())), nil, ""},
		{"expired", hsOnly, hs(with(baseClaims(), "exp", fixedNow.Add(-time.Minute).Unix())), ErrExpired, ""},
		{"exp exactly now+leeway", hsOnly, hs(with(baseClaims(), "exp", fixedNow.Add(-30*time.Second).Unix())), ErrExpired, ""},
		{"not yet valid", hsOnly, hs(with(baseClaims(), "nbf", fixedNow.Add(time.Minute).Unix())), ErrNotYetValid, ""},
		{"nbf within leeway", hsOnly, hs(with(baseClaims(), "nbf", fixedNow.Add(20*time.Second).Unix())), nil, ""},
		{"issued in the future", hsOnly, hs(with(baseClaims(), "iat", fixedNow.Add(time.Hour).Unix())), ErrIssuedInFuture, ""},
		{"wrong issuer", hsOnly, hs(with(baseClaims(), "iss", "https://evil.example")), ErrIssuer, ""},
		{"missing issuer", hsOnly, hs(with(baseClaims(), "iss", nil)), ErrIssuer, ""},
		{"wrong audience", hsOnly, hs(with(baseClaims(), "aud", "other-api")), ErrAudience, ""},
		{"wrong audience array", hsOnly, hs(with(baseClaims(), "aud", []string{"a", "b"})), ErrAudience, ""},
		{"missing audience", hsOnly, hs(with(baseClaims(), "aud", nil)), ErrAudience, ""},
		{"aud of wrong type", hsOnly, hs(with(baseClaims(), "aud", 42)), nil, "invalid claim"},
		{"missing required sub", hsOnly, hs(with(baseClaims(), "sub", nil)), nil, "missing claim"},
		{"missing required exp", hsOnly, hs(with(baseClaims(), "exp", nil)), nil, "missing claim"},
		{"missing nested required claim", hsOnly, hs(with(baseClaims(), "realm_access", map[string]any{})), nil, "missing claim"},
		{"exp of wrong type", hsOnly, hs(with(baseClaims(), "exp", "tomorrow")), nil, "invalid claim"},
		{"sub of wrong type", hsOnly, hs(with(baseClaims(), "sub", 7)), nil, "invalid claim"},
		{"two segments", hsOnly, parts[0] + "." + parts[1], ErrMalformed, ""},
		{"four segments", hsOnly, good + ".x", ErrMalformed, ""},
		{"empty header segment", hsOnly, "." + parts[1] + "." + parts[2], ErrMalformed, ""},
		{"empty payload segment", hsOnly, parts[0] + ".." + parts[2], ErrMalformed, ""},
		{"not a jwt", hsOnly, "hello", ErrMalformed, ""},
		{"bad base64 header", hsOnly, "e!J." + parts[1] + "." + parts[2], ErrBadEncoding, ""},
		{"bad base64 payload", hsOnly, parts[0] + ".*." + parts[2], ErrBadEncoding, ""},
		{"bad base64 signature", hsOnly, parts[0] + "." + parts[1] + ".%%%", ErrBadEncoding, ""},
		{"padded base64", hsOnly, parts[0] + "=." + parts[1] + "." + parts[2], ErrBadEncoding, ""},
		{"header not json", hsOnly, "bm90LWpzb24." + parts[1] + "." + parts[2], ErrBadHeader, ""},
		{"claims not an object", hsOnly, signRaw(t, `{"alg":"HS256"}`, `[1,2]`), ErrBadClaims, ""},
		{"oversized", hsOnly, hs(with(baseClaims(), "pad", strings.Repeat("x", 9000))), ErrTooLarge, ""},
		{"alg none", hsOnly, rawToken(map[string]any{"alg": "none"}, baseClaims(), nil), ErrAlgNone, ""},
		{"alg None", hsOnly, rawToken(map[string]any{"alg": "None"}, baseClaims(), nil), ErrAlgNone, ""},
		{"alg missing", hsOnly, rawToken(map[string]any{"typ": "JWT"}, baseClaims(), []byte("x")), ErrAlgNone, ""},
		{"unsupported alg", hsOnly, rawToken(map[string]any{"alg": "HS1"}, baseClaims(), []byte("x")), ErrUnsupportedAlg, ""},
		{"crit header", hsOnly, critToken(t), ErrCritical, ""},
		{"HS/RS confusion: HS256 signed with the RSA public key", pubOnly,
			sign(t, jwt.SigningMethodHS256, rsaPEM, "rsa-1", baseClaims()), ErrKeyMismatch, ""},
		{"HS/RS confusion without kid", pubOnly,
			sign(t, jwt.SigningMethodHS256, rsaPEM, "", baseClaims()), ErrKeyMismatch, ""},
		{"alg/key mismatch: ES256 header on RSA kid", pubOnly,
			sign(t, jwt.SigningMethodES256, k.p256, "rsa-1", baseClaims()), ErrKeyMismatch, ""},
		{"ES384 on a P-256 key", pubOnly, sign(t, jwt.SigningMethodES384, k.p384, "ec-1", baseClaims()), ErrKeyMismatch, ""},
		{"algorithm not in allow-list", rsOnlyAllowed, hs(baseClaims()), ErrAlgNotAllowed, ""},
		{"allow-listed algorithm", rsOnlyAllowed, rs(baseClaims()), nil, ""},
		{"unknown kid", pubOnly, sign(t, jwt.SigningMethodRS256, k.rsa, "nobody", baseClaims()), ErrUnknownKey, ""},
		{"kid no key claims, only an HMAC secret", hsOnly, sign(t, jwt.SigningMethodRS256, k.rsa, "nobody", baseClaims()), ErrUnknownKey, ""},
		{"valid signature from the wrong key", pubOnly, sign(t, jwt.SigningMethodRS256, k.rsa2, "rsa-1", baseClaims()), ErrSignature, ""},
		{"wrong HMAC secret", hsOnly, sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-!!"), "", baseClaims()), ErrSignature, ""},
		{"tampered payload", hsOnly, parts[0] + "." + tamper(parts[1]) + "." + parts[2], ErrSignature, ""},
		{"empty signature", hsOnly, parts[0] + "." + parts[1] + ".", ErrSignature, ""},
		{"ES256 signature of wrong length", pubOnly, strings.Join(strings.Split(sign(t, jwt.SigningMethodES256, k.p256, "ec-1", baseClaims()), ".")[:2], ".") + ".AAAA", ErrSignature, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.v.Verify(context.Background(), tc.token)
			if tc.want == nil && tc.label == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if id == nil || id.Subject != "user-1" {
					t.Fatalf("identity = %+v", id)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want error, got %v (id %+v)", err, id)
			}
			if tc.want != nil && e != tc.want {
				t.Fatalf("got %q, want %q", e.Reason, tc.want.Reason)
			}
			if tc.label != "" && e.Label != tc.label {
				t.Fatalf("got label %q (%q), want %q", e.Label, e.Reason, tc.label)
			}
			if strings.Contains(e.Reason, "BEGIN") || strings.Contains(e.Reason, string(testSecret)) {
				t.Fatalf("reason leaks key material: %q", e.Reason)
			}
		})
	}
}

func with2(o Options, algs []string) Options { o.Algorithms = algs; return o }

func tamper(seg string) string {
	b := []byte(seg)
	if b[1] == 'A' {
		b[1] = 'B'
	} else {
		b[1] = 'A'
	}
	return string(b)
}

func signRaw(t *testing.T, header, payload string) string {
	t.Helper()
	enc := func(s string) string { return strings.TrimRight(b64std(s), "=") }
	signing := enc(header) + "." + enc(payload)
	sig, err := jwt.SigningMethodHS256.Sign(signing, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + strings.TrimRight(b64bytes(sig), "=")
}

func critToken(t *testing.T) string {
	return signRaw(t, `{"alg":"HS256","crit":["exp"]}`, `{"sub":"user-1"}`)
}

func TestNewVerifierErrors(t *testing.T) {
	hk, _ := NewHMACKey(testSecret, "")
	cases := []struct {
		name string
		opts Options
		keys []*Key
		want string
	}{
		{"no keys", Options{}, nil, "no key configured"},
		{"none allowed", Options{Algorithms: []string{"none"}}, []*Key{hk}, `"none" is never accepted`},
		{"unknown algorithm", Options{Algorithms: []string{"HS999"}}, []*Key{hk}, `unsupported algorithm "HS999"`},
		{"bad claim path", Options{RequireClaims: []string{"a..b"}}, []*Key{hk}, "require_claims"},
		{"negative leeway", Options{Leeway: -time.Second}, []*Key{hk}, "invalid leeway"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewVerifier(tc.opts, tc.keys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := NewHMACKey(nil, ""); err == nil {
		t.Fatal("empty HMAC secret accepted")
	}
	small, _ := rsaKeyOfBits(t, 1024)
	if _, err := NewPublicKey(small, ""); err == nil || !strings.Contains(err.Error(), "at least 2048") {
		t.Fatalf("1024-bit RSA: %v", err)
	}
}

func TestCacheHitAndExpiry(t *testing.T) {
	now := fixedNow
	clock := func() time.Time { return now }
	hk, _ := NewHMACKey(testSecret, "")
	v, err := NewVerifier(Options{Now: clock, CacheTTL: time.Hour}, []*Key{hk})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodHS256, testSecret, "", with(baseClaims(), "exp", fixedNow.Add(10*time.Minute).Unix()))
	ctx := context.Background()
	if _, hit, err := v.VerifyCached(ctx, tok); err != nil || hit {
		t.Fatalf("first: hit=%v err=%v", hit, err)
	}
	id1, hit, err := v.VerifyCached(ctx, tok)
	if err != nil || !hit {
		t.Fatalf("second: hit=%v err=%v", hit, err)
	}
	// just before exp: still cached
	now = fixedNow.Add(10*time.Minute - time.Second)
	if id2, hit, _ := v.VerifyCached(ctx, tok); !hit || id2 != id1 {
		t.Fatalf("before exp: hit=%v", hit)
	}
	// at exp: the entry is dead, and the token is expired
	now = fixedNow.Add(10 * time.Minute)
	if _, hit, err := v.VerifyCached(ctx, tok); hit || !errors.Is(err, ErrExpired) {
		t.Fatalf("at exp: hit=%v err=%v", hit, err)
	}

	// a token without exp is cached no longer than CacheTTL
	now = fixedNow
	v2, _ := NewVerifier(Options{Now: clock, CacheTTL: time.Minute}, []*Key{hk})
	noExp := sign(t, jwt.SigningMethodHS256, testSecret, "", with(baseClaims(), "exp", nil))
	v2.Verify(ctx, noExp)
	now = fixedNow.Add(59 * time.Second)
	if _, hit, _ := v2.VerifyCached(ctx, noExp); !hit {
		t.Fatal("no-exp token not cached")
	}
	now = fixedNow.Add(time.Minute)
	if _, hit, err := v2.VerifyCached(ctx, noExp); hit || err != nil {
		t.Fatalf("no-exp token after ttl: hit=%v err=%v", hit, err)
	}

	// failures are never cached
	bad := sign(t, jwt.SigningMethodHS256, []byte("wrong-secret-wrong-secret-wrong!"), "", baseClaims())
	v2.Verify(ctx, bad)
	if _, hit, err := v2.VerifyCached(ctx, bad); hit || err == nil {
		t.Fatalf("bad token: hit=%v err=%v", hit, err)
	}
}

func TestCacheBounded(t *testing.T) {
	hk, _ := NewHMACKey(testSecret, "")
	v, _ := NewVerifier(Options{Now: nowFn, CacheSize: 64}, []*Key{hk})
	for i := 0; i < 1000; i++ {
		tok := sign(t, jwt.SigningMethodHS256, testSecret, "", with(baseClaims(), "n", i))
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.Cache().Len(); n != 64 {
		t.Fatalf("cache holds %d entries after 1000 tokens, want its size, 64", n)
	}
}

func TestKeyRotationInvalidatesCacheAndRefreshesEarly(t *testing.T) {
	k := keys(t)
	set := &staticSet{}
	old := []*Key{mustKey(t, &k.rsa.PublicKey, "k1")}
	set.keys.Store(&old)
	v, err := NewVerifier(Options{Now: nowFn}, nil, set)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t1 := sign(t, jwt.SigningMethodRS256, k.rsa, "k1", baseClaims())
	v.Verify(ctx, t1)
	if _, hit, _ := v.VerifyCached(ctx, t1); !hit {
		t.Fatal("not cached")
	}
	// a token with an unknown kid triggers an early refresh that brings k2
	set.next = []*Key{mustKey(t, &k.rsa2.PublicKey, "k2")}
	t2 := sign(t, jwt.SigningMethodRS256, k.rsa2, "k2", baseClaims())
	if _, err := v.Verify(ctx, t2); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if set.refreshes.Load() != 1 {
		t.Fatalf("refreshes = %d", set.refreshes.Load())
	}
	// k1 left the set: its cached token is no longer accepted
	if _, hit, err := v.VerifyCached(ctx, t1); hit || !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("token of removed key: hit=%v err=%v", hit, err)
	}
}

func TestParseJWKS(t *testing.T) {
	k := keys(t)
	doc := jwksDoc(
		jwkOf(&k.rsa.PublicKey, "rsa", "RS256"),
		jwkOf(&k.p256.PublicKey, "ec", "ES256"),
		jwkOf(&k.p384.PublicKey, "ec384", ""),
		jwkOf(&k.p521.PublicKey, "ec521", "ES512"),
		jwkOf(k.ed.Public(), "ed", "EdDSA"),
		map[string]any{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
		map[string]any{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
		map[string]any{"kty": "OKP", "kid": "x448", "crv": "X448", "x": "AA"},
		map[string]any{"kty": "EC", "kid": "offcurve", "crv": "P-256", "x": "AQ", "y": "AQ"},
		map[string]any{"kty": "RSA", "kid": "weak", "n": "AQAB", "e": "AQAB"},
		jwkOf(&k.rsa.PublicKey, "mismatch", "ES256"),
		map[string]any{"kty": "XYZ", "kid": "unknown"},
		map[string]any{"kid": "nokty"},
	)
	got, skipped, err := ParseJWKS(doc, "test")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range got {
		kids = append(kids, k.ID)
	}
	if strings.Join(kids, ",") != "rsa,ec,ec384,ec521,ed" {
		t.Fatalf("kept %v", kids)
	}
	if len(skipped) != 8 {
		t.Fatalf("skipped %d: %q", len(skipped), skipped)
	}
	for _, bad := range []string{`{}`, `not json`, `{"keys":"x"}`} {
		if _, _, err := ParseJWKS([]byte(bad), "test"); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

func TestParsePEMKeys(t *testing.T) {
	k := keys(t)
	both := append(pemOf(t, &k.rsa.PublicKey), pemOf(t, &k.p256.PublicKey)...)
	got, err := ParsePEMKeys(both, "f")
	if err != nil || len(got) != 2 || got[0].Family() != "RSA" || got[1].Family() != "EC" {
		t.Fatalf("got %v %v", got, err)
	}
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	if got, err := ParsePEMKeys(pkcs1, "f"); err != nil || len(got) != 1 {
		t.Fatalf("pkcs1: %v", err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k.rsa)
	priv := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for name, data := range map[string][]byte{
		"private key": priv,
		"empty":       nil,
		"garbage":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")}),
		"odd type":    pem.EncodeToMemory(&pem.Block{Type: "FOO", Bytes: []byte("junk")}),
	} {
		if _, err := ParsePEMKeys(data, "f"); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestKeySelection(t *testing.T) {
	k := keys(t)
	ctx := context.Background()
	set := &staticSet{}
	noKid := []*Key{mustKey(t, &k.p256.PublicKey, ""), mustKey(t, &k.rsa.PublicKey, "r1")}
	set.keys.Store(&noKid)
	v, _ := NewVerifier(Options{Now: nowFn, CacheSize: -1}, nil, set)
	cases := []struct {
		name  string
		token string
		want  error
	}{
		{"kid matches", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", baseClaims()), nil},
		{"no kid tries every key", sign(t, jwt.SigningMethodRS256, k.rsa, "", baseClaims()), nil},
		{"kid-less JWK verifies a token with an unknown kid", sign(t, jwt.SigningMethodES256, k.p256, "whatever", baseClaims()), nil},
		{"kid of another key type", sign(t, jwt.SigningMethodES256, k.p256, "r1", baseClaims()), ErrKeyMismatch},
		{"wrong key, no kid", sign(t, jwt.SigningMethodRS256, k.rsa2, "", baseClaims()), ErrSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(ctx, tc.token)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestECDSADER(t *testing.T) {
	k := keys(t)
	for _, tc := range []struct {
		m   jwt.SigningMethod
		key any
		pub any
	}{
		{jwt.SigningMethodES256, k.p256, &k.p256.PublicKey},
		{jwt.SigningMethodES384, k.p384, &k.p384.PublicKey},
		{jwt.SigningMethodES512, k.p521, &k.p521.PublicKey},
	} {
		v, _ := NewVerifier(Options{Now: nowFn, CacheSize: -1}, []*Key{mustKey(t, tc.pub, "")})
		// many signatures, so leading zero bytes and high bits in r and s occur
		for i := 0; i < 200; i++ {
			tok := sign(t, tc.m, tc.key, "", with(baseClaims(), "n", i))
			if _, err := v.Verify(context.Background(), tok); err != nil {
				t.Fatalf("%s #%d: %v", tc.m.Alg(), i, err)
			}
		}
	}
	if _, ok := ecdsaDER(nil, make([]byte, 32), []byte{1}); ok {
		t.Fatal("zero r accepted")
	}
}
