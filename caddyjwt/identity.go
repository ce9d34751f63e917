package caddyjwt

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/gwctx"
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
	Claims map[string]any
}

// FromRequest returns the identity that jwt_auth verified for r, if any.
// It is cheap (one map lookup) and never parses the token again.
func FromRequest(r *http.Request) (*Identity, bool) {
	return FromContext(r.Context())
}

// FromContext returns the identity stored in a request context by jwt_auth.
func FromContext(ctx context.Context) (*Identity, bool) {
	id, ok := caddyhttp.GetVar(ctx, gwctx.VarIdentity).(*Identity)
	return id, ok && id != nil
}

// SetIdentity stores id on the request so that later handlers (and handlers
// that wrap this one) can read it with FromRequest. The request's context
// must carry Caddy's vars table, as every request served by Caddy does.
func SetIdentity(r *http.Request, id *Identity) {
	caddyhttp.SetVar(r.Context(), gwctx.VarIdentity, id)
}

// Claim returns the value at a claim path (see ParseClaimPath), or false.
func (id *Identity) Claim(path string) (any, bool) {
	p, err := ParseClaimPath(path)
	if err != nil {
		return nil, false
	}
	return p.Lookup(id.Claims)
}
