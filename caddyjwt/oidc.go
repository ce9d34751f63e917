package caddyjwt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/urls"
)

// maxDiscoveryBytes bounds an OpenID Provider configuration document.
const maxDiscoveryBytes = 1 << 20

// OIDCConfig configures an OIDCKeySet.
type OIDCConfig struct {
	// Issuer is the OpenID Provider's issuer URL. Its configuration is read
	// from Issuer + "/.well-known/openid-configuration", whose `issuer`
	// must equal Issuer.
	Issuer string
	// JWKS are the settings of the key set at the discovered `jwks_uri`
	// (its URL is ignored). Refresh also caps the discovery retry backoff,
	// Timeout bounds one discovery fetch.
	JWKS JWKSConfig
	// JoinJWKS returns the started key set of a jwks_uri and a function
	// that releases it (nil: a set of its own, started and stopped with the
	// OIDCKeySet). jwt_auth passes its JWKS pool here, so that a jwks_uri
	// is fetched once whether it was discovered or configured.
	JoinJWKS func(cfg JWKSConfig) (*JWKSet, func(), error)
}

// OIDCKeySet is the key set of an OpenID Provider: it discovers the
// provider's `jwks_uri` in the background (retrying with backoff while the
// provider is down or its configuration is wrong) and then serves the keys
// of that JWK Set, which refreshes and rotates as any JWKSet does. Until
// discovery succeeds it has no keys. It implements KeySet.
type OIDCKeySet struct {
	cfg    OIDCConfig
	client *http.Client
	log    *zap.Logger

	set         atomic.Pointer[JWKSet]
	meta        atomic.Pointer[ProviderMetadata]
	release     func() // under mu
	lastAttempt atomic.Int64
	mu          sync.Mutex // one discovery at a time

	startOnce  sync.Once
	stopOnce   sync.Once
	discovered chan struct{} // closed when the first discovery attempt has ended
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// NewOIDCKeySet returns a key set that has not discovered yet; call Start.
func NewOIDCKeySet(cfg OIDCConfig) *OIDCKeySet {
	if cfg.JWKS.Refresh <= 0 {
		cfg.JWKS.Refresh = DefaultJWKSRefresh
	}
	if cfg.JWKS.Timeout <= 0 {
		cfg.JWKS.Timeout = DefaultJWKSTimeout
	}
	s := &OIDCKeySet{cfg: cfg, client: cfg.JWKS.Client, log: cfg.JWKS.Logger}
	if s.client == nil {
		s.client = &http.Client{}
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("oidc_issuer", urls.Redact(cfg.Issuer)))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.discovered = make(chan struct{})
	return s
}

// DiscoveryURL returns the URL of the issuer's OpenID Provider configuration.
func DiscoveryURL(issuer string) string {
	return strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
}

// Start starts discovery in the background; it does not wait for it.
func (s *OIDCKeySet) Start() {
	s.startOnce.Do(func() {
		s.log.Info("OIDC discovery not done yet: discovering in the background")
		s.wg.Add(1)
		go s.loop()
	})
}

// Stop ends discovery, waits for it and releases the JWK Set.
func (s *OIDCKeySet) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.mu.Lock()
		if s.release != nil {
			s.release()
			s.release = nil
		}
		s.mu.Unlock()
	})
}

// Destruct stops the set when it leaves a caddy.UsagePool.
func (s *OIDCKeySet) Destruct() error {
	s.Stop()
	return nil
}

// JWKSURL returns the discovered jwks_uri, or "" before discovery.
func (s *OIDCKeySet) JWKSURL() string {
	if set := s.set.Load(); set != nil {
		return set.URL()
	}
	return ""
}

// Keys returns the keys of the discovered JWK Set (none before discovery).
func (s *OIDCKeySet) Keys() []*Key {
	if set := s.set.Load(); set != nil {
		return set.Keys()
	}
	return nil
}

// Generation changes whenever the keys change.
func (s *OIDCKeySet) Generation() uint64 {
	if set := s.set.Load(); set != nil {
		// +1: the discovery itself is a change (from no keys)
		return set.Generation() + 1
	}
	return 0
}

// RefreshEarly behaves as JWKSet.RefreshEarly once the provider is
// discovered. Before, it waits for the first discovery attempt; while
// discovery keeps failing it tries again at most once a second (as a
// failing JWKSet does).
func (s *OIDCKeySet) RefreshEarly(ctx context.Context) bool {
	if s.ensureDiscovered(ctx) == nil {
		return false
	}
	return s.set.Load().RefreshEarly(ctx)
}

// Metadata returns the provider's configuration as discovered: at once
// when discovery succeeded; before, it waits for the first discovery
// attempt, and while discovery keeps failing it tries again at most once
// a second. Nil: not discovered (the provider is down or its
// configuration is wrong; the logs say which).
func (s *OIDCKeySet) Metadata(ctx context.Context) *ProviderMetadata {
	return s.ensureDiscovered(ctx)
}

// ensureDiscovered returns the discovered metadata, discovering first
// when it may (see Metadata).
func (s *OIDCKeySet) ensureDiscovered(ctx context.Context) *ProviderMetadata {
	if m := s.meta.Load(); m != nil && s.set.Load() != nil {
		return m
	}
	select {
	case <-s.discovered:
	default:
		select {
		case <-s.discovered:
		case <-ctx.Done():
			return nil
		}
	}
	if s.set.Load() != nil {
		return s.meta.Load()
	}
	last := s.lastAttempt.Load()
	if time.Now().UnixNano()-last < int64(failingCooldown) {
		return nil
	}
	s.mu.Lock()
	if s.lastAttempt.Load() == last && s.set.Load() == nil {
		if err := s.discoverLocked(); err != nil {
			s.log.Warn("early OIDC discovery failed", zap.Error(err))
		}
	}
	s.mu.Unlock()
	if s.set.Load() != nil {
		return s.meta.Load()
	}
	return nil
}

func (s *OIDCKeySet) loop() {
	defer s.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("OIDC discovery loop panicked", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		}
	}()
	retry := s.cfg.JWKS.retryBase()
	failures := 0
	for first := true; ; first = false {
		s.mu.Lock()
		var err error
		if s.set.Load() == nil {
			err = s.discoverLocked()
		}
		s.mu.Unlock()
		if first {
			close(s.discovered)
		}
		if err == nil || s.ctx.Err() != nil {
			return
		}
		failures++
		if ce := s.log.Check(failureLevel(failures), "OIDC discovery failed; the provider's tokens are refused until it succeeds, retrying in the background"); ce != nil {
			ce.Write(zap.Error(err), zap.Int("failures", failures), zap.Duration("retry_in", retry))
		}
		t := time.NewTimer(retry)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(retry*2, s.cfg.JWKS.Refresh)
	}
}

// discoverLocked reads the provider configuration and, when it is good,
// joins the JWK Set at its jwks_uri. The caller holds s.mu.
func (s *OIDCKeySet) discoverLocked() error {
	s.lastAttempt.Store(time.Now().UnixNano())
	meta, err := s.fetchConfig()
	if err != nil {
		return err
	}
	if s.ctx.Err() != nil {
		return s.ctx.Err()
	}
	cfg := s.cfg.JWKS
	cfg.URL = meta.JWKSURI
	join := s.cfg.JoinJWKS
	if join == nil {
		join = func(cfg JWKSConfig) (*JWKSet, func(), error) {
			set := NewJWKSet(cfg)
			set.Start()
			return set, set.Stop, nil
		}
	}
	set, release, err := join(cfg)
	if err != nil {
		return err
	}
	s.release = release
	s.meta.Store(meta)
	s.set.Store(set)
	s.log.Info("OIDC provider discovered", zap.String("jwks_uri", urls.Redact(meta.JWKSURI)))
	return nil
}

// ProviderMetadata is what the gateway reads of an OpenID Provider's
// configuration (OpenID Connect Discovery 1.0, section 3, and RP-Initiated
// Logout 1.0 for end_session_endpoint): jwt_auth needs jwks_uri,
// oidc_login the endpoints of the login. Every URL is checked to be http
// or https.
type ProviderMetadata struct {
	Issuer                        string   `json:"issuer"`
	JWKSURI                       string   `json:"jwks_uri"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	UserinfoEndpoint              string   `json:"userinfo_endpoint"`
	EndSessionEndpoint            string   `json:"end_session_endpoint"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported"`
}

func (s *OIDCKeySet) fetchConfig() (*ProviderMetadata, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.JWKS.Timeout)
	defer cancel()
	u := DiscoveryURL(s.cfg.Issuer)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s answered %s", urls.Redact(u), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", urls.Redact(u), err)
	}
	if len(body) > maxDiscoveryBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", urls.Redact(u), maxDiscoveryBytes)
	}
	var doc ProviderMetadata
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%s is not an OpenID Provider configuration: %v", urls.Redact(u), err)
	}
	if doc.Issuer != s.cfg.Issuer {
		return nil, fmt.Errorf("issuer mismatch: %s names issuer %q, the config says %q (they must be equal, OpenID Connect Discovery 1.0 section 4.3)",
			urls.Redact(u), doc.Issuer, s.cfg.Issuer)
	}
	if doc.JWKSURI == "" {
		return nil, errors.New(urls.Redact(u) + " has no jwks_uri")
	}
	for _, f := range []struct{ name, url string }{
		{"jwks_uri", doc.JWKSURI}, {"authorization_endpoint", doc.AuthorizationEndpoint}, {"token_endpoint", doc.TokenEndpoint},
		{"userinfo_endpoint", doc.UserinfoEndpoint}, {"end_session_endpoint", doc.EndSessionEndpoint},
	} {
		if f.url == "" && f.name != "jwks_uri" {
			continue // not every provider has every endpoint; its user says what it needs
		}
		if err := urls.CheckHTTP(f.name, f.url); err != nil {
			return nil, fmt.Errorf("%s: %v", urls.Redact(u), err)
		}
	}
	return &doc, nil
}
