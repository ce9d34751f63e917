// Package identity is the per-request state the gateway's modules share: the
// verified identity of the caller, its roles, and why a request was denied.
// It is a leaf package: it imports nothing of this repository and registers
// no Caddy module, so a third-party Caddy module can read what jwt_auth
// verified (identity.FromRequest) without compiling in the gateway's modules.
//
// The state lives in Caddy's per-request vars table, one map shared by every
// handler of a request, so a handler that wraps the others (audit) sees what
// the inner ones (jwt_auth, rbac, permission) recorded after they return.
// The keys are also readable with Caddy's {http.vars.<key>} placeholder.
package identity

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Keys in the vars table.
const (
	// VarIdentity holds the *Identity of a verified credential.
	VarIdentity = "gateway.identity"
	// VarRoles holds the request's roles as []string.
	VarRoles = "gateway.roles"
	// VarDenyReason holds the short, client-safe reason of a denial.
	VarDenyReason = "gateway.deny_reason"
	// VarDenyBy holds the name of the module that denied the request
	// ("jwt_auth", "rbac", "permission", "rate_limit").
	VarDenyBy = "gateway.deny_by"
)

// Identity is the verified identity of a request: the claims of a token whose
// signature, algorithm, lifetime, issuer and audience jwt_auth checked. It is
// shared read-only between requests that reuse the same token (the verified
// token cache), so callers must never modify it or its Claims.
type Identity struct {
	// Subject is the `sub` claim.
	Subject string
	// Issuer is the `iss` claim.
	Issuer string
	// Audience is the `aud` claim, always as a list.
	Audience []string
	// ExpiresAt is the `exp` claim; zero when the token has none.
	ExpiresAt time.Time
	// KeyID is the `kid` of the key that verified the token, if any.
	KeyID string
	// Algorithm is the algorithm that verified the token (e.g. "RS256").
	Algorithm string
	// Claims are all the token's claims, as decoded from JSON
	// (objects are map[string]any, arrays []any, numbers float64).
	// Identity sources other than jwt_auth fill the claims the duties
	// read ("sub", and the roles and scope claims) the same way.
	Claims map[string]any
	// Method is how the client proved the identity: MethodJWT,
	// MethodAPIKey, MethodClientCert or MethodOIDCSession.
	Method string
	// CredentialID names the credential without revealing it: an API
	// key's id, a client certificate's SHA-256 fingerprint; empty for
	// tokens.
	CredentialID string
	// Plan is the quota plan the identity source assigned: an API key's
	// "plan" in the keys file, a client certificate subject's plan
	// mapping; empty when it assigned none (the quota duty then reads a
	// claim or takes its default).
	Plan string
}

// The identity methods.
const (
	MethodJWT        = "jwt"
	MethodAPIKey     = "api_key"
	MethodClientCert = "client_cert"
	// MethodOIDCSession: a browser's session cookie, from a login
	// through an OpenID Provider (oidc_login); audit records it as
	// auth_source "oidc_session".
	MethodOIDCSession = "oidc_session"
)

// FromRequest returns the identity verified for r, if any. It is cheap (one
// map lookup) and never parses a token.
func FromRequest(r *http.Request) (*Identity, bool) {
	return FromContext(r.Context())
}

// FromContext returns the identity stored in a request context.
func FromContext(ctx context.Context) (*Identity, bool) {
	id, ok := caddyhttp.GetVar(ctx, VarIdentity).(*Identity)
	return id, ok && id != nil
}

// FromVars returns the identity stored in a request's variables table
// (the map under caddyhttp.VarsCtxKey), for a caller that holds the table
// already: the docker selection policy, which reads and writes it on
// every request of a canary release.
func FromVars(vars map[string]any) (*Identity, bool) {
	id, ok := vars[VarIdentity].(*Identity)
	return id, ok && id != nil
}

// Set stores id on the request, for FromRequest. The request's context must
// carry Caddy's vars table, as every request served by Caddy does.
func Set(r *http.Request, id *Identity) {
	caddyhttp.SetVar(r.Context(), VarIdentity, id)
}

// Claim returns the value at a claim path (see ParseClaimPath), or false.
func (id *Identity) Claim(path string) (any, bool) {
	p, err := ParseClaimPath(path)
	if err != nil {
		return nil, false
	}
	return p.Lookup(id.Claims)
}

// SetDenial records that module by denied the request, and why. The reason
// must be safe to show to the client and to store in audit events: never a
// token, a secret or key material.
//
// It also records by as the request's decided_by (see DecidedBy); a duty
// that can name the rule that denied calls SetDenialBy instead.
func SetDenial(r *http.Request, by, reason string) {
	caddyhttp.SetVar(r.Context(), VarDenyBy, by)
	caddyhttp.SetVar(r.Context(), VarDenyReason, reason)
	caddyhttp.SetVar(r.Context(), VarDecidedBy, by)
}

// Denial returns the module and reason recorded by SetDenial, if any.
func Denial(r *http.Request) (by, reason string) {
	by, _ = caddyhttp.GetVar(r.Context(), VarDenyBy).(string)
	reason, _ = caddyhttp.GetVar(r.Context(), VarDenyReason).(string)
	return by, reason
}

// SetRoles records the request's roles, for the handlers after this one
// (and audit). An identity source that knows the roles itself (rather than
// from a claim) records them here.
func SetRoles(r *http.Request, roles []string) {
	caddyhttp.SetVar(r.Context(), VarRoles, roles)
}

// Roles returns the roles recorded for the request (see RolesAt), or nil.
func Roles(r *http.Request) []string {
	roles, _ := caddyhttp.GetVar(r.Context(), VarRoles).([]string)
	return roles
}

// RolesAt returns the request's roles: the ones already recorded for it,
// or else the strings of the claim at path in id's claims (an array of
// strings, or a string split on spaces and commas), which it records so that
// the handlers after it (and audit) read the same list. An identity without
// that claim has no roles (nil, nil); a claim of another type is an error
// naming the type.
func RolesAt(r *http.Request, id *Identity, path ClaimPath) ([]string, error) {
	if roles := Roles(r); roles != nil {
		return roles, nil
	}
	if id == nil {
		return nil, nil
	}
	v, found := path.Lookup(id.Claims)
	if !found {
		return nil, nil
	}
	var roles []string
	if arr, ok := v.([]any); ok { // the common case, with one allocation
		roles = make([]string, 0, len(arr))
		for _, e := range arr {
			s, ok := e.(string)
			if !ok {
				return nil, errNotString(e)
			}
			roles = append(roles, s)
		}
	} else {
		var err error
		if roles, err = Strings(v); err != nil {
			return nil, err
		}
	}
	SetRoles(r, roles)
	return roles, nil
}

// More keys in the vars table: how the request was decided, for audit.
const (
	// VarDecidedBy holds the duty and rule that decided the request (a
	// *Decider, or a string set by SetDenial): for a denial the denying
	// duty, for an allow the last duty that allowed.
	VarDecidedBy = "gateway.decided_by"
	// VarWouldDenyBy and VarWouldDenyReason hold what a duty in dry run
	// would have denied (SetWouldDeny).
	VarWouldDenyBy     = "gateway.would_deny_by"
	VarWouldDenyReason = "gateway.would_deny_reason"
	// VarPermissionCache holds where the permission duty's answer came
	// from: PermissionCacheHit, PermissionCacheMiss or PermissionCacheStale.
	VarPermissionCache = "gateway.permission_cache"
)

// Values of VarPermissionCache.
const (
	// PermissionCacheHit: a fresh cached decision answered.
	PermissionCacheHit = "hit"
	// PermissionCacheMiss: no fresh decision; the service was asked (or
	// a call for the same key already in flight was joined).
	PermissionCacheMiss = "miss"
	// PermissionCacheStale: the service failed and an expired decision
	// was served (stale_if_error).
	PermissionCacheStale = "stale"
)

// A Decider names a duty and one of its rules, as audit's decided_by shows
// it: the module name, then ": " and the rule in the module's own config
// terms ("rbac: require any admin,editor", "permission: service"), or the
// module name alone. Duties make theirs once, when they are provisioned:
// recording a *Decider on a request then costs no allocation.
type Decider struct {
	module, text string
}

// NewDecider returns the Decider of module's rule; an empty rule names
// the module alone.
func NewDecider(module, rule string) *Decider {
	text := module
	if rule != "" {
		text = module + ": " + rule
	}
	return &Decider{module: module, text: text}
}

// Module returns the module name ("rbac").
func (d *Decider) Module() string { return d.module }

// String returns the decided_by text ("rbac: require any admin").
func (d *Decider) String() string { return d.text }

// SetDecidedBy records that d allowed the request. Each duty that allows
// records itself, so the last one to allow is the one audit reports.
func SetDecidedBy(r *http.Request, d *Decider) {
	caddyhttp.SetVar(r.Context(), VarDecidedBy, d)
}

// SetDenialBy records a denial like SetDenial, naming the rule that
// denied (the module is d's).
func SetDenialBy(r *http.Request, d *Decider, reason string) {
	caddyhttp.SetVar(r.Context(), VarDenyBy, d.module)
	caddyhttp.SetVar(r.Context(), VarDenyReason, reason)
	caddyhttp.SetVar(r.Context(), VarDecidedBy, d)
}

// DecidedBy returns the decided_by text recorded by SetDecidedBy,
// SetDenialBy or SetDenial (the module name alone), or "".
func DecidedBy(r *http.Request) string {
	switch v := caddyhttp.GetVar(r.Context(), VarDecidedBy).(type) {
	case *Decider:
		if v != nil {
			return v.text
		}
	case string:
		return v
	}
	return ""
}

// SetWouldDeny records that d, in dry run, would have denied the request
// with reason (client-safe, as for SetDenial) and let it pass. The first
// one recorded is kept: it is the duty that would have answered had it
// enforced its rules.
func SetWouldDeny(r *http.Request, d *Decider, reason string) {
	if by, _ := WouldDeny(r); by != "" {
		return
	}
	caddyhttp.SetVar(r.Context(), VarWouldDenyBy, d)
	caddyhttp.SetVar(r.Context(), VarWouldDenyReason, reason)
}

// PassDenied is what a duty in dry_run does instead of refusing: it
// records the denial it would have answered (SetWouldDeny) and logs it at
// info, one line the same in every duty (fields adds the duty's own).
func PassDenied(log *zap.Logger, r *http.Request, d *Decider, reason string, fields ...zap.Field) {
	SetWouldDeny(r, d, reason)
	subject := ""
	if id, ok := FromRequest(r); ok {
		subject = id.Subject
	}
	log.Info("request would be denied (dry run)", append(fields,
		zap.String("decided_by", d.String()),
		zap.String("reason", reason),
		zap.String("subject", subject),
		zap.String("method", r.Method),
		zap.String("host", r.Host),
		zap.String("path", r.URL.Path))...)
}

// WouldDeny returns the decided_by text and reason recorded by
// SetWouldDeny, if any.
func WouldDeny(r *http.Request) (decidedBy, reason string) {
	if d, ok := caddyhttp.GetVar(r.Context(), VarWouldDenyBy).(*Decider); ok && d != nil {
		decidedBy = d.text
	}
	reason, _ = caddyhttp.GetVar(r.Context(), VarWouldDenyReason).(string)
	return decidedBy, reason
}

// SetPermissionCache records where the permission duty's answer came
// from (PermissionCacheHit, PermissionCacheMiss, PermissionCacheStale).
func SetPermissionCache(r *http.Request, status string) {
	caddyhttp.SetVar(r.Context(), VarPermissionCache, status)
}

// PermissionCache returns what SetPermissionCache recorded, or "" when no
// permission duty ran.
func PermissionCache(r *http.Request) string {
	s, _ := caddyhttp.GetVar(r.Context(), VarPermissionCache).(string)
	return s
}

// VarPlan holds the quota plan a request was counted on (a *PlanLabel),
// for audit's plan field.
const VarPlan = "gateway.plan"

// PlanLabel names the quota plan of a request. The quota duty makes one
// per plan when it is provisioned, so that recording it costs no
// allocation.
type PlanLabel struct{ name string }

// NewPlanLabel returns the label of a plan.
func NewPlanLabel(name string) *PlanLabel { return &PlanLabel{name: name} }

// String returns the plan's name.
func (p *PlanLabel) String() string { return p.name }

// SetPlan records the quota plan the request was counted on.
func SetPlan(r *http.Request, p *PlanLabel) {
	caddyhttp.SetVar(r.Context(), VarPlan, p)
}

// PlanOf returns the quota plan recorded by SetPlan, or "".
func PlanOf(r *http.Request) string {
	if p, ok := caddyhttp.GetVar(r.Context(), VarPlan).(*PlanLabel); ok && p != nil {
		return p.name
	}
	return ""
}

// VarOpenAPIViolation holds the first way a request (or its response) did
// not match the API's OpenAPI document, as the openapi duty found it
// (SetOpenAPIViolation), refused or, in dry run, let pass.
const VarOpenAPIViolation = "gateway.openapi_violation"

// OpenAPIViolation is one violation of an OpenAPI document: where
// ("query.limit", "body/items/0/price"), the schema keyword or OpenAPI
// rule, and what was expected. It never holds the value that failed.
type OpenAPIViolation struct {
	Location string `json:"location"`
	Keyword  string `json:"keyword"`
	Message  string `json:"message"`
}

// SetOpenAPIViolation records the request's first violation of the API
// description; a later one does not replace it.
func SetOpenAPIViolation(r *http.Request, v *OpenAPIViolation) {
	if OpenAPIViolationOf(r) != nil {
		return
	}
	caddyhttp.SetVar(r.Context(), VarOpenAPIViolation, v)
}

// OpenAPIViolationOf returns what SetOpenAPIViolation recorded, or nil.
func OpenAPIViolationOf(r *http.Request) *OpenAPIViolation {
	v, _ := caddyhttp.GetVar(r.Context(), VarOpenAPIViolation).(*OpenAPIViolation)
	return v
}
