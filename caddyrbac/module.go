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
	"github.com/apigate/gateway/internal/fieldedits"
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

	// DryRun lets every request pass: what the rules would have denied is
	// logged (at info, as "request would be denied (dry run)"), counted
	// (the decisions metric with dry_run="true") and audited (decision
	// "would_deny"). For rolling out a policy: watch, then enforce.
	DryRun bool `json:"dry_run,omitempty"`

	policy    *Policy
	challenge string
	logger    *zap.Logger
	metrics   decisionCounters
	deciders  deciders
}

// deciders are the handler's decided_by values, made once.
type deciders struct {
	allow    *identity.Decider   // every rule held: the whole policy
	identity *identity.Decider   // the implicit rule: a verified identity
	roles    []*identity.Decider // per require line
	scopes   []*identity.Decider // per require_scope line
}

// The decided_by texts of rbac: "rbac: identity" (no identity; an allow
// by a policy without rules), "rbac: require any admin,editor" (the line
// that denied), and for an allow every line, joined with "; ".
func newDeciders(roles, scopes []RuleConfig) deciders {
	d := deciders{identity: identity.NewDecider("rbac", "identity")}
	var all []string
	for _, rules := range []struct {
		name string
		list []RuleConfig
		out  *[]*identity.Decider
	}{{"require", roles, &d.roles}, {"require_scope", scopes, &d.scopes}} {
		for _, rc := range rules.list {
			text := rules.name + " " + rc.String()
			*rules.out = append(*rules.out, identity.NewDecider("rbac", text))
			all = append(all, text)
		}
	}
	d.allow = d.identity
	if len(all) > 0 {
		d.allow = identity.NewDecider("rbac", strings.Join(all, "; "))
	}
	return d
}

// denier returns the Decider of a denial's rule.
func (d *deciders) denier(res Result, rule int) *identity.Decider {
	switch {
	case res == DenyRole && rule < len(d.roles):
		return d.roles[rule]
	case res == DenyScope && rule < len(d.scopes):
		return d.scopes[rule]
	}
	return d.identity
}

// RuleConfig is one `require` or `require_scope` line. Exactly one of Any
// and All is set.
type RuleConfig struct {
	// Any holds when at least one of these values is present.
	Any []string `json:"any,omitempty"`
	// All holds when every one of these values is present.
	All []string `json:"all,omitempty"`
}

// String returns the line as written in a Caddyfile after the directive
// name: "any admin,editor" (values joined with ",").
func (rc RuleConfig) String() string {
	if len(rc.Any) > 0 {
		return "any " + strings.Join(rc.Any, ",")
	}
	return "all " + strings.Join(rc.All, ",")
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
	h.metrics = newDecisionCounters(h.DryRun)
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
	h.deciders = newDeciders(h.Require, h.RequireScope)
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

// RequestFieldEdits reports that ServeHTTP changes no request header field
// (fieldedits.Declarer): it only reads them.
func (h *RBAC) RequestFieldEdits() []string { return nil }

// ServeHTTP allows the request or answers 401/403.
func (h *RBAC) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)

	id, ok := identity.FromRequest(r)
	if !ok {
		h.metrics.inc(Unauthenticated)
		return h.deny(w, r, next, repl, nil, Unauthenticated, ReasonMissingIdentity, 0)
	}

	// expose the roles: the vars table for audit and permission, the
	// placeholder for rate_limit keys, logs and headers (joined lazily)
	if roles, err := identity.RolesAt(r, id, h.policy.RolesPath); err == nil && roles != nil && repl != nil {
		repl.Set(PlaceholderRoles, joinedRoles(roles))
	}

	res, reason, rule := h.policy.Decide(id.Claims)
	h.metrics.inc(res)
	if res != Allow {
		return h.deny(w, r, next, repl, id, res, reason, rule)
	}
	identity.SetDecidedBy(r, h.deciders.allow)
	if repl != nil {
		repl.Set(PlaceholderDecision, "allow")
	}
	return next.ServeHTTP(w, r)
}

// deny records the denial and answers it (see deny.Respond); in dry run
// it records and logs what would have been denied, and lets the request
// pass.
func (h *RBAC) deny(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, repl *caddy.Replacer,
	id *identity.Identity, res Result, reason string, rule int) error {
	by := h.deciders.denier(res, rule)
	if repl != nil {
		repl.Set(PlaceholderReason, reason)
		repl.Set(PlaceholderDecision, res.String())
	}
	if h.DryRun {
		identity.PassDenied(h.logger, r, by, reason)
		return next.ServeHTTP(w, r)
	}
	identity.SetDenialBy(r, by, reason)
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
	_ fieldedits.Declarer         = (*RBAC)(nil)
	_ fmt.Stringer                = joinedRoles(nil)
)
