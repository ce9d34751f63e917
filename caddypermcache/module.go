// Package caddypermcache is the gateway's `permission` handler: it asks an
// external permission service whether a request may proceed and caches the
// service's decisions (allow and deny, each with its own TTL, Cache-Control
// honoured) in a bounded cache that outlives config reloads.
package caddypermcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/singleflight"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/fieldedits"
	"github.com/apigate/gateway/internal/natsconn"

	"github.com/apigate/gateway/internal/urls"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Defaults.
const (
	DefaultTimeout     = 300 * time.Millisecond
	DefaultCacheTTL    = 60 * time.Second
	DefaultNegativeTTL = 10 * time.Second
	DefaultCacheSize   = 100000
	DefaultKey         = "{http.auth.user.id} {http.request.method} {http.request.uri.path}"
	DefaultRolesClaim  = "roles"
)

// Denial reasons (the answers' bodies are deny.Body with them).
const (
	deniedReason  = "permission denied"
	unavailReason = "permission service unavailable"
)

// Handler asks an external permission service whether a request may
// proceed, and caches the answers.
//
// The service receives a POST with the JSON body
// `{"subject","roles","method","host","path","route"}` and answers 200
// (allow) or 403 (deny); a JSON `{"allow": bool}` body is honoured, and
// `Cache-Control: max-age=N` overrides the TTLs (`no-store`, `no-cache` and
// `max-age=0` forbid caching). Any other answer, an unreachable service or a
// timeout is an error handled by on_error, unless an expired decision is
// still within stale_if_error.
//
// The subject comes from jwt_auth's verified identity; a request without
// one is asked about with an empty subject (so the service can allow public
// resources). Roles come from rbac when it ran before this handler, else
// from the identity's roles_claim.
type Handler struct {
	// URL of the permission service. Required; http or https.
	URL string `json:"url,omitempty"`

	// Timeout bounds one call to the service, connection included.
	// Default: 300ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// CacheTTL is how long an allow decision is cached. Default: 60s.
	// Zero disables caching of allows.
	CacheTTL *caddy.Duration `json:"cache_ttl,omitempty"`

	// NegativeTTL is how long a deny decision is cached. Default: 10s.
	// Zero disables caching of denies.
	NegativeTTL *caddy.Duration `json:"negative_ttl,omitempty"`

	// CacheSize bounds the number of cached decisions; the least recently
	// used ones (approximately: CLOCK) are evicted. Default: 100000.
	CacheSize int `json:"cache_size,omitempty"`

	// Key is the cache key template, made of placeholders and literal text.
	// Requests with the same key share one decision, so it must include
	// everything the decision depends on. Default:
	// `{http.auth.user.id} {http.request.method} {http.request.uri.path}`.
	Key string `json:"key,omitempty"`

	// OnError is what happens when the service fails (and no stale
	// decision may be served): "deny" answers 503 with a JSON reason,
	// "allow" lets the request through. Default: deny.
	OnError string `json:"on_error,omitempty"`

	// StaleIfError lets an expired decision be served for this long past
	// its TTL while the service is failing. Default: 0 (off).
	StaleIfError caddy.Duration `json:"stale_if_error,omitempty"`

	// RolesClaim is the claim path (as in rbac's roles_claim) read for the
	// roles sent to the service when rbac did not record any. Default: roles.
	RolesClaim string `json:"roles_claim,omitempty"`

	// Route is a name sent to the service as "route" and used as the
	// "route" label of the metrics. Default: empty.
	Route string `json:"route,omitempty"`

	// InvalidateSubject is a NATS subject on which invalidation messages
	// drop cached decisions, on every replica that subscribes to it (see
	// InvalidateMessage for the format). Default: none.
	InvalidateSubject string `json:"invalidate_subject,omitempty"`

	// NATS is the connection used for InvalidateSubject (the gateway's
	// one NATS connection block: servers, creds, nkey, user, password,
	// token, tls, name). Default: the connection of the `storage nats`
	// global option, shared.
	NATS *natsconn.Config `json:"nats,omitempty"`

	// NATSServers is the older spelling of nats.servers (its entries come
	// first; an entry may hold several URLs, comma-separated).
	NATSServers []string `json:"nats_servers,omitempty"`

	// NATSCredsFile is the older spelling of nats.creds.
	NATSCredsFile string `json:"nats_creds_file,omitempty"`

	// DryRun lets every request pass: a decision that would have denied
	// (the service's deny, or on_error deny while the service fails) is
	// logged (at info, as "request would be denied (dry run)"), counted
	// (gateway_permission_denials_total with dry_run="true") and audited
	// (decision "would_deny"). The service is still asked and its answers
	// cached as usual.
	DryRun bool `json:"dry_run,omitempty"`

	tmpl       *KeyTemplate
	rolesPath  identity.ClaimPath
	timeout    time.Duration
	ttl        time.Duration
	negTTL     time.Duration
	stale      time.Duration
	allowOnErr bool
	url        string
	poolKey    string
	shared     *shared
	m          routeMetrics
	denials    denialCounters
	logger     *zap.Logger
	inv        *invalidation
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.permission",
		New: func() caddy.Module { return new(Handler) },
	}
}

// shared is the state that outlives config reloads: the cache, the
// in-flight calls and the service's keepalive connections. It lives in
// pool, keyed by everything that changes what a cached decision means.
type shared struct {
	route     string
	cache     *Cache
	group     singleflight.Group
	client    *Client
	transport *http.Transport
	clock     func() int64
}

// Destruct closes the idle connections when the last config using them
// is unloaded.
func (s *shared) Destruct() error {
	removeLive(s)
	s.transport.CloseIdleConnections()
	return nil
}

var pool = caddy.NewUsagePool()

// Provision sets defaults and attaches the shared cache.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Timeout == 0 {
		h.Timeout = caddy.Duration(DefaultTimeout)
	}
	if h.CacheTTL == nil {
		d := caddy.Duration(DefaultCacheTTL)
		h.CacheTTL = &d
	}
	if h.NegativeTTL == nil {
		d := caddy.Duration(DefaultNegativeTTL)
		h.NegativeTTL = &d
	}
	if h.CacheSize == 0 {
		h.CacheSize = DefaultCacheSize
	}
	if h.Key == "" {
		h.Key = DefaultKey
	}
	if h.OnError == "" {
		h.OnError = "deny"
	}
	if h.RolesClaim == "" {
		h.RolesClaim = DefaultRolesClaim
	}
	if err := h.check(); err != nil {
		return err
	}
	h.timeout = time.Duration(h.Timeout)
	h.ttl = time.Duration(*h.CacheTTL)
	h.negTTL = time.Duration(*h.NegativeTTL)
	h.stale = time.Duration(h.StaleIfError)
	h.allowOnErr = h.OnError == "allow"

	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	h.m = metricsFor(h.Route)
	h.denials = denialCountersFor(h.Route, h.DryRun)

	h.poolKey = strings.Join([]string{h.url, h.tmpl.String(), h.Route, strconv.Itoa(h.CacheSize)}, "\x00")
	val, _, err := pool.LoadOrNew(h.poolKey, func() (caddy.Destructor, error) {
		tr := NewTransport()
		s := &shared{
			route:     h.Route,
			cache:     NewCache(h.CacheSize),
			client:    &Client{URL: h.url, HTTP: &http.Client{Transport: tr}},
			transport: tr,
			clock:     coarseNowFunc,
		}
		addLive(s)
		return s, nil
	})
	if err != nil {
		return err
	}
	h.shared = val.(*shared)
	return h.startInvalidation(ctx)
}

// check validates the config and parses what needs parsing; Provision and
// Validate both rely on it.
func (h *Handler) check() error {
	if h.URL == "" {
		return errors.New("url is required: the permission service's address")
	}
	h.url = caddy.NewReplacer().ReplaceKnown(h.URL, "")
	if err := urls.CheckHTTP("url", h.url); err != nil {
		return err
	}
	if h.Timeout < 0 {
		return fmt.Errorf("invalid timeout %q: must be positive", time.Duration(h.Timeout))
	}
	if h.CacheTTL != nil && *h.CacheTTL < 0 {
		return fmt.Errorf("invalid cache_ttl %q: must not be negative", time.Duration(*h.CacheTTL))
	}
	if h.NegativeTTL != nil && *h.NegativeTTL < 0 {
		return fmt.Errorf("invalid negative_ttl %q: must not be negative", time.Duration(*h.NegativeTTL))
	}
	if h.StaleIfError < 0 {
		return fmt.Errorf("invalid stale_if_error %q: must not be negative", time.Duration(h.StaleIfError))
	}
	if h.CacheSize < 0 {
		return fmt.Errorf("invalid cache_size %d: must be positive", h.CacheSize)
	}
	switch h.OnError {
	case "", "deny", "allow":
	default:
		return fmt.Errorf("invalid on_error %q: must be deny or allow", h.OnError)
	}
	key := h.Key
	if key == "" {
		key = DefaultKey
	}
	var err error
	if h.tmpl, err = ParseKeyTemplate(key); err != nil {
		return fmt.Errorf("invalid key: %v", err)
	}
	// a typo under http.auth. is empty on every request: one decision
	// shared by every user
	if err := identity.CheckAuthPlaceholders("key", key); err != nil {
		return err
	}
	rc := h.RolesClaim
	if rc == "" {
		rc = DefaultRolesClaim
	}
	if h.rolesPath, err = identity.ParseClaimPath(rc); err != nil {
		return fmt.Errorf("invalid roles_claim: %v", err)
	}
	return nil
}

// Validate checks the config.
func (h *Handler) Validate() error { return h.check() }

// Cleanup releases the shared cache; the pool keeps it while a newer
// config uses it.
func (h *Handler) Cleanup() error {
	h.inv.stop()
	h.inv = nil
	if h.shared != nil {
		_, err := pool.Delete(h.poolKey)
		h.shared = nil
		return err
	}
	return nil
}

// keyBufSize is the stack buffer for building keys; longer keys allocate.
const keyBufSize = 256

// RequestFieldEdits reports that ServeHTTP changes no request header field
// (fieldedits.Declarer): it only reads them.
func (h *Handler) RequestFieldEdits() []string { return nil }

// ServeHTTP checks the request's permission.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	id, _ := identity.FromRequest(r)
	var buf [keyBufSize]byte
	key := h.appendKey(buf[:0], r, id)
	s := h.shared
	allow, st := s.cache.Get(key, s.clock())
	if st == Fresh { // counted by the cache
		identity.SetPermissionCache(r, identity.PermissionCacheHit)
		return h.decide(w, r, next, id, allow, decidedByService)
	}
	identity.SetPermissionCache(r, identity.PermissionCacheMiss)
	h.m.misses.Inc()
	ans, err := h.call(r, string(key), id)
	if err != nil {
		if errors.Is(err, errClientGone) {
			return caddyhttp.Error(499, err)
		}
		if st == Stale {
			h.m.stale.Inc()
			identity.SetPermissionCache(r, identity.PermissionCacheStale)
			return h.decide(w, r, next, id, allow, decidedByStale)
		}
		if h.allowOnErr {
			h.m.onErrAllow.Inc()
			identity.SetDecidedBy(r, decidedByOnErrorAllow)
			return next.ServeHTTP(w, r)
		}
		h.m.onErrDeny.Inc()
		h.denials.unavailable.Inc()
		if h.DryRun {
			return h.wouldDeny(w, r, next, decidedByOnErrorDeny, unavailReason)
		}
		identity.SetDenialBy(r, decidedByOnErrorDeny, unavailReason)
		return deny.Respond(w, r, http.StatusServiceUnavailable, "permission_unavailable", unavailReason)
	}
	return h.decide(w, r, next, id, ans.Allow, decidedByService)
}

// The decided_by values of permission: the service's answer (fresh from
// the cache or from a call), an expired answer served while the service
// fails, or on_error.
var (
	decidedByService      = identity.NewDecider("permission", "service")
	decidedByStale        = identity.NewDecider("permission", "stale_if_error")
	decidedByOnErrorAllow = identity.NewDecider("permission", "on_error allow")
	decidedByOnErrorDeny  = identity.NewDecider("permission", "on_error deny")
)

func (h *Handler) decide(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, id *identity.Identity, allow bool, by *identity.Decider) error {
	if allow {
		identity.SetDecidedBy(r, by)
		return next.ServeHTTP(w, r)
	}
	h.denials.denied.Inc()
	if h.DryRun {
		return h.wouldDeny(w, r, next, by, deniedReason)
	}
	identity.SetDenialBy(r, by, deniedReason)
	return deny.Respond(w, r, http.StatusForbidden, "forbidden", deniedReason)
}

// wouldDeny records and logs, in dry run, the denial the handler would
// have answered, and lets the request pass.
func (h *Handler) wouldDeny(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, by *identity.Decider, reason string) error {
	identity.PassDenied(h.logger, r, by, reason, zap.String("route", h.Route))
	return next.ServeHTTP(w, r)
}

var errClientGone = errors.New("client closed the request while the permission check was pending")

// call asks the service (one call per key at a time) and caches the answer.
// The call is not tied to the first caller's context, so a client that goes
// away does not fail the others waiting on the same key. Failures are
// logged here, once per call, not once per waiting request.
func (h *Handler) call(r *http.Request, key string, id *identity.Identity) (Answer, error) {
	s := h.shared
	// built here, on the request's goroutine: the call may outlive it
	req := h.checkRequest(r, id)
	callCtx := context.WithoutCancel(r.Context())
	ch := s.group.DoChan(key, func() (res any, err error) {
		defer func() {
			if p := recover(); p != nil {
				h.logger.Error("panic in permission call", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				err = fmt.Errorf("internal error in permission call")
			}
		}()
		// a call for this key may have finished between our miss and now
		if allow, st := s.cache.Peek(key, s.clock()); st == Fresh {
			return Answer{Allow: allow}, nil
		}
		ctx, cancel := context.WithTimeout(callCtx, h.timeout)
		defer cancel()
		start := time.Now()
		ans, err := s.client.Check(ctx, req)
		h.m.latency.Observe(time.Since(start).Seconds())
		if err != nil {
			h.m.errors.Inc()
			h.logger.Warn("permission service call failed",
				zap.String("route", h.Route),
				zap.String("on_error", h.OnError),
				zap.Duration("stale_if_error", h.stale),
				zap.Error(err))
			return Answer{}, err
		}
		ttl := h.negTTL
		if ans.Allow {
			ttl = h.ttl
		}
		if ans.HasMaxAge {
			ttl = ans.MaxAge
		}
		if ans.NoStore {
			ttl = 0
		}
		s.cache.Put(key, req.Subject, ans.Allow, ttl, h.stale, s.clock())
		if c := h.logger.Check(zapcore.DebugLevel, "permission decision fetched"); c != nil {
			c.Write(zap.String("route", h.Route), zap.Bool("allow", ans.Allow), zap.Duration("ttl", ttl))
		}
		return ans, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Answer{}, res.Err
		}
		return res.Val.(Answer), nil
	case <-r.Context().Done():
		return Answer{}, errClientGone
	}
}

// checkRequest builds the body sent to the service.
func (h *Handler) checkRequest(r *http.Request, id *identity.Identity) CheckRequest {
	req := CheckRequest{
		Method: r.Method,
		Host:   hostOnly(r.Host),
		Path:   r.URL.Path,
		Route:  h.Route,
	}
	if id != nil {
		req.Subject = id.Subject
	}
	if roles, err := identity.RolesAt(r, id, h.rolesPath); err != nil {
		if c := h.logger.Check(zapcore.DebugLevel, "roles claim ignored"); c != nil {
			c.Write(zap.String("roles_claim", h.RolesClaim), zap.Error(err))
		}
	} else {
		req.Roles = roles
	}
	if req.Roles == nil {
		req.Roles = []string{}
	}
	return req
}

// appendKey renders the key template for r into dst. The common
// placeholders come straight from the request; others go through the
// request's replacer.
func (h *Handler) appendKey(dst []byte, r *http.Request, id *identity.Identity) []byte {
	var repl *caddy.Replacer
	for _, seg := range h.tmpl.segs {
		var v string
		switch seg.kind {
		case segLiteral:
			dst = append(dst, seg.text...)
			continue
		case segMethod:
			v = r.Method
		case segPath:
			v = r.URL.Path
		case segHost:
			v = hostOnly(r.Host)
		case segUserID:
			if id != nil {
				v = id.Subject
				break
			}
			fallthrough
		default:
			if repl == nil {
				repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			}
			if repl != nil {
				if val, ok := repl.Get(seg.text); ok {
					v = caddy.ToString(val)
				}
			}
		}
		dst = appendValue(dst, v)
	}
	return dst
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ fieldedits.Declarer         = (*Handler)(nil)
	_ caddy.Destructor            = (*shared)(nil)
)
