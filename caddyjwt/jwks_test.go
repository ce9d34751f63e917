package caddyjwt

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer is a real JWKS endpoint whose document and status a test
// changes, counting requests.
type jwksServer struct {
	*httptest.Server
	mu     sync.Mutex
	doc    []byte
	status int
	hits   atomic.Int32
}

func newJWKSServer(t testing.TB, doc []byte) *jwksServer {
	s := &jwksServer{doc: doc, status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		doc, status := s.doc, s.status
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		w.Write(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(doc []byte, status int) {
	s.mu.Lock()
	s.doc, s.status = doc, status
	s.mu.Unlock()
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJWKSetFetchRefreshAndKeepLastGood(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", "RS256")))
	var results sync.Map
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Second, Cooldown: time.Hour})
	s.OnFetch(func(r string) {
		n, _ := results.LoadOrStore(r, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	})
	s.Start() // returns at once: the first fetch is in the background
	defer s.Stop()
	waitFor(t, "the first fetch", s.Loaded)
	if got := s.Keys(); len(got) != 1 || got[0].ID != "k1" {
		t.Fatalf("keys after the first fetch: %v", got)
	}
	gen := s.Generation()

	// the endpoint breaks: the last good keys stay
	srv.set([]byte("oops"), http.StatusInternalServerError)
	h := srv.hits.Load()
	waitFor(t, "a failed refresh", func() bool { return srv.hits.Load() > h })
	if got := s.Keys(); len(got) != 1 || got[0].ID != "k1" || s.Generation() != gen {
		t.Fatalf("keys after failure: %v", got)
	}
	// garbage with 200 also keeps the keys
	srv.set([]byte(`{"keys":[{"kty":"oct","k":"AA"}]}`), http.StatusOK)
	h = srv.hits.Load()
	waitFor(t, "a refresh of an unusable set", func() bool { return srv.hits.Load() > h })
	if got := s.Keys(); len(got) != 1 || got[0].ID != "k1" {
		t.Fatalf("keys after unusable set: %v", got)
	}

	// the issuer rotates: the background refresh picks it up
	srv.set(jwksDoc(jwkOf(&k.rsa2.PublicKey, "k2", "RS256")), http.StatusOK)
	waitFor(t, "rotated keys", func() bool { ks := s.Keys(); return len(ks) == 1 && ks[0].ID == "k2" })
	if s.Generation() == gen {
		t.Fatal("generation unchanged after rotation")
	}
	if n, ok := results.Load("error"); !ok || n.(*atomic.Int32).Load() == 0 {
		t.Fatal("no error result reported")
	}
	if n, ok := results.Load("ok"); !ok || n.(*atomic.Int32).Load() == 0 {
		t.Fatal("no ok result reported")
	}
}

func TestJWKSetStartsWithoutIdP(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, nil)
	srv.set(nil, http.StatusServiceUnavailable)
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Hour, Cooldown: time.Hour})
	s.Start() // must not fail or hang
	defer s.Stop()
	if len(s.Keys()) != 0 {
		t.Fatal("keys from a failing endpoint")
	}
	// the IdP comes up: the retry (with backoff from 1s) picks it up
	// although the refresh interval is an hour
	srv.set(jwksDoc(jwkOf(&k.p256.PublicKey, "ec", "")), http.StatusOK)
	waitFor(t, "keys after the IdP came up", func() bool { return len(s.Keys()) == 1 })
}

func TestJWKSetLimits(t *testing.T) {
	k := keys(t)
	big := `{"keys":[],"pad":"` + strings.Repeat("x", 2000) + `"}`
	srv := newJWKSServer(t, []byte(big))
	s := NewJWKSet(JWKSConfig{URL: srv.URL, MaxBytes: 1000})
	if err := s.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than 1000 bytes") {
		t.Fatalf("oversized JWKS: %v", err)
	}
	// a slow endpoint is cut by the timeout
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	s2 := NewJWKSet(JWKSConfig{URL: slow.URL, Timeout: 100 * time.Millisecond})
	if err := s2.Fetch(context.Background()); err == nil {
		t.Fatal("slow JWKS did not time out")
	}
	_ = k
}

func TestJWKSetEarlyRefreshCooldown(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", "")))
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Hour, Cooldown: time.Hour})
	s.Start()
	defer s.Stop()
	v, err := NewVerifier(Options{}, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix()}
	ctx := context.Background()
	if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa, "k1", claims)); err != nil {
		t.Fatal(err)
	}
	// unknown kids inside the cooldown do not hammer the IdP
	h := srv.hits.Load()
	for i := 0; i < 20; i++ {
		if _, err := v.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa2, "k-unknown", claims)); err != ErrUnknownKey {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if got := srv.hits.Load() - h; got != 0 {
		t.Fatalf("%d fetches inside the cooldown", got)
	}

	// after the cooldown, one unknown kid refreshes once, synchronously
	s2 := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Hour, Cooldown: 50 * time.Millisecond})
	s2.Start()
	defer s2.Stop()
	v2, _ := NewVerifier(Options{}, nil, s2)
	srv.set(jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", ""), jwkOf(&k.rsa2.PublicKey, "k2", "")), http.StatusOK)
	waitFor(t, "the cooldown", func() bool {
		return time.Since(time.Unix(0, s2.lastAttempt.Load())) > 60*time.Millisecond
	})
	if _, err := v2.Verify(ctx, sign(t, jwt.SigningMethodRS256, k.rsa2, "k2", claims)); err != nil {
		t.Fatalf("kid after early refresh: %v", err)
	}
}

func TestJWKSetStopEndsLoop(t *testing.T) {
	srv := newJWKSServer(t, []byte(`{"keys":[]}`))
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Second})
	s.Start()
	done := make(chan struct{})
	go func() { s.Destruct(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	s.Stop() // idempotent
}

// TestConcurrentVerifyDuringRotation verifies from many goroutines while
// the JWKS rotates and the cache fills and evicts (run with -race).
func TestConcurrentVerifyDuringRotation(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", ""), jwkOf(&k.p256.PublicKey, "e1", "")))
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Second, Cooldown: 10 * time.Millisecond})
	s.Start()
	defer s.Stop()
	v, err := NewVerifier(Options{CacheSize: 8}, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix()}
	var toks []string
	for i := 0; i < 16; i++ {
		c := jwt.MapClaims{"sub": "u", "exp": claims["exp"], "n": i}
		toks = append(toks, sign(t, jwt.SigningMethodES256, k.p256, "e1", c))
	}
	unknown := sign(t, jwt.SigningMethodRS256, k.rsa2, "k2", claims)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := v.Verify(context.Background(), toks[(i+g)%len(toks)]); err != nil {
					t.Errorf("verify: %v", err)
					return
				}
				if i%50 == 0 {
					v.Verify(context.Background(), unknown)
				}
			}
		}(g)
	}
	for i := 0; i < 5; i++ {
		srv.set(jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", ""), jwkOf(&k.p256.PublicKey, "e1", ""), jwkOf(&k.rsa2.PublicKey, "k-"+strconv.Itoa(i), "")), http.StatusOK)
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// TestJWKSetEarlyRefreshWhileFailing: while the last fetch failed, a token
// naming a kid refreshes after one second, not after the (long) cooldown
// and not only at the background retry, which has backed off by then.
func TestJWKSetEarlyRefreshWhileFailing(t *testing.T) {
	k := keys(t)
	srv := newJWKSServer(t, nil)
	srv.set(nil, http.StatusServiceUnavailable)
	s := NewJWKSet(JWKSConfig{URL: srv.URL, Refresh: time.Hour, Cooldown: time.Hour})
	s.Start()
	defer s.Stop()
	v, err := NewVerifier(Options{}, nil, s)
	if err != nil {
		t.Fatal(err)
	}
	// fetches at 0s, 1s and 3s failed: the next retry is at 7s
	waitFor(t, "two background retries", func() bool { return srv.hits.Load() >= 3 })
	srv.set(jwksDoc(jwkOf(&k.rsa.PublicKey, "k1", "")), http.StatusOK)
	last := time.Unix(0, s.lastAttempt.Load())
	time.Sleep(time.Until(last.Add(failingCooldown + 50*time.Millisecond)))
	claims := jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix()}
	if _, err := v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa, "k1", claims)); err != nil {
		t.Fatalf("token after the IdP came back, %s after the last failed fetch: %v", time.Since(last).Round(time.Millisecond), err)
	}
	// and still at most one fetch a second for unknown kids
	h := srv.hits.Load()
	for i := 0; i < 20; i++ {
		v.Verify(context.Background(), sign(t, jwt.SigningMethodRS256, k.rsa2, "k-unknown", claims))
	}
	if got := srv.hits.Load() - h; got != 0 {
		t.Fatalf("%d fetches for unknown kids right after a good fetch (cooldown 1h)", got)
	}
}
