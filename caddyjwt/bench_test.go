package caddyjwt

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
)

// benchSetup returns a verifier for one algorithm, a signed token and the
// key golang-jwt needs to parse it.
func benchSetup(b *testing.B, alg string, cache bool) (*Verifier, string, any) {
	k := keys(b)
	var (
		method jwt.SigningMethod
		signK  any
		pub    any
		key    *Key
	)
	switch alg {
	case "HS256":
		method, signK, pub = jwt.SigningMethodHS256, testSecret, testSecret
		key, _ = NewHMACKey(testSecret, "")
	case "RS256":
		method, signK, pub = jwt.SigningMethodRS256, k.rsa, &k.rsa.PublicKey
		key = mustKey(b, &k.rsa.PublicKey, "")
	case "ES256":
		method, signK, pub = jwt.SigningMethodES256, k.p256, &k.p256.PublicKey
		key = mustKey(b, &k.p256.PublicKey, "")
	}
	size := DefaultCacheSize
	if !cache {
		size = -1
	}
	v, err := NewVerifier(Options{
		Issuers:   []string{"https://idp.example"},
		Audiences: []string{"orders-api"},
		CacheSize: size,
	}, []*Key{key})
	if err != nil {
		b.Fatal(err)
	}
	claims := baseClaims()
	claims["exp"] = time.Now().Add(time.Hour).Unix()
	claims["iat"] = time.Now().Unix()
	return v, sign(b, method, signK, "", claims), pub
}

// Miss: the full verification (parse, signature, claims), the cache off.
// Hit: the same token again, answered from the cache.
// GolangJWT: golang-jwt/jwt/v5's own parse of the same token with the same
// rules, for comparison with Miss.
func benchMiss(b *testing.B, alg string) {
	v, tok, _ := benchSetup(b, alg, false)
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

func benchHit(b *testing.B, alg string) {
	v, tok, _ := benchSetup(b, alg, true)
	ctx := context.Background()
	if _, err := v.Verify(ctx, tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, hit, err := v.VerifyCached(ctx, tok); err != nil || !hit {
			b.Fatal(hit, err)
		}
	}
}

func benchGolangJWT(b *testing.B, alg string) {
	_, tok, pub := benchSetup(b, alg, false)
	p := jwt.NewParser(jwt.WithValidMethods([]string{alg}), jwt.WithIssuer("https://idp.example"), jwt.WithAudience("orders-api"))
	kf := func(*jwt.Token) (any, error) { return pub, nil }
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := p.Parse(tok, kf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyHS256Miss(b *testing.B)      { benchMiss(b, "HS256") }
func BenchmarkVerifyHS256Hit(b *testing.B)       { benchHit(b, "HS256") }
func BenchmarkVerifyHS256GolangJWT(b *testing.B) { benchGolangJWT(b, "HS256") }
func BenchmarkVerifyRS256Miss(b *testing.B)      { benchMiss(b, "RS256") }
func BenchmarkVerifyRS256Hit(b *testing.B)       { benchHit(b, "RS256") }
func BenchmarkVerifyRS256GolangJWT(b *testing.B) { benchGolangJWT(b, "RS256") }
func BenchmarkVerifyES256Miss(b *testing.B)      { benchMiss(b, "ES256") }
func BenchmarkVerifyES256Hit(b *testing.B)       { benchHit(b, "ES256") }
func BenchmarkVerifyES256GolangJWT(b *testing.B) { benchGolangJWT(b, "ES256") }

// BenchmarkVerifyHS256MissCached is a miss with the cache on: every token is
// new, so it also pays the hash and the insertion (and evictions).
func BenchmarkVerifyHS256MissCached(b *testing.B) {
	v, _, _ := benchSetup(b, "HS256", true)
	toks := make([]string, 4096)
	for i := range toks {
		c := baseClaims()
		c["exp"] = time.Now().Add(time.Hour).Unix()
		c["iat"] = time.Now().Unix()
		c["n"] = strconv.Itoa(i)
		toks[i] = sign(b, jwt.SigningMethodHS256, testSecret, "", c)
	}
	v.cache = NewCache(1) // force misses
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b)()
	i := 0
	for b.Loop() {
		if _, err := v.Verify(ctx, toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkVerifyHitParallel measures cache hits from all CPUs on a set of
// tokens (shard contention).
func BenchmarkVerifyHitParallel(b *testing.B) {
	v, _, _ := benchSetup(b, "HS256", true)
	toks := make([]string, 64)
	for i := range toks {
		c := baseClaims()
		c["exp"] = time.Now().Add(time.Hour).Unix()
		c["iat"] = time.Now().Unix()
		c["n"] = i
		toks[i] = sign(b, jwt.SigningMethodHS256, testSecret, "", c)
		v.Verify(context.Background(), toks[i])
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, hit, _ := v.VerifyCached(context.Background(), toks[i%len(toks)]); !hit {
				b.Fatal("miss")
			}
			i++
		}
	})
}

func BenchmarkHashToken(b *testing.B) {
	_, tok, _ := benchSetup(b, "HS256", true)
	b.SetBytes(int64(len(tok)))
	defer reportCPU(b)()
	for b.Loop() {
		hashToken(tok)
	}
}

type nopHandler struct{}

func (nopHandler) ServeHTTP(http.ResponseWriter, *http.Request) error { return nil }

// BenchmarkServeHTTPHit is the whole handler on a cached token: extraction,
// cache hit, identity, placeholders and one forwarded claim.
func BenchmarkServeHTTPHit(b *testing.B) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	j := &JWTAuth{HMACSecrets: []string{string(testSecret)}, ForwardClaims: []ForwardClaim{{Claim: "sub", Header: "X-User-Id"}}}
	if err := j.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer j.Cleanup()
	claims := baseClaims()
	claims["exp"] = time.Now().Add(time.Hour).Unix()
	claims["iat"] = time.Now().Unix()
	tok := sign(b, jwt.SigningMethodHS256, testSecret, "", claims)
	base := httptest.NewRequest("GET", "/orders", nil)
	base.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		// each request gets its own replacer and vars, as Caddy's server
		// gives it (reusing one would grow its replacer every iteration)
		ctx := context.WithValue(base.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
		r := base.WithContext(ctx)
		r.Header = base.Header.Clone() // the handler removes headers it forwards claims in
		if err := j.ServeHTTP(w, r, nopHandler{}); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU adds a cpu-ns/op metric: CPU time per operation, which the
// other processes of a busy machine do not inflate as they do ns/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if d := cpuTime() - start; d > 0 && b.N > 0 {
			b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}
