package caddyjwt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults of JWKSConfig.
const (
	DefaultJWKSRefresh  = 10 * time.Minute
	DefaultJWKSCooldown = 30 * time.Second
	DefaultJWKSTimeout  = 5 * time.Second
	DefaultJWKSMaxBytes = 1 << 20
	minRetry            = time.Second
)

// JWKSConfig configures a JWKSet.
type JWKSConfig struct {
	// URL of the JWK Set document.
	URL string
	// Refresh is the background refresh interval (0: DefaultJWKSRefresh).
	Refresh time.Duration
	// Cooldown is the shortest time between two fetches caused by tokens
	// that name an unknown kid (0: DefaultJWKSCooldown).
	Cooldown time.Duration
	// Timeout bounds one fetch (0: DefaultJWKSTimeout).
	Timeout time.Duration
	// MaxBytes bounds the document size (0: DefaultJWKSMaxBytes).
	MaxBytes int64
	// Client does the fetches (nil: a client without redirects to other
	// schemes than http and https).
	Client *http.Client
	// Logger receives fetch failures and skipped keys (nil: no logs).
	Logger *zap.Logger

	// retry is the first wait after a failed fetch, doubled per failure
	// up to Refresh (0: minRetry); tests shorten it.
	retry time.Duration
}

func (c JWKSConfig) retryBase() time.Duration {
	if c.retry > 0 {
		return c.retry
	}
	return minRetry
}

// JWKSet is a JWK Set fetched from a URL and kept fresh in the background.
// When a fetch fails the last good keys stay in use. It implements KeySet.
type JWKSet struct {
	cfg    JWKSConfig
	client *http.Client
	log    *zap.Logger

	keys        atomic.Pointer[[]*Key]
	gen         atomic.Uint64
	lastAttempt atomic.Int64 // unix nanoseconds of the last fetch start
	failing     atomic.Bool
	hook        atomic.Pointer[func(result string)]

	fetchMu sync.Mutex
	fp      [32]byte // fingerprint of the current keys (under fetchMu)

	startOnce sync.Once
	stopOnce  sync.Once
	loaded    chan struct{} // closed when the first fetch has ended, well or not
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// NewJWKSet returns a key set that has not fetched yet; call Start.
func NewJWKSet(cfg JWKSConfig) *JWKSet {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultJWKSCooldown
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultJWKSTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultJWKSMaxBytes
	}
	s := &JWKSet{cfg: cfg, client: cfg.Client, log: cfg.Logger}
	if s.client == nil {
		s.client = &http.Client{}
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("jwks_url", cfg.URL))
	empty := []*Key{}
	s.keys.Store(&empty)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loaded = make(chan struct{})
	return s
}

// URL returns the JWK Set URL.
func (s *JWKSet) URL() string { return s.cfg.URL }

// Keys returns the current keys.
func (s *JWKSet) Keys() []*Key { return *s.keys.Load() }

// Generation changes whenever the set of keys changes.
func (s *JWKSet) Generation() uint64 { return s.gen.Load() }

// OnFetch sets a function called with "ok" or "error" after each fetch
// (for metrics). The latest one set wins.
func (s *JWKSet) OnFetch(fn func(result string)) {
	if fn == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&fn)
}

// Start starts the refresh loop, whose first fetch is at once. It does not
// wait for it: a config load never waits on the identity provider. Requests
// that come before the keys do wait for that first fetch (RefreshEarly),
// and get 401 if it fails. Later calls do nothing.
func (s *JWKSet) Start() {
	s.startOnce.Do(func() {
		s.log.Info("JWKS not loaded yet: fetching in the background")
		s.wg.Add(1)
		go s.loop()
	})
}

// Loaded reports whether the first fetch has ended (whatever its result).
func (s *JWKSet) Loaded() bool {
	select {
	case <-s.loaded:
		return true
	default:
		return false
	}
}

// Stop ends the refresh loop and waits for it.
func (s *JWKSet) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// Destruct stops the set when it leaves a caddy.UsagePool.
func (s *JWKSet) Destruct() error {
	s.Stop()
	return nil
}

func (s *JWKSet) loop() {
	defer s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("JWKS refresh loop panicked", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		}
	}()
	err := s.Fetch(s.ctx)
	close(s.loaded)
	failures := 0
	retry := s.cfg.retryBase()
	for {
		wait := s.cfg.Refresh
		// failing is also set by early refreshes between these fetches
		if s.failing.Load() {
			wait = min(retry, s.cfg.Refresh)
			retry *= 2
		} else {
			retry = s.cfg.retryBase()
		}
		if err == nil {
			failures = 0
		} else if s.ctx.Err() == nil {
			failures++
			s.logFailure(failures, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err = s.Fetch(s.ctx)
	}
}

// failuresBeforeError is how many fetches in a row may fail before a
// fetcher that retries logs at error level: the first ones are warnings,
// since an identity provider that starts with the gateway (as the demo
// JWKS of scripts/run, served by the gateway itself) is not up for the
// first fetch; one that keeps failing is an error.
const failuresBeforeError = 3

// failureLevel is the level of the n-th failure in a row.
func failureLevel(n int) zapcore.Level {
	if n < failuresBeforeError {
		return zapcore.WarnLevel
	}
	return zapcore.ErrorLevel
}

// logFailure logs the n-th failed fetch in a row of the refresh loop.
func (s *JWKSet) logFailure(n int, err error, retryIn time.Duration) {
	msg := "JWKS refresh failed; keeping the last good keys, retrying in the background"
	switch {
	case len(s.Keys()) == 0 && n == 1:
		msg = "initial JWKS fetch failed; retrying in the background"
	case len(s.Keys()) == 0:
		msg = "JWKS fetch keeps failing; its tokens are refused until it succeeds, retrying in the background"
	}
	if ce := s.log.Check(failureLevel(n), msg); ce != nil {
		ce.Write(zap.Error(err), zap.Int("failures", n), zap.Duration("retry_in", retryIn), zap.Int("keys", len(s.Keys())))
	}
}

// failingCooldown is the cooldown of early refreshes while the last fetch
// failed.
const failingCooldown = time.Second

// RefreshEarly fetches now unless a fetch started less than the cooldown
// ago. It reports whether new keys may be available (it fetched, or
// another caller fetched while this one waited).
func (s *JWKSet) RefreshEarly(ctx context.Context) bool {
	if !s.Loaded() {
		// the first fetch is under way: wait for it rather than refuse a
		// token whose key it may bring
		select {
		case <-s.loaded:
			return true
		case <-ctx.Done():
			return false
		}
	}
	last := s.lastAttempt.Load()
	cooldown := s.cfg.Cooldown
	if s.failing.Load() && cooldown > failingCooldown {
		// The last fetch failed (the IdP was down, or not up yet when
		// the gateway started): the background retry backs off towards
		// the refresh interval, so a token with a kid is the best sign
		// that keys may be there now. Still at most one fetch a second.
		cooldown = failingCooldown
	}
	if time.Now().UnixNano()-last < int64(cooldown) {
		return false
	}
	s.fetchMu.Lock()
	if s.lastAttempt.Load() != last {
		s.fetchMu.Unlock()
		return true
	}
	// the set's own context: a client that goes away does not waste the
	// one early refresh of this cooldown
	err := s.fetchLocked(s.ctx)
	s.fetchMu.Unlock()
	if err != nil {
		s.log.Warn("early JWKS refresh for an unknown kid failed", zap.Error(err))
	}
	return true
}

// Fetch downloads and installs the key set now.
func (s *JWKSet) Fetch(ctx context.Context) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	return s.fetchLocked(ctx)
}

func (s *JWKSet) fetchLocked(ctx context.Context) error {
	s.lastAttempt.Store(time.Now().UnixNano())
	err := s.fetch(ctx)
	s.failing.Store(err != nil)
	if h := s.hook.Load(); h != nil {
		if err != nil {
			(*h)("error")
		} else {
			(*h)("ok")
		}
	}
	return err
}

func (s *JWKSet) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("JWKS endpoint answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBytes+1))
	if err != nil {
		return fmt.Errorf("reading JWKS: %v", err)
	}
	if int64(len(body)) > s.cfg.MaxBytes {
		return fmt.Errorf("JWKS document larger than %d bytes", s.cfg.MaxBytes)
	}
	keys, skipped, enc, err := parseJWKS(body, "jwks "+s.cfg.URL)
	if err != nil {
		return err
	}
	if ce := s.log.Check(zap.DebugLevel, "skipping JWKS encryption key"); ce != nil && len(enc) > 0 {
		ce.Write(zap.Strings("keys", enc))
	}
	if len(keys) == 0 {
		for _, why := range skipped {
			s.log.Warn("skipping JWKS key", zap.String("reason", why))
		}
		return errors.New("JWKS holds no usable signature key")
	}
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k.ID))
		h.Write([]byte{0})
		h.Write([]byte(k.Algorithm))
		h.Write([]byte{0})
		h.Write(k.fp[:])
	}
	var fp [32]byte
	h.Sum(fp[:0])
	if fp == s.fp {
		return nil
	}
	for _, why := range skipped {
		s.log.Warn("skipping JWKS key", zap.String("reason", why))
	}
	s.fp = fp
	s.keys.Store(&keys)
	s.gen.Add(1)
	kids := make([]string, len(keys))
	for i, k := range keys {
		kids[i] = k.ID
	}
	s.log.Info("JWKS keys loaded", zap.Strings("kids", kids))
	return nil
}
