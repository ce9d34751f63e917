// Package caddyclientcert is the client_cert_auth handler: it turns the client
// certificate that Caddy's TLS client authentication verified into the same
// identity jwt_auth gives a verified token, so rbac, rate_limit keys,
// permission and audit work unchanged.
package caddyclientcert

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
)

func init() {
	caddy.RegisterModule(ClientCertAuth{})
}

// DefaultRealm is the realm of the WWW-Authenticate challenge.
const DefaultRealm = "gateway"

// ClientCertAuth is an HTTP handler that authenticates a request by its TLS
// client certificate. It reads only a certificate the TLS handshake
// verified (the connection's verified chains), which Caddy does with
// `tls { client_auth { mode verify_if_given|require_and_verify; trust_pool
// ... } }`; with the modes that do not verify (`request`, `require`) every
// request is refused.
//
// The identity: Subject and the `sub` claim from the leaf certificate (its
// first URI SAN, e.g. a SPIFFE ID; its first DNS SAN; or its common name),
// the `roles` claim from Roles, Method "client_cert", CredentialID the
// leaf's SHA-256 fingerprint (hex), ExpiresAt its NotAfter, Issuer its
// issuer's name. `{http.auth.user.id}` and
// `{http.auth.client_cert.fingerprint}` are set.
//
// A request that already has an identity (an identity source before this
// one identified it) is passed on untouched. A request without a verified
// certificate gets 401 with `WWW-Authenticate: Bearer realm="..."` and
// `{"error":"unauthorized","reason":"missing client certificate"}`.
type ClientCertAuth struct {
	// Subject says where the subject is read: `san_uri` (default), `san_dns`
	// or `cn`. A certificate without that field is refused (401).
	Subject string `json:"subject,omitempty"`

	// Roles give roles to subjects: exact subjects, or prefixes ending
	// with `*` (`spiffe://example.org/ns/billing/*`).
	Roles []RoleRule `json:"roles,omitempty"`

	// Plans give quota plans to subjects, as Roles give roles: the first
	// rule that matches is the identity's plan (the quota duty's plan
	// for the consumer, unless a token's plan claim says otherwise).
	Plans []PlanRule `json:"plans,omitempty"`

	// Realm is the realm of the WWW-Authenticate challenge. Default: gateway.
	Realm string `json:"realm,omitempty"`

	// ForwardClaims copy claims of the request's identity (`sub`,
	// `roles`, or those of an identity an earlier source established)
	// into upstream request headers, as jwt_auth's forward_claim does. A
	// header of the same name sent by the client is always removed first.
	ForwardClaims []identity.ForwardClaim `json:"forward_claims,omitempty"`

	challenge string
	forward   *identity.ClaimHeaders
}

// CaddyModule returns the Caddy module information.
func (ClientCertAuth) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.client_cert_auth",
		New: func() caddy.Module { return new(ClientCertAuth) },
	}
}

// Provision sets the defaults.
func (c *ClientCertAuth) Provision(caddy.Context) error {
	if c.Subject == "" {
		c.Subject = SubjectSANURI
	}
	if c.Realm == "" {
		c.Realm = DefaultRealm
	}
	c.challenge = deny.BearerChallenge(c.Realm)
	var err error
	c.forward, err = identity.NewClaimHeaders(c.ForwardClaims)
	return err
}

// Validate checks the configuration.
func (c *ClientCertAuth) Validate() error {
	switch c.Subject {
	case SubjectSANURI, SubjectSANDNS, SubjectCN:
	default:
		return fmt.Errorf("invalid subject %q: want san_uri, san_dns or cn", c.Subject)
	}
	for _, fc := range c.ForwardClaims {
		if err := fc.Check(); err != nil {
			return err
		}
	}
	if err := checkPlanRules(c.Plans); err != nil {
		return err
	}
	return checkRules(c.Roles)
}

// ServeHTTP authenticates the request.
func (c *ClientCertAuth) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// the forwarded headers: never the client's; an earlier source's
	// identity gets them too
	earlier, identified := identity.FromRequest(r)
	c.forward.Apply(r.Header, earlier)
	if identified {
		return next.ServeHTTP(w, r)
	}
	// only a chain the handshake verified: PeerCertificates alone may be
	// anything the client sent (client_auth mode request or require)
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		identity.SetDenial(r, "client_cert_auth", "missing client certificate")
		w.Header().Set("WWW-Authenticate", c.challenge)
		return deny.Respond(w, r, http.StatusUnauthorized, "unauthorized", "missing client certificate")
	}
	leaf := r.TLS.VerifiedChains[0][0]
	sub, err := SubjectOf(leaf, c.Subject)
	if err != nil {
		identity.SetDenial(r, "client_cert_auth", err.Error())
		w.Header().Set("WWW-Authenticate", deny.InvalidTokenChallenge(err.Error()))
		return deny.Respond(w, r, http.StatusUnauthorized, "invalid_token", err.Error())
	}
	roles := RolesFor(c.Roles, sub)
	claimRoles := make([]any, len(roles))
	for i, role := range roles {
		claimRoles[i] = role
	}
	fp := Fingerprint(leaf)
	id := &identity.Identity{
		Subject:      sub,
		Issuer:       leaf.Issuer.String(),
		ExpiresAt:    leaf.NotAfter,
		Claims:       map[string]any{"sub": sub, "roles": claimRoles},
		Method:       identity.MethodClientCert,
		CredentialID: fp,
		Plan:         PlanFor(c.Plans, sub),
	}
	identity.Set(r, id)
	c.forward.Apply(r.Header, id)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.auth.user.id", sub)
		repl.Set("http.auth.client_cert.fingerprint", fp)
	}
	return next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*ClientCertAuth)(nil)
	_ caddy.Validator             = (*ClientCertAuth)(nil)
	_ caddyhttp.MiddlewareHandler = (*ClientCertAuth)(nil)
)
