// Package caddyoidc is the oidc_login handler: people log in with a browser
// through an OpenID Provider (the authorization code flow with PKCE), and
// the gateway keeps their session on the server, in the config's storage,
// shared by a fleet with `storage nats`. A session gives a request the same
// identity jwt_auth gives a token, so rbac, quota, permission, openapi and
// audit work unchanged. See docs/oidc.md.
package caddyoidc

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/credential"
	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/urls"
)

func init() {
	caddy.RegisterModule(OIDCLogin{})
}

// Defaults.
const (
	DefaultRedirectPath          = "/oauth2/callback"
	DefaultLoginPath             = "/oauth2/login"
	DefaultLogoutPath            = "/oauth2/logout"
	DefaultBackchannelLogoutPath = "/oauth2/backchannel_logout"
	DefaultSessionTTL            = 8 * time.Hour
	DefaultIdleTimeout           = time.Hour
	DefaultCookieName            = "gateway_session"
	DefaultCacheSize             = 100000
	// hostPrefix is the cookie name prefix browsers hold to Secure,
	// Path=/ and no Domain (RFC 6265bis 4.1.3.2): used over HTTPS.
	hostPrefix = "__Host-"
)

// DefaultScopes are the scopes asked for without `scopes`.
var DefaultScopes = []string{"openid", "email", "profile"}

// OIDCLogin is an HTTP handler that logs browsers in through an OpenID
// Provider and keeps their sessions on the server.
//
// A request with a valid session cookie gets the session's identity
// (identity.Set, Method "oidc_session"), `{http.auth.user.id}` (the `sub`)
// and `{http.auth.oidc.claims.<path>}`, and goes on without the session
// cookie. A request without one is, for a browser navigation (GET or HEAD
// accepting text/html), redirected to the provider, and for anything else
// refused with 401 (never an HTML redirect); Unauthenticated and Optional
// change that. A state-changing request (not GET, HEAD, OPTIONS, TRACE)
// with a session cookie must come from the same site (Sec-Fetch-Site or
// Origin), else 403.
//
// The handler answers its own paths itself: RedirectPath (the provider
// sends the browser back there with the code), LoginPath (start a login
// and come back to `?rd=<path>`), LogoutPath (end the session here and at
// the provider) and BackchannelLogoutPath (the provider ends sessions,
// OpenID Connect Back-Channel Logout 1.0).
type OIDCLogin struct {
	// Issuer is the OpenID Provider's issuer URL; its configuration is
	// read from `<issuer>/.well-known/openid-configuration` in the
	// background, its keys from its jwks_uri (shared with jwt_auth).
	Issuer string `json:"issuer,omitempty"`

	// ClientID is the gateway's client id at the provider.
	ClientID string `json:"client_id,omitempty"`

	// ClientSecret is the client's secret; placeholders such as
	// `{env.OIDC_CLIENT_SECRET}` and `{file./run/secrets/oidc}` are
	// expanded when the config loads. Empty: a public client (PKCE only).
	ClientSecret string `json:"client_secret,omitempty"`

	// Scopes are asked for at login. Default: openid email profile
	// (openid is added when missing). Add offline_access where the
	// provider gives refresh tokens only for it.
	Scopes []string `json:"scopes,omitempty"`

	// RedirectPath is where the provider sends the browser back (the
	// redirect URI registered at the provider is
	// `<scheme>://<host><redirect_path>`). Default: /oauth2/callback.
	RedirectPath string `json:"redirect_path,omitempty"`

	// LoginPath starts a login and returns to the same-site path in its
	// `rd` query parameter (default /). Default: /oauth2/login.
	LoginPath string `json:"login_path,omitempty"`

	// LogoutPath ends the session: on the server (fleet-wide), the
	// cookie, and at the provider when it has an end_session_endpoint
	// (RP-Initiated Logout). Default: /oauth2/logout.
	LogoutPath string `json:"logout_path,omitempty"`

	// PostLogoutRedirect is where the browser goes after a logout: given
	// to the provider as post_logout_redirect_uri (register it there), or
	// the browser goes there directly when the provider has no
	// end_session_endpoint. A path is taken on the request's own site.
	// Default: /.
	PostLogoutRedirect string `json:"post_logout_redirect,omitempty"`

	// BackchannelLogoutPath receives the provider's logout tokens
	// (register `<scheme>://<host><path>` at the provider as the
	// back-channel logout URI). Default: /oauth2/backchannel_logout.
	BackchannelLogoutPath string `json:"backchannel_logout_path,omitempty"`

	// SessionTTL is a session's whole life, from the login. Default: 8h.
	SessionTTL caddy.Duration `json:"session_ttl,omitempty"`

	// IdleTimeout ends a session unused for this long (on any gateway of
	// the fleet). Default: 1h.
	IdleTimeout caddy.Duration `json:"idle_timeout,omitempty"`

	// CookieName is the session cookie's name: `__Host-<name>` over
	// HTTPS, `<name>` over plain HTTP. Default: gateway_session.
	CookieName string `json:"cookie_name,omitempty"`

	// Unauthenticated says what a request without a session gets:
	// "redirect" (every GET or HEAD goes to the provider; other methods
	// get 401) or "401" (every request gets 401). Default: browser
	// navigations (Accept with text/html) are redirected, everything else
	// gets 401.
	Unauthenticated string `json:"unauthenticated,omitempty"`

	// Optional lets requests without a session through, anonymous (for
	// a jwt_auth or api_key after this handler, say). A state-changing
	// request with a session cookie from another site is still refused.
	Optional bool `json:"optional,omitempty"`

	// SessionKeys are the secrets sessions are sealed with (AES-256-GCM)
	// and session ids signed with, at least 32 bytes each, the current
	// one first: sessions sealed with a later one still open (key
	// rotation, docs/oidc.md). Placeholders such as `{env.X}` and
	// `{file.X}` are expanded when the config loads. Default: a key
	// derived from ClientSecret (rotating the secret then ends every
	// session); a public client must set one. Every gateway of a fleet
	// needs the same keys.
	SessionKeys []string `json:"session_keys,omitempty"`

	// ForwardClaims copy claims of the request's identity into upstream
	// request headers, as jwt_auth's forward_claim does.
	ForwardClaims []identity.ForwardClaim `json:"forward_claims,omitempty"`

	// CacheSize bounds the sessions a gateway holds in memory. Default:
	// 100000.
	CacheSize int `json:"cache_size,omitempty"`

	logger      *zap.Logger
	secret      string
	scopes      []string
	keySet      *caddyjwt.OIDCKeySet
	releaseKeys func()
	verifier    *caddyjwt.Verifier
	sessions    *Sessions
	login       *loginState
	loginKey    string
	forward     *identity.ClaimHeaders
	sources     [2][]credential.TokenSource // plain HTTP, HTTPS
	client      *http.Client
	now         func() time.Time
}

// CaddyModule returns the Caddy module information.
func (OIDCLogin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.oidc_login",
		New: func() caddy.Module { return new(OIDCLogin) },
	}
}

// logins holds each login's cache of sessions and its fleet bus, shared by
// the configs that use the same storage, issuer and client (a reload keeps
// them).
var logins = caddy.NewUsagePool()

// loginState is what outlives a config: the cache, the bus, the sweeper,
// and the newest config's view of the sessions (for the admin API).
type loginState struct {
	issuer, clientID string
	cache            *cache
	bus              *natsBus
	current          atomic.Pointer[Sessions]
	usedStates       sync.Map // state name -> expiry (unix nanoseconds)
	usedJTIs         sync.Map // back-channel logout token jti -> expiry
	stop             chan struct{}
	done             chan struct{}
	log              *zap.Logger
}

// Destruct stops the bus and the sweeper when the last config lets go.
func (l *loginState) Destruct() error {
	close(l.stop)
	<-l.done
	if l.bus != nil {
		l.bus.stop()
	}
	l.cache.purge()
	return nil
}

// sweepEvery is how often expired sessions are deleted from the storage.
const sweepEvery = 10 * time.Minute

func (l *loginState) sweep() {
	defer close(l.done)
	defer func() {
		if p := recover(); p != nil {
			l.log.Error("session sweeper panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
		}
	}()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		s := l.current.Load()
		if s == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := s.Sweep(ctx)
		cancel()
		if err != nil {
			l.log.Warn("sweeping expired sessions failed", zap.Error(err))
		} else if n > 0 {
			l.log.Info("swept expired sessions", zap.Int("sessions", n))
		}
		now := time.Now().UnixNano()
		for _, m := range []*sync.Map{&l.usedStates, &l.usedJTIs} {
			m.Range(func(k, v any) bool {
				if v.(int64) < now {
					m.Delete(k)
				}
				return true
			})
		}
	}
}

// Provision checks and prepares the login: it joins the provider's shared
// discovery (background), derives the session keys, takes the config's
// storage and joins the shared session cache (and, with `storage nats`,
// the fleet's invalidations). No request to the provider is made.
func (o *OIDCLogin) Provision(ctx caddy.Context) error {
	o.logger = ctx.Logger()
	o.now = time.Now
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	o.setDefaults()
	repl := caddy.NewReplacer()
	o.secret = repl.ReplaceKnown(o.ClientSecret, "")
	if o.ClientSecret != "" && o.secret == "" {
		return fmt.Errorf("client_secret is empty once placeholders are replaced (is the environment variable or file set?)")
	}
	ring, err := o.keyring(repl)
	if err != nil {
		return err
	}
	if o.forward, err = identity.NewClaimHeaders(o.ForwardClaims); err != nil {
		return err
	}
	name := o.CookieName
	o.sources[0] = []credential.TokenSource{{Kind: credential.FromCookie, Name: name}}
	o.sources[1] = []credential.TokenSource{{Kind: credential.FromCookie, Name: hostPrefix + name}}
	o.client = &http.Client{Timeout: 10 * time.Second}

	o.keySet, o.releaseKeys, err = caddyjwt.JoinOIDC(ctx, o.Issuer)
	if err != nil {
		return err
	}
	o.verifier, err = caddyjwt.NewProvidersVerifier(caddyjwt.Options{CacheSize: -1, RequireClaims: []string{"sub", "iat"}},
		[]caddyjwt.Provider{{Name: "oidc_login", Issuer: o.Issuer, Sets: []caddyjwt.KeySet{o.keySet}, Audiences: []string{o.ClientID}, Leeway: time.Minute}})
	if err != nil {
		return err
	}

	storage := ctx.Storage()
	ns := namespace(o.Issuer, o.ClientID)
	// the keys are part of the shared state's name: a reload that adds
	// or removes a session key starts an empty session cache, so no
	// session a removed key signed is served from memory
	o.loginKey = fmt.Sprintf("%s|%s|%v", ns, ring.IDs(), storage)
	logger := o.logger
	val, _, err := logins.LoadOrNew(o.loginKey, func() (caddy.Destructor, error) {
		l := &loginState{issuer: o.Issuer, clientID: o.ClientID, cache: newCache(o.CacheSize),
			stop: make(chan struct{}), done: make(chan struct{}), log: logger}
		if p, ok := storage.(natsconn.OptionsProvider); ok {
			if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
				return nil, err
			}
			bus, err := startNATSBus(p.NATSOptions(), ns, l.cache, logger)
			if err != nil {
				return nil, fmt.Errorf("session invalidations over NATS: %w", err)
			}
			l.bus = bus
		}
		go l.sweep()
		return l, nil
	})
	if err != nil {
		o.loginKey = ""
		return err
	}
	o.login = val.(*loginState)
	o.sessions = &Sessions{Storage: storage, Ring: ring, Prefix: "oidc_login/" + ns,
		TTL: time.Duration(o.SessionTTL), Idle: time.Duration(o.IdleTimeout), Now: o.now, cache: o.login.cache}
	if o.login.bus != nil {
		o.sessions.Bus = o.login.bus
	}
	o.login.current.Store(o.sessions)
	return nil
}

func (o *OIDCLogin) setDefaults() {
	if o.RedirectPath == "" {
		o.RedirectPath = DefaultRedirectPath
	}
	if o.LoginPath == "" {
		o.LoginPath = DefaultLoginPath
	}
	if o.LogoutPath == "" {
		o.LogoutPath = DefaultLogoutPath
	}
	if o.BackchannelLogoutPath == "" {
		o.BackchannelLogoutPath = DefaultBackchannelLogoutPath
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = caddy.Duration(DefaultSessionTTL)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = caddy.Duration(DefaultIdleTimeout)
	}
	if o.CookieName == "" {
		o.CookieName = DefaultCookieName
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	o.scopes = o.Scopes
	if len(o.scopes) == 0 {
		o.scopes = DefaultScopes
	}
	hasOpenID := false
	for _, s := range o.scopes {
		hasOpenID = hasOpenID || s == "openid"
	}
	if !hasOpenID {
		o.scopes = append([]string{"openid"}, o.scopes...)
	}
}

// keyring derives the session keys: session_keys, else the client secret.
func (o *OIDCLogin) keyring(repl *caddy.Replacer) (*Keyring, error) {
	var secrets [][]byte
	for i, raw := range o.SessionKeys {
		k := repl.ReplaceKnown(raw, "")
		if k == "" {
			return nil, fmt.Errorf("session_key #%d is empty once placeholders are replaced (is the environment variable or file set?)", i+1)
		}
		secrets = append(secrets, []byte(strings.TrimSpace(k)))
	}
	if len(secrets) == 0 {
		if o.secret == "" {
			return nil, fmt.Errorf("session_key is required for a public client (no client_secret): 32 random bytes or more, the same on every gateway, e.g. session_key {env.GATEWAY_SESSION_KEY}")
		}
		// a key of its own for sessions, derived from the secret
		sum := sha256.Sum256([]byte("apigate oidc_login session key from client_secret\x00" + o.secret))
		secrets = [][]byte{sum[:]}
	}
	return NewKeyring(secrets...)
}

// namespace names a login (issuer and client) in the storage and on NATS.
func namespace(issuer, clientID string) string {
	sum := sha256.Sum256([]byte(issuer + "\x00" + clientID))
	return hex.EncodeToString(sum[:8])
}

// Validate checks the configuration.
func (o *OIDCLogin) Validate() error {
	if o.Issuer == "" {
		return fmt.Errorf("issuer is required")
	}
	if err := urls.CheckHTTP("issuer", o.Issuer); err != nil {
		return err
	}
	if o.ClientID == "" {
		return fmt.Errorf("client_id is required")
	}
	paths := map[string]string{}
	for name, p := range map[string]string{"redirect_path": o.RedirectPath, "login_path": o.LoginPath,
		"logout_path": o.LogoutPath, "backchannel_logout_path": o.BackchannelLogoutPath} {
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") || SafeReturnPath(p) != p || strings.ContainsAny(p, "?#") {
			return fmt.Errorf("invalid %s %q: must be a plain absolute path such as /oauth2/callback", name, p)
		}
		if other, dup := paths[p]; dup {
			return fmt.Errorf("%s and %s are both %q", other, name, p)
		}
		paths[p] = name
	}
	if p := o.PostLogoutRedirect; p != "" && !strings.HasPrefix(p, "/") {
		if err := urls.CheckHTTP("post_logout_redirect", p); err != nil {
			return err
		}
	}
	for name, d := range map[string]caddy.Duration{"session_ttl": o.SessionTTL, "idle_timeout": o.IdleTimeout} {
		if d < 0 || d != 0 && time.Duration(d) < time.Minute {
			return fmt.Errorf("invalid %s %q: must be at least 1m", name, time.Duration(d))
		}
	}
	switch o.Unauthenticated {
	case "", "redirect", "401":
	default:
		return fmt.Errorf("invalid unauthenticated %q: must be redirect or 401", o.Unauthenticated)
	}
	if o.CookieName != "" && (!identity.ValidHeaderName(o.CookieName) || strings.HasPrefix(o.CookieName, "__")) {
		return fmt.Errorf("invalid cookie_name %q: a cookie name token without the __Host-/__Secure- prefix (added over HTTPS)", o.CookieName)
	}
	if o.CacheSize < 0 {
		return fmt.Errorf("invalid cache_size %d: must be positive", o.CacheSize)
	}
	for _, fc := range o.ForwardClaims {
		if err := fc.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Cleanup releases the shared discovery and session cache.
func (o *OIDCLogin) Cleanup() error {
	if o.releaseKeys != nil {
		o.releaseKeys()
	}
	if o.loginKey != "" {
		_, _ = logins.Delete(o.loginKey)
	}
	return nil
}

// isHTTPS reports whether the request came over TLS (the cookie is then
// __Host- and Secure).
func isHTTPS(r *http.Request) bool { return r.TLS != nil }

func (o *OIDCLogin) cookieName(https bool) string {
	if https {
		return hostPrefix + o.CookieName
	}
	return o.CookieName
}

func httpsIndex(https bool) int {
	if https {
		return 1
	}
	return 0
}

const claimsPrefix = "http.auth.oidc.claims."

// ServeHTTP answers the login's own paths, and gives every other request
// its session's identity, or refuses it.
func (o *OIDCLogin) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	switch r.URL.Path {
	case o.RedirectPath:
		return o.callback(w, r)
	case o.LoginPath:
		return o.startLogin(w, r, SafeReturnPath(r.URL.Query().Get("rd")))
	case o.LogoutPath:
		return o.logout(w, r)
	case o.BackchannelLogoutPath:
		return o.backchannelLogout(w, r)
	}
	earlier, identified := identity.FromRequest(r)
	o.forward.Apply(r.Header, earlier)
	if identified {
		return next.ServeHTTP(w, r)
	}
	https := isHTTPS(r)
	sources := o.sources[httpsIndex(https)]
	cookie, _, _ := credential.ExtractToken(r, sources, SessionIDLen)
	var e *entry
	if cookie != "" {
		var err error
		if e, err = o.sessions.Lookup(r.Context(), cookie); err != nil {
			checksVec.WithLabelValues("unavailable").Inc()
			o.logger.Error("reading a session failed", zap.Error(err))
			return o.unavailable(w, r, "session storage unavailable")
		}
		// the browser sent a session cookie: a state-changing request
		// must come from this site, session or not (a stale cookie
		// must not turn a forged request into an anonymous one)
		if !SafeMethod(r.Method) && !SameSite(r, https) {
			checksVec.WithLabelValues("csrf_refused").Inc()
			return o.deny(w, r, http.StatusForbidden, "forbidden", "cross-site request with a session cookie refused")
		}
	}
	if e == nil {
		checksVec.WithLabelValues("no_session").Inc()
		if o.Optional {
			return next.ServeHTTP(w, r)
		}
		if o.redirects(r) {
			return o.startLogin(w, r, SafeReturnPath(r.URL.RequestURI()))
		}
		w.Header().Set("WWW-Authenticate", o.challenge(https))
		return o.deny(w, r, http.StatusUnauthorized, "unauthorized", "no session")
	}
	checksVec.WithLabelValues("session").Inc()
	identity.Set(r, e.id)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.auth.user.id", e.sess.Subject)
		repl.Map(e.mapper)
	}
	o.forward.Apply(r.Header, e.id)
	credential.StripToken(r, sources)
	o.maybeRefresh(cookie, e)
	return next.ServeHTTP(w, r)
}

// redirects reports whether a request without a session goes to the
// provider (else 401).
func (o *OIDCLogin) redirects(r *http.Request) bool {
	switch o.Unauthenticated {
	case "401":
		return false
	case "redirect":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return Navigation(r)
}

// challenge is the WWW-Authenticate of a 401: the Cookie scheme of
// draft-broyer-http-cookie-auth, naming the login path and the cookie.
func (o *OIDCLogin) challenge(https bool) string {
	return fmt.Sprintf(`Cookie realm="gateway", form-action=%q, cookie-name=%q`, o.LoginPath, o.cookieName(https))
}

// placeholders answers {http.auth.oidc.claims.<path>}.
func (e *entry) placeholders(key string) (any, bool) {
	if !strings.HasPrefix(key, claimsPrefix) {
		return nil, false
	}
	p, err := identity.ParseClaimPath(key[len(claimsPrefix):])
	if err != nil {
		return "", true
	}
	v, ok := p.Lookup(e.sess.Claims)
	if !ok {
		return "", true
	}
	return identity.Stringify(v), true
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	return base64.RawURLEncoding.EncodeToString(randomBytes(32))
}

// Interface guards
var (
	_ caddy.Provisioner           = (*OIDCLogin)(nil)
	_ caddy.Validator             = (*OIDCLogin)(nil)
	_ caddy.CleanerUpper          = (*OIDCLogin)(nil)
	_ caddyhttp.MiddlewareHandler = (*OIDCLogin)(nil)
	_ caddy.Destructor            = (*loginState)(nil)
)
