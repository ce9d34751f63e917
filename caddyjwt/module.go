package caddyjwt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/credential"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/fieldedits"

	"github.com/apigate/gateway/internal/urls"
)

func init() {
	caddy.RegisterModule(JWTAuth{})
}

// pools hold what outlives a config reload: JWKS fetchers (keyed by URL and
// fetch settings) and verifiers with their token caches (keyed by the whole
// verification config, secrets hashed).
var (
	jwksPool     = caddy.NewUsagePool()
	verifierPool = caddy.NewUsagePool()
)

// DefaultRealm is the realm of the WWW-Authenticate challenge.
const DefaultRealm = "gateway"

// JWTAuth is an HTTP handler that authenticates requests with a JSON Web
// Token. It verifies the token's signature with the configured keys (HMAC
// secrets, PEM public keys, JWKS URLs), checks exp/nbf/iat, issuer,
// audience and required claims, and then exposes the identity to later
// handlers (caddyjwt.FromRequest) and placeholders:
// `{http.auth.user.id}` (the `sub` claim) and
// `{http.auth.jwt.claims.<path>}` (nested paths, arrays joined with ",").
//
// A request that an identity source before this one (api_key,
// client_cert_auth) already identified passes on with that identity. A
// request without a token gets 401 with `WWW-Authenticate: Bearer
// realm="..."`; a bad token gets 401 with `WWW-Authenticate: Bearer
// error="invalid_token", error_description="..."` and a JSON body
// `{"error":"invalid_token","reason":"..."}`.
type JWTAuth struct {
	// HMACSecrets are secrets for HS256/384/512. Placeholders such as
	// `{env.JWT_SECRET}` and `{file./run/secrets/jwt}` are expanded when
	// the config loads.
	HMACSecrets []string `json:"hmac_secrets,omitempty"`

	// PublicKeys are paths of PEM files holding RSA, ECDSA or Ed25519
	// public keys (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE blocks).
	PublicKeys []string `json:"public_keys,omitempty"`

	// JWKSURLs are URLs of JWK Sets. Each is fetched when the config loads
	// (a failure is logged, not fatal), refreshed in the background, and
	// refreshed early when a token names an unknown kid.
	JWKSURLs []string `json:"jwks_urls,omitempty"`

	// JWKSRefresh is the background refresh interval. Default: 10m.
	JWKSRefresh caddy.Duration `json:"jwks_refresh,omitempty"`

	// JWKSCooldown is the shortest time between two early refreshes caused
	// by unknown kids. Default: 30s.
	JWKSCooldown caddy.Duration `json:"jwks_cooldown,omitempty"`

	// JWKSTimeout bounds one JWKS fetch. Default: 5s.
	JWKSTimeout caddy.Duration `json:"jwks_timeout,omitempty"`

	// Algorithms is the allow-list of signature algorithms. Default: every
	// algorithm the configured keys can verify. `none` is never accepted.
	Algorithms []string `json:"algorithms,omitempty"`

	// Issuers: when set, the `iss` claim must be one of them.
	Issuers []string `json:"issuers,omitempty"`

	// Audiences: when set, the `aud` claim (a string or an array) must
	// contain one of them.
	Audiences []string `json:"audiences,omitempty"`

	// Leeway is the clock skew tolerated on exp, nbf and iat. Default: 0.
	Leeway caddy.Duration `json:"leeway,omitempty"`

	// RequireClaims are claims (dotted paths allowed) that must be present.
	RequireClaims []string `json:"require_claims,omitempty"`

	// FromHeaders are request headers that may carry the token, looked at
	// first, in order. `Authorization` requires the Bearer scheme; other
	// headers hold the raw token (a "Bearer " prefix is stripped).
	// When no from_* source is configured: `Authorization`.
	FromHeaders []string `json:"from_headers,omitempty"`

	// FromCookies are cookies that may carry the token, looked at after
	// the headers.
	FromCookies []string `json:"from_cookies,omitempty"`

	// FromQuery are query parameters that may carry the token, looked at
	// last.
	FromQuery []string `json:"from_query,omitempty"`

	// ForwardClaims copy claims of the request's identity into upstream
	// request headers. A header of the same name sent by the client is
	// always removed first. They apply to whichever identity the request
	// has when it passes this handler: the token's, or one an identity
	// source before this one (api_key, client_cert_auth) established.
	ForwardClaims []ForwardClaim `json:"forward_claims,omitempty"`

	// StripToken removes the credential (the token's header, cookie or
	// query parameter) from the request before it goes upstream.
	StripToken bool `json:"strip_token,omitempty"`

	// Optional lets requests without a token through, anonymous. A token
	// that is present but invalid is still rejected.
	Optional bool `json:"optional,omitempty"`

	// Realm is the realm of the WWW-Authenticate challenge. Default: gateway.
	Realm string `json:"realm,omitempty"`

	// MaxTokenSize is the longest token accepted, in bytes; longer tokens
	// are rejected without being parsed. Default: 8192.
	MaxTokenSize int `json:"max_token_size,omitempty"`

	// CacheSize bounds the cache of verified tokens (entries). Default:
	// 10000. -1 disables the cache.
	CacheSize int `json:"cache_size,omitempty"`

	// CacheTTL caps how long a verified token stays cached; an entry never
	// outlives the token's exp. Default: 5m.
	CacheTTL caddy.Duration `json:"cache_ttl,omitempty"`

	// Providers are identity providers. When set, a token's `iss` picks
	// exactly one of them and only that provider's keys, algorithms,
	// audiences and leeway apply; a token of any other issuer is refused
	// (`unknown issuer`). The flat fields hmac_secrets, public_keys,
	// jwks_urls, algorithms, issuers, audiences and leeway must then be
	// empty: they describe the one implicit provider of a config without
	// providers, whose keys verify tokens of every listed issuer.
	Providers []IdentityProvider `json:"providers,omitempty"`

	verifier    *Verifier
	sources     []credential.TokenSource
	forward     *identity.ClaimHeaders
	challenge   string
	metrics     *jwtMetrics
	logger      *zap.Logger
	jwksKeys    []string
	verifierKey string
}

// IdentityProvider is one issuer of tokens and its keys. Exactly one of
// OIDC and Issuer is set; with Issuer, at least one of JWKSURLs,
// PublicKeys and HMACSecrets.
type IdentityProvider struct {
	// Name identifies the provider in errors, logs and the config; names
	// are unique within a jwt_auth.
	Name string `json:"name"`

	// OIDC is the issuer URL of an OpenID Provider. Its configuration is
	// read in the background from `<oidc>/.well-known/openid-configuration`;
	// its `issuer` must equal this URL, and its `jwks_uri` is fetched and
	// refreshed as a jwks_url is. Tokens must have `iss` equal to this URL.
	OIDC string `json:"oidc,omitempty"`

	// Issuer is the exact `iss` of the provider's tokens (without OIDC).
	Issuer string `json:"issuer,omitempty"`

	// JWKSURLs are URLs of the provider's JWK Sets.
	JWKSURLs []string `json:"jwks_urls,omitempty"`

	// PublicKeys are paths of PEM files with the provider's public keys.
	PublicKeys []string `json:"public_keys,omitempty"`

	// HMACSecrets are the provider's HMAC secrets; placeholders such as
	// `{env.X}` are expanded when the config loads.
	HMACSecrets []string `json:"hmac_secrets,omitempty"`

	// Algorithms is the provider's allow-list. Default: every algorithm
	// its keys can verify.
	Algorithms []string `json:"algorithms,omitempty"`

	// Audiences: when set, `aud` must contain one of them.
	Audiences []string `json:"audiences,omitempty"`

	// Leeway is the clock skew tolerated on the provider's exp, nbf and
	// iat. Default: 0.
	Leeway caddy.Duration `json:"leeway,omitempty"`
}

// issuer returns the iss the provider's tokens carry.
func (p *IdentityProvider) issuer() string {
	if p.OIDC != "" {
		return p.OIDC
	}
	return p.Issuer
}

// checkProviders checks the providers and their relation to the flat
// fields; the Caddyfile and Validate both use it.
func (j *JWTAuth) checkProviders() error {
	if len(j.Providers) == 0 {
		return nil
	}
	for field, set := range map[string]bool{
		"hmac_secret": len(j.HMACSecrets) > 0, "public_key": len(j.PublicKeys) > 0, "jwks_url": len(j.JWKSURLs) > 0,
		"issuer": len(j.Issuers) > 0, "audience": len(j.Audiences) > 0, "algorithms": len(j.Algorithms) > 0, "leeway": j.Leeway != 0,
	} {
		if set {
			return fmt.Errorf("%s outside a provider block: with providers, each provider has its own keys, issuer, audience, algorithms and leeway", field)
		}
	}
	names := make(map[string]bool)
	issuers := make(map[string]string)
	for i := range j.Providers {
		p := &j.Providers[i]
		if p.Name == "" {
			return fmt.Errorf("provider #%d has no name", i+1)
		}
		if names[p.Name] {
			return fmt.Errorf("provider %q is defined twice", p.Name)
		}
		names[p.Name] = true
		switch {
		case p.OIDC != "" && (p.Issuer != "" || len(p.JWKSURLs) > 0 || len(p.PublicKeys) > 0 || len(p.HMACSecrets) > 0):
			return fmt.Errorf("provider %q: oidc discovers the issuer and the keys; it cannot be combined with issuer, jwks_url, public_key or hmac_secret", p.Name)
		case p.OIDC != "":
			if err := urls.CheckHTTP("oidc", p.OIDC); err != nil {
				return fmt.Errorf("provider %q: %v", p.Name, err)
			}
		case p.Issuer == "":
			return fmt.Errorf("provider %q: set oidc <issuer-url>, or issuer with jwks_url, public_key or hmac_secret", p.Name)
		case len(p.JWKSURLs) == 0 && len(p.PublicKeys) == 0 && len(p.HMACSecrets) == 0:
			return fmt.Errorf("provider %q: no key source: set jwks_url, public_key or hmac_secret (or use oidc)", p.Name)
		}
		if other, dup := issuers[p.issuer()]; dup {
			return fmt.Errorf("providers %q and %q have the same issuer %q: a token's iss must pick exactly one provider", other, p.Name, p.issuer())
		}
		issuers[p.issuer()] = p.Name
		if p.Leeway < 0 {
			return fmt.Errorf("provider %q: invalid leeway %q: must not be negative", p.Name, time.Duration(p.Leeway))
		}
	}
	return nil
}

// ForwardClaim copies a claim into an upstream request header; it is
// identity.ForwardClaim, which every identity source shares.
type ForwardClaim = identity.ForwardClaim

// CaddyModule returns the Caddy module information.
func (JWTAuth) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.jwt_auth",
		New: func() caddy.Module { return new(JWTAuth) },
	}
}

type pooledVerifier struct{ *Verifier }

func (pooledVerifier) Destruct() error { return nil }

// Provision loads the keys, joins (or starts) the shared JWKS fetchers and
// verifier, and registers the metrics. It does no network I/O: JWKS fetch in
// the background.
func (j *JWTAuth) Provision(ctx caddy.Context) error {
	j.logger = ctx.Logger()
	var err error
	if j.metrics, err = newMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	if j.Realm == "" {
		j.Realm = DefaultRealm
	}
	j.challenge = deny.BearerChallenge(j.Realm)
	repl := caddy.NewReplacer()
	// fp identifies the keys and settings: configs (and reloads) with the
	// same ones share one verifier and its verified-token cache
	fp := sha256.New()
	if len(j.Providers) > 0 {
		// checked before any discovery starts in the background
		if err := j.checkProviders(); err != nil {
			return err
		}
		if err := j.provisionProviders(repl, fp); err != nil {
			return err
		}
	} else {
		keys, err := j.staticKeys(repl, fp, j.HMACSecrets, j.PublicKeys, j.Algorithms)
		if err != nil {
			return err
		}
		sets, err := j.joinKeySets(repl, fp, j.JWKSURLs)
		if err != nil {
			return err
		}
		if len(j.Issuers) > 1 && len(keys)+len(sets) > 1 {
			j.logger.Warn("several issuers share several key sources: any of the keys verifies a token claiming any of the issuers; use provider blocks to bind each issuer to its own keys",
				zap.Strings("issuers", j.Issuers))
		}
		if err := j.joinVerifier(keys, sets, fp); err != nil {
			return err
		}
	}
	j.sources = credential.OrderSources(j.FromHeaders, j.FromCookies, j.FromQuery)
	j.forward, err = identity.NewClaimHeaders(j.ForwardClaims)
	return err
}

// staticKeys loads the HMAC secrets and PEM public keys, and warns about a
// key that none of the allowed algorithms can use.
func (j *JWTAuth) staticKeys(repl *caddy.Replacer, fp hash.Hash, hmacSecrets, publicKeys, algorithms []string) ([]*Key, error) {
	var keys []*Key
	for i, raw := range hmacSecrets {
		secret := repl.ReplaceKnown(raw, "")
		if secret == "" {
			return nil, fmt.Errorf("hmac_secret #%d is empty once placeholders are replaced (is the environment variable or file set?)", i+1)
		}
		if len(secret) < 32 {
			j.logger.Warn("hmac_secret is shorter than 32 bytes; use a long random secret", zap.Int("index", i+1))
		}
		k, err := NewHMACKey([]byte(secret), "")
		if err != nil {
			return nil, fmt.Errorf("hmac_secret #%d: %v", i+1, err)
		}
		keys = append(keys, k)
	}
	for _, raw := range publicKeys {
		path := repl.ReplaceKnown(raw, "")
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("public_key: %v", err)
		}
		ks, err := ParsePEMKeys(data, "public_key "+path)
		if err != nil {
			return nil, err
		}
		keys = append(keys, ks...)
	}
	for _, k := range keys {
		fp.Write(k.fp[:])
		if len(algorithms) > 0 {
			usable := false
			for _, a := range algorithms {
				usable = usable || k.Allows(a)
			}
			if !usable {
				j.logger.Warn("key can verify none of the allowed algorithms; it will reject every token",
					zap.String("source", k.Source), zap.String("key_type", k.Family()), zap.Strings("algorithms", algorithms))
			}
		}
	}
	return keys, nil
}

// jwksConfig is the JWKS fetch settings with the defaults applied (before
// keying the pool, so that `jwks_refresh 10m` and no jwks_refresh share one
// fetcher).
func (j *JWTAuth) jwksConfig() JWKSConfig {
	cfg := JWKSConfig{Refresh: time.Duration(j.JWKSRefresh), Cooldown: time.Duration(j.JWKSCooldown), Timeout: time.Duration(j.JWKSTimeout), Logger: j.logger}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.Cooldown == 0 {
		cfg.Cooldown = DefaultJWKSCooldown
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultJWKSTimeout
	}
	return cfg
}

// joinJWKS joins (or starts) the shared fetcher of cfg.URL, which fetches
// in the background, and returns it with its pool key.
func joinJWKS(cfg JWKSConfig, m *jwtMetrics) (*JWKSet, string, error) {
	poolKey := fmt.Sprintf("jwks|%s|%d|%d|%d", cfg.URL, cfg.Refresh, cfg.Cooldown, cfg.Timeout)
	val, _, err := jwksPool.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		s := NewJWKSet(cfg)
		s.Start()
		return s, nil
	})
	if err != nil {
		return nil, "", err
	}
	s := val.(*JWKSet)
	fetches, u := m.jwksFetches, cfg.URL
	s.OnFetch(func(result string) { fetches.WithLabelValues(u, result).Inc() })
	return s, poolKey, nil
}

// joinKeySets joins (or starts) the shared JWKS fetcher of every jwks_url,
// which fetches in the background.
func (j *JWTAuth) joinKeySets(repl *caddy.Replacer, fp hash.Hash, jwksURLs []string) ([]KeySet, error) {
	var sets []KeySet
	for _, raw := range jwksURLs {
		cfg := j.jwksConfig()
		cfg.URL = repl.ReplaceKnown(raw, "")
		if err := urls.CheckHTTP("jwks_url", cfg.URL); err != nil {
			return nil, err
		}
		s, poolKey, err := joinJWKS(cfg, j.metrics)
		if err != nil {
			return nil, err
		}
		j.jwksKeys = append(j.jwksKeys, poolKey)
		sets = append(sets, s)
		fp.Write([]byte(poolKey))
		fp.Write([]byte{0})
	}
	return sets, nil
}

// joinOIDC joins (or starts) the shared discovery of an OpenID Provider,
// which discovers in the background and then joins the JWKS fetcher of
// the jwks_uri it found through the same pool as jwks_url.
func (j *JWTAuth) joinOIDC(issuer string, fp hash.Hash) (KeySet, error) {
	s, poolKey, err := joinOIDC(j.jwksConfig(), issuer, j.metrics)
	if err != nil {
		return nil, err
	}
	j.jwksKeys = append(j.jwksKeys, poolKey)
	fp.Write([]byte(poolKey))
	fp.Write([]byte{0})
	return s, nil
}

func joinOIDC(cfg JWKSConfig, issuer string, metrics *jwtMetrics) (*OIDCKeySet, string, error) {
	poolKey := fmt.Sprintf("oidc|%s|%d|%d|%d", issuer, cfg.Refresh, cfg.Cooldown, cfg.Timeout)
	// the discovery outlives this config: it holds the metrics (the same
	// collectors in every config), not the module
	val, _, err := jwksPool.LoadOrNew(poolKey, func() (caddy.Destructor, error) {
		s := NewOIDCKeySet(OIDCConfig{Issuer: issuer, JWKS: cfg, JoinJWKS: func(cfg JWKSConfig) (*JWKSet, func(), error) {
			set, key, err := joinJWKS(cfg, metrics)
			if err != nil {
				return nil, nil, err
			}
			return set, func() { _, _ = jwksPool.Delete(key) }, nil
		}})
		s.Start()
		return s, nil
	})
	if err != nil {
		return nil, "", err
	}
	return val.(*OIDCKeySet), poolKey, nil
}

// JoinOIDC joins (or starts) the shared discovery of the OpenID Provider
// issuer, with the default JWKS settings: the same discovery and JWKS
// fetcher as a jwt_auth `provider <name> oidc <issuer>` with default
// settings, so that a provider's keys are fetched and rotated once per
// process whichever module uses them (oidc_login does). Discovery runs in
// the background; Provision does no network I/O. The caller calls release
// once, in its Cleanup.
func JoinOIDC(ctx caddy.Context, issuer string) (set *OIDCKeySet, release func(), err error) {
	m, err := newMetrics(ctx.GetMetricsRegistry())
	if err != nil {
		return nil, nil, err
	}
	cfg := JWKSConfig{Refresh: DefaultJWKSRefresh, Cooldown: DefaultJWKSCooldown, Timeout: DefaultJWKSTimeout, Logger: ctx.Logger()}
	s, poolKey, err := joinOIDC(cfg, issuer, m)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return s, func() { once.Do(func() { _, _ = jwksPool.Delete(poolKey) }) }, nil
}

// provisionProviders loads and joins each provider's keys and joins the
// verifier that picks a provider by iss. The fingerprint holds each
// provider's issuer beside its own keys and rules, so that two configs
// binding the same keys to different issuers never share a verifier (nor
// its cache of verified tokens).
func (j *JWTAuth) provisionProviders(repl *caddy.Replacer, fp hash.Hash) error {
	providers := make([]Provider, 0, len(j.Providers))
	for _, pc := range j.Providers {
		fmt.Fprintf(fp, "provider\x00%s\x00%s\x00", pc.Name, pc.issuer())
		keys, err := j.staticKeys(repl, fp, pc.HMACSecrets, pc.PublicKeys, pc.Algorithms)
		if err != nil {
			return fmt.Errorf("provider %q: %v", pc.Name, err)
		}
		var sets []KeySet
		if pc.OIDC != "" {
			s, err := j.joinOIDC(pc.OIDC, fp)
			if err != nil {
				return fmt.Errorf("provider %q: %v", pc.Name, err)
			}
			sets = []KeySet{s}
		} else if sets, err = j.joinKeySets(repl, fp, pc.JWKSURLs); err != nil {
			return fmt.Errorf("provider %q: %v", pc.Name, err)
		}
		p := Provider{Name: pc.Name, Issuer: pc.issuer(), Keys: keys, Sets: sets,
			Algorithms: pc.Algorithms, Audiences: pc.Audiences, Leeway: time.Duration(pc.Leeway)}
		rulesJSON, err := json.Marshal([]any{p.Algorithms, p.Audiences, p.Leeway})
		if err != nil {
			return err
		}
		fp.Write(rulesJSON)
		fp.Write([]byte{0})
		providers = append(providers, p)
	}
	opts := j.options()
	return j.joinPooledVerifier(opts, fp, func() (*Verifier, error) { return NewProvidersVerifier(opts, providers) })
}

func (j *JWTAuth) options() Options {
	return Options{
		Algorithms:    j.Algorithms,
		Issuers:       j.Issuers,
		Audiences:     j.Audiences,
		Leeway:        time.Duration(j.Leeway),
		RequireClaims: j.RequireClaims,
		MaxTokenSize:  j.MaxTokenSize,
		CacheSize:     j.CacheSize,
		CacheTTL:      time.Duration(j.CacheTTL),
	}
}

// joinVerifier joins (or makes) the verifier shared by configs with the same
// keys and settings.
func (j *JWTAuth) joinVerifier(keys []*Key, sets []KeySet, fp hash.Hash) error {
	opts := j.options()
	return j.joinPooledVerifier(opts, fp, func() (*Verifier, error) { return NewVerifier(opts, keys, sets...) })
}

func (j *JWTAuth) joinPooledVerifier(opts Options, fp hash.Hash, build func() (*Verifier, error)) error {
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	fp.Write(optsJSON)
	j.verifierKey = "verifier|" + hex.EncodeToString(fp.Sum(nil))
	val, _, err := verifierPool.LoadOrNew(j.verifierKey, func() (caddy.Destructor, error) {
		v, err := build()
		if err != nil {
			return nil, err
		}
		return pooledVerifier{v}, nil
	})
	if err != nil {
		j.verifierKey = ""
		return err
	}
	j.verifier = val.(pooledVerifier).Verifier
	return nil
}

// Validate checks the configuration's ranges.
func (j *JWTAuth) Validate() error {
	if err := j.checkProviders(); err != nil {
		return err
	}
	if len(j.Providers) == 0 && len(j.HMACSecrets) == 0 && len(j.PublicKeys) == 0 && len(j.JWKSURLs) == 0 {
		return fmt.Errorf("no key configured: set hmac_secret, public_key or jwks_url, or a provider block")
	}
	for name, d := range map[string]caddy.Duration{
		"jwks_refresh": j.JWKSRefresh, "jwks_cooldown": j.JWKSCooldown, "jwks_timeout": j.JWKSTimeout,
		"leeway": j.Leeway, "cache_ttl": j.CacheTTL,
	} {
		if d < 0 {
			return fmt.Errorf("invalid %s %q: must not be negative", name, time.Duration(d))
		}
	}
	if j.JWKSRefresh != 0 && time.Duration(j.JWKSRefresh) < time.Second {
		return fmt.Errorf("invalid jwks_refresh %q: must be at least 1s", time.Duration(j.JWKSRefresh))
	}
	if j.MaxTokenSize < 0 {
		return fmt.Errorf("invalid max_token_size %d: must be positive", j.MaxTokenSize)
	}
	if j.CacheSize < -1 {
		return fmt.Errorf("invalid cache_size %d: must be positive, or -1 to disable the cache", j.CacheSize)
	}
	for _, fc := range j.ForwardClaims {
		if err := fc.Check(); err != nil {
			return err
		}
	}
	for _, h := range j.FromHeaders {
		if !identity.ValidHeaderName(h) {
			return fmt.Errorf("invalid from_header %q", h)
		}
	}
	return nil
}

// Cleanup releases this config's hold on the shared fetchers and verifier;
// the last user stops them.
func (j *JWTAuth) Cleanup() error {
	if j.verifierKey != "" {
		_, _ = verifierPool.Delete(j.verifierKey)
	}
	for _, k := range j.jwksKeys {
		_, _ = jwksPool.Delete(k)
	}
	return nil
}

// RequestFieldEdits names the request header fields ServeHTTP may change
// (fieldedits.Declarer): the forwarded claims' headers, and with
// strip_token the token's header fields (and Cookie for a cookie source).
func (j *JWTAuth) RequestFieldEdits() []string {
	names := j.forward.Headers()
	if j.StripToken {
		for _, n := range credential.StrippedFields(j.sources) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// Verifier returns the provisioned verifier (nil before Provision).
func (j *JWTAuth) Verifier() *Verifier { return j.verifier }

const claimsPrefix = "http.auth.jwt.claims."

// ServeHTTP authenticates the request.
func (j *JWTAuth) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// The forwarded headers: never the client's; an identity source
	// before this one (api_key, client_cert_auth) that identified the
	// request gets them as a token would.
	earlier, identified := identity.FromRequest(r)
	j.forward.Apply(r.Header, earlier)
	// the first identity stands, and a token the request may also carry
	// is not looked at
	if identified {
		if j.StripToken {
			credential.StripToken(r, j.sources)
		}
		return next.ServeHTTP(w, r)
	}

	token, _, tooLarge := credential.ExtractToken(r, j.sources, j.verifier.MaxTokenSize())
	if tooLarge {
		return j.invalid(w, r, ErrTooLarge)
	}
	if token == "" {
		if j.Optional {
			j.metrics.anonymous.Inc()
			return next.ServeHTTP(w, r)
		}
		j.metrics.missing.Inc()
		identity.SetDenial(r, "jwt_auth", "missing token")
		w.Header().Set("WWW-Authenticate", j.challenge)
		return deny.Respond(w, r, http.StatusUnauthorized, "unauthorized", "missing token")
	}

	id, hit, err := j.verifier.VerifyCached(r.Context(), token)
	if err != nil {
		j.metrics.cacheMisses.Inc()
		return j.invalid(w, r, err)
	}
	if hit {
		j.metrics.cacheHits.Inc()
	} else {
		j.metrics.cacheMisses.Inc()
	}
	j.metrics.valid.Inc()

	SetIdentity(r, id)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.auth.user.id", id.Subject)
		repl.Map(func(key string) (any, bool) {
			if !strings.HasPrefix(key, claimsPrefix) {
				return nil, false
			}
			p, err := ParseClaimPath(key[len(claimsPrefix):])
			if err != nil {
				return "", true
			}
			v, ok := p.Lookup(id.Claims)
			if !ok {
				return "", true
			}
			return identity.Stringify(v), true
		})
	}
	j.forward.Apply(r.Header, id)
	if j.StripToken {
		credential.StripToken(r, j.sources)
	}
	return next.ServeHTTP(w, r)
}

func (j *JWTAuth) invalid(w http.ResponseWriter, r *http.Request, err error) error {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Reason: "invalid token", Label: "invalid token"}
	}
	j.metrics.verifications.WithLabelValues("invalid", e.Label).Inc()
	if ce := j.logger.Check(zap.DebugLevel, "token rejected"); ce != nil {
		ce.Write(zap.String("reason", e.Reason), zap.String("remote_addr", r.RemoteAddr))
	}
	identity.SetDenial(r, "jwt_auth", e.Reason)
	w.Header().Set("WWW-Authenticate", deny.InvalidTokenChallenge(e.Reason))
	return deny.Respond(w, r, http.StatusUnauthorized, "invalid_token", e.Reason)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*JWTAuth)(nil)
	_ caddy.Validator             = (*JWTAuth)(nil)
	_ caddy.CleanerUpper          = (*JWTAuth)(nil)
	_ caddyhttp.MiddlewareHandler = (*JWTAuth)(nil)
	_ fieldedits.Declarer         = (*JWTAuth)(nil)
)
