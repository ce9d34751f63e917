// Package gwctx holds the per-request state that the gateway's modules share:
// the verified identity, the request's roles and the reason a request was
// denied. It lives in Caddy's per-request vars table, a map shared by every
// handler of the request, so a handler that wraps the others (audit) sees what
// the inner ones (jwt_auth, rbac, permission) recorded, after they return.
package gwctx

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Keys in the vars table. They are also readable with Caddy's
// {http.vars.<key>} placeholder.
const (
	// VarIdentity holds the *caddyjwt.Identity of a verified token.
	VarIdentity = "gateway.identity"
	// VarRoles holds the request's roles as []string (set by rbac).
	VarRoles = "gateway.roles"
	// VarDenyReason holds the short, client-safe reason of a denial.
	VarDenyReason = "gateway.deny_reason"
	// VarDenyBy holds the name of the module that denied the request
	// ("jwt_auth", "rbac", "permission", "rate_limit").
	VarDenyBy = "gateway.deny_by"
)

// SetDenial records that module by denied the request, and why. The reason
// must be safe to show to the client and to store in audit events: never a
// token, a secret or key material.
func SetDenial(r *http.Request, by, reason string) {
	caddyhttp.SetVar(r.Context(), VarDenyBy, by)
	caddyhttp.SetVar(r.Context(), VarDenyReason, reason)
}

// Denial returns the module and reason recorded by SetDenial, if any.
func Denial(r *http.Request) (by, reason string) {
	by, _ = caddyhttp.GetVar(r.Context(), VarDenyBy).(string)
	reason, _ = caddyhttp.GetVar(r.Context(), VarDenyReason).(string)
	return by, reason
}

// SetRoles records the roles of the request's identity.
func SetRoles(r *http.Request, roles []string) {
	caddyhttp.SetVar(r.Context(), VarRoles, roles)
}

// Roles returns the roles recorded by SetRoles, or nil.
func Roles(r *http.Request) []string {
	roles, _ := caddyhttp.GetVar(r.Context(), VarRoles).([]string)
	return roles
}
