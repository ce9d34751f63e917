// Package caddyapikey is the api_key handler: it authenticates requests by an
// API key whose hash is listed in a keys file, and gives them the same
// identity jwt_auth gives a verified token, so rbac, rate_limit keys,
// permission and audit work unchanged. The key format and the file format
// are in the apikeys package.
package caddyapikey

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyapikey/apikeys"
	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/credential"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/filewatch"
)

func init() {
	caddy.RegisterModule(APIKey{})
}

// Defaults.
const (
	DefaultHeader        = "X-API-Key"
	DefaultRealm         = "gateway"
	DefaultCheckInterval = time.Second
)

// APIKey is an HTTP handler that authenticates a request by an API key
// (`gk_<id>_<secret>`) found in a header or query parameter and checked
// against the hashes in a keys file. A known, unexpired key gives the
// request an identity (identity.Set) with Method "api_key", CredentialID
// the key's id, Subject and the `sub` claim from the file, and the key's
// roles and scope as the `roles` and `scope` claims (rbac's default claim
// names), and sets `{http.auth.user.id}` and `{http.auth.api_key.id}`.
//
// A request that already has an identity (an identity source before this
// one identified it) is passed on untouched. A request without a key gets
// 401 with `WWW-Authenticate: Bearer realm="..."`, or passes on anonymous
// with Optional; a malformed, unknown or expired key gets 401 with
// `WWW-Authenticate: Bearer error="invalid_token", error_description="..."`
// and `{"error":"invalid_token","reason":"..."}`. The key is removed from
// the request before it goes on, so neither the upstream nor the logs of
// later handlers see it. ForwardClaims set upstream headers from the
// identity, as jwt_auth's do.
type APIKey struct {
	// FromHeaders are request headers that may carry the key, looked at
	// first, in order. A "Bearer " prefix is stripped. When neither
	// from_header nor from_query is set: X-API-Key.
	FromHeaders []string `json:"from_headers,omitempty"`

	// FromQuery are query parameters that may carry the key, looked at
	// after the headers.
	FromQuery []string `json:"from_query,omitempty"`

	// KeysFile is the path of the keys file: a JSON array of
	// {"id","hash","sub","roles","scope","expires","plan"} ("plan": the
	// key's quota plan, see the quota duty). Placeholders known at
	// load time ({env.*}) are expanded. The file must load when the config
	// loads; later it is re-read when its modification time or size
	// changes, and a file that then fails to load keeps the last good keys
	// (the error is logged).
	KeysFile string `json:"keys_file,omitempty"`

	// CheckInterval is how often (at most) a request checks the keys file
	// for changes. Default: 1s.
	CheckInterval caddy.Duration `json:"check_interval,omitempty"`

	// Optional lets requests without a key through, anonymous (for example
	// to a jwt_auth after this handler). A key that is present but
	// malformed, unknown or expired is still rejected.
	Optional bool `json:"optional,omitempty"`

	// Realm is the realm of the WWW-Authenticate challenge. Default: gateway.
	Realm string `json:"realm,omitempty"`

	// ForwardClaims copy claims of the request's identity (`sub`,
	// `roles`, `scope`, or those of an identity an earlier source
	// established) into upstream request headers, as jwt_auth's
	// forward_claim does. A header of the same name sent by the client is
	// always removed first.
	ForwardClaims []identity.ForwardClaim `json:"forward_claims,omitempty"`

	forward   *identity.ClaimHeaders
	keys      *filewatch.Value[*apikeys.Set]
	sources   []credential.TokenSource
	challenge string
	logger    *zap.Logger
	now       func() time.Time
}

// CaddyModule returns the Caddy module information.
func (APIKey) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.api_key",
		New: func() caddy.Module { return new(APIKey) },
	}
}

// Provision reads the keys file; a file that does not load fails the
// config.
func (a *APIKey) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.now = time.Now
	if a.Realm == "" {
		a.Realm = DefaultRealm
	}
	if a.CheckInterval == 0 {
		a.CheckInterval = caddy.Duration(DefaultCheckInterval)
	}
	a.challenge = deny.BearerChallenge(a.Realm)
	headers := a.FromHeaders
	if len(a.FromHeaders) == 0 && len(a.FromQuery) == 0 {
		headers = []string{DefaultHeader}
	}
	a.sources = credential.OrderSources(headers, nil, a.FromQuery)
	var err error
	if a.forward, err = identity.NewClaimHeaders(a.ForwardClaims); err != nil {
		return err
	}
	path := caddy.NewReplacer().ReplaceKnown(a.KeysFile, "")
	if path == "" {
		return fmt.Errorf("keys_file is empty once placeholders are replaced")
	}
	f, err := openKeysFile(path, time.Duration(a.CheckInterval), a.now())
	if err != nil {
		return err
	}
	logger := a.logger
	f.OnError = func(err error) {
		logger.Error("keys file not reloaded; keeping the last good keys", zap.String("file", path), zap.Error(err))
	}
	f.OnReload = func(set *apikeys.Set) {
		logger.Info("keys file reloaded", zap.String("file", path), zap.Int("keys", set.Len()))
	}
	a.keys = f
	return nil
}

// Validate checks the configuration.
func (a *APIKey) Validate() error {
	if a.KeysFile == "" {
		return fmt.Errorf("keys_file is required")
	}
	if a.CheckInterval < 0 {
		return fmt.Errorf("invalid check_interval %q: must be positive", time.Duration(a.CheckInterval))
	}
	for _, h := range a.FromHeaders {
		if h == "" || strings.ContainsAny(h, " \t:\r\n") {
			return fmt.Errorf("invalid from_header %q", h)
		}
	}
	for _, q := range a.FromQuery {
		if q == "" {
			return fmt.Errorf("invalid from_query %q: empty", q)
		}
	}
	for _, fc := range a.ForwardClaims {
		if err := fc.Check(); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP authenticates the request.
func (a *APIKey) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// the forwarded headers: never the client's; an earlier source's
	// identity gets them too
	earlier, identified := identity.FromRequest(r)
	a.forward.Apply(r.Header, earlier)
	if identified {
		return next.ServeHTTP(w, r)
	}
	// a key longer than any key (tooLarge) is not copied: it is refused
	// as too long
	key, _, tooLarge := credential.ExtractToken(r, a.sources, apikeys.MaxKeyLen)
	if key == "" && !tooLarge {
		if a.Optional {
			return next.ServeHTTP(w, r)
		}
		identity.SetDenial(r, "api_key", "missing api key")
		w.Header().Set("WWW-Authenticate", a.challenge)
		return deny.Respond(w, r, http.StatusUnauthorized, "unauthorized", "missing api key")
	}
	credential.StripToken(r, a.sources)
	var e *apikeys.Entry
	err := apikeys.ErrTooLong
	if !tooLarge {
		e, err = a.keys.Current(a.now()).Check(key, a.now())
	}
	if err != nil {
		if ce := a.logger.Check(zap.DebugLevel, "api key rejected"); ce != nil {
			ce.Write(zap.String("reason", err.Error()), zap.String("remote_addr", r.RemoteAddr))
		}
		identity.SetDenial(r, "api_key", err.Error())
		w.Header().Set("WWW-Authenticate", deny.InvalidTokenChallenge(err.Error()))
		return deny.Respond(w, r, http.StatusUnauthorized, "invalid_token", err.Error())
	}
	roles := make([]any, len(e.Roles))
	for i, role := range e.Roles {
		roles[i] = role
	}
	claims := map[string]any{"sub": e.Sub, "roles": roles}
	if e.Scope != "" {
		claims["scope"] = e.Scope
	}
	id := &identity.Identity{
		Subject:      e.Sub,
		ExpiresAt:    e.ExpiresAt(),
		Claims:       claims,
		Method:       identity.MethodAPIKey,
		CredentialID: e.ID,
		Plan:         e.Plan,
	}
	identity.Set(r, id)
	a.forward.Apply(r.Header, id)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.auth.user.id", e.Sub)
		repl.Set("http.auth.api_key.id", e.ID)
	}
	return next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*APIKey)(nil)
	_ caddy.Validator             = (*APIKey)(nil)
	_ caddyhttp.MiddlewareHandler = (*APIKey)(nil)
)
