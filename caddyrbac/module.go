// Package caddyrbac is a Caddy HTTP handler that allows a request only when
// the roles and scopes in its verified JWT claims (put on the request by
// jwt_auth, see identity.FromRequest) satisfy the configured rules.
//
// Which routes, methods and paths a policy applies to is decided by Caddy's
// own request matchers (a matcher on the directive, named matchers, or a
// route block); rbac only decides on claims.
package caddyrbac

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
)

func init() {
	caddy.RegisterModule(RBAC{})
}

// Placeholders set by the handler.
const (
	// PlaceholderReason is the reason of a denial ("missing role", ...).
	PlaceholderReason = "http.auth.rbac.reason"
	// PlaceholderRoles is the request's roles, joined with ",".
	PlaceholderRoles = "http.auth.rbac.roles"
	// PlaceholderDecision is "allow" or the denial result
	// ("deny_role", "deny_scope", "unauthenticated").
	PlaceholderDecision = "http.auth.rbac.decision"
)

// DefaultRealm is the realm of the WWW-Authenticate challenge sent with a
// 401 when no realm is configured.
const DefaultRealm = "gateway"

// RBAC allows a request when the roles and scopes of its verified identity
// satisfy every rule; otherwise it answers 401 (no identity) or 403 with a
// small JSON body, and records the reason for the audit module.
//
// The handler never parses a token: it reads the claims that jwt_auth
// verified, so jwt_auth must run before it.
type RBAC struct {
	// RolesClaim is the path of the roles claim in the verified claims:
	// segments separated by dots (`realm_access.roles`); a dot inside a
	// claim name is escaped as `\.`; a namespaced claim name such as
	// `https://example.com/roles` also works unescaped. The value may be an
	// array of strings or a string split on spaces and commas.
	// Default: `roles`.
	RolesClaim string `json:"roles_claim,omitempty"`

	// ScopesClaim is the path of the scopes claim, with the same rules as
	// RolesClaim. Default: `scope` (the OAuth 2.0 space-separated string).
	ScopesClaim string `json:"scopes_claim,omitempty"`

	// Require lists role rules; every rule must hold (AND). A rule holds
	// when the roles include any one of its `any` values, or every one of
	// its `all` values.
	Require []RuleConfig `json:"require,omitempty"`

	// RequireScope lists scope rules, combined like Require.
	RequireScope []RuleConfig `json:"require_scope,omitempty"`

	// Realm is the realm of the `WWW-Authenticate: Bearer realm="..."`
	// challenge sent with a 401. Default: `gateway`.
	Realm string `json:"realm,omitempty"`

	policy    *Policy
	challenge string
	logger    *zap.Logger
	metrics   decisionCounters
}

// RuleConfig is one `require` or `require_scope` line. Exactly one of Any
// and All is set.
type RuleConfig struct {
	// Any holds when at least one of these values is present.
	Any []string `json:"any,omitempty"`
	// All holds when every one of these values is present.
	All []string `json:"all,omitempty"`
}

func (rc RuleConfig) compile(field string, i int) (Rule, error) {
	switch {
	case len(rc.Any) > 0 && len(rc.All) > 0:
		return Rule{}, fmt.Errorf("invalid %s[%d]: set either any or all, not both", field, i)
	case len(rc.Any) > 0:
		r, err := NewRule(Any, rc.Any)
		if err != nil {
			return Rule{}, fmt.Errorf("invalid %s[%d]: %v", field, i, err)
		}
		return r, nil
	case len(rc.All) > 0:
		r, err := NewRule(All, rc.All)
		if err != nil {
			return Rule{}, fmt.Errorf("invalid %s[%d]: %v", field, i, err)
		}
		return r, nil
	}
	return Rule{}, fmt.Errorf("invalid %s[%d]: needs any or all with at least one value", field, i)
}

// CaddyModule returns the Caddy module information.
func (RBAC) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rbac",
		New: func() caddy.Module { return new(RBAC) },
	}
}

// Provision compiles the rules and registers the metrics.
func (h *RBAC) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Realm == "" {
		h.Realm = DefaultRealm
	}
	if err := h.compile(); err != nil {
		return err
	}
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	h.metrics = newDecisionCounters()
	return nil
}

func (h *RBAC) compile() error {
	roles := make([]Rule, 0, len(h.Require))
	for i, rc := range h.Require {
		r, err := rc.compile("require", i)
		if err != nil {
			return err
		}
		roles = append(roles, r)
	}
	scopes := make([]Rule, 0, len(h.RequireScope))
	for i, rc := range h.RequireScope {
		r, err := rc.compile("require_scope", i)
		if err != nil {
			return err
		}
		scopes = append(scopes, r)
	}
	p, err := NewPolicy(h.RolesClaim, h.ScopesClaim, roles, scopes)
	if err != nil {
		return err
	}
	h.policy = p
	h.challenge = deny.BearerChallenge(h.Realm)
	return nil
}

// Validate checks the configuration without a Caddy context: it compiles
// the claim paths and rules, so `caddy validate` reports a bad path or rule.
func (h *RBAC) Validate() error {
	if h.policy != nil {
		return nil // compiled by Provision
	}
	return h.compile()
}

// ServeHTTP allows the request or answers 401/403.
func (h *RBAC) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)

	id, ok := identity.FromRequest(r)
	if !ok {
		h.metrics.inc(Unauthenticated)
		return h.deny(w, r, repl, Unauthenticated, ReasonMissingIdentity)
	}

	// expose the roles: the vars table for audit and permission, the
	// placeholder for rate_limit keys, logs and headers (joined lazily)
	if roles, err := identity.RolesAt(r, id, h.policy.RolesPath); err == nil && roles != nil && repl != nil {
		repl.Set(PlaceholderRoles, joinedRoles(roles))
	}

	res, reason := h.policy.Check(id.Claims)
	h.metrics.inc(res)
	if res != Allow {
		return h.deny(w, r, repl, res, reason)
	}
	if repl != nil {
		repl.Set(PlaceholderDecision, "allow")
	}
	return next.ServeHTTP(w, r)
}

// deny records the denial and answers it (see deny.Respond).
func (h *RBAC) deny(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, res Result, reason string) error {
	identity.SetDenial(r, "rbac", reason)
	if repl != nil {
		repl.Set(PlaceholderReason, reason)
		repl.Set(PlaceholderDecision, res.String())
	}
	if ce := h.logger.Check(zapcore.DebugLevel, "request denied"); ce != nil {
		ce.Write(zap.String("result", res.String()), zap.String("reason", reason))
	}
	status, code := http.StatusForbidden, "forbidden"
	if res == Unauthenticated {
		status, code = http.StatusUnauthorized, "unauthorized"
		w.Header().Set("WWW-Authenticate", h.challenge)
	}
	return deny.Respond(w, r, status, code, reason)
}

// joinedRoles is the roles placeholder value; it is joined only when a
// placeholder is actually evaluated.
type joinedRoles []string

func (j joinedRoles) String() string { return strings.Join(j, ",") }

// Interface guards
var (
	_ caddy.Provisioner           = (*RBAC)(nil)
	_ caddy.Validator             = (*RBAC)(nil)
	_ caddyhttp.MiddlewareHandler = (*RBAC)(nil)
	_ fmt.Stringer                = joinedRoles(nil)
)
