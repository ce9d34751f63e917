package caddyjwt

import (
	"context"
	"net/http"

	"github.com/apigate/gateway/identity"
)

// Identity is the verified identity of a request (identity.Identity): the
// claims of a token jwt_auth checked. Modules that only read it can import
// the leaf package identity instead of this one.
type Identity = identity.Identity

// ClaimPath is a parsed path into a claim set (identity.ClaimPath).
type ClaimPath = identity.ClaimPath

// FromRequest returns the identity that jwt_auth verified for r, if any.
// It is cheap (one map lookup) and never parses the token again.
func FromRequest(r *http.Request) (*Identity, bool) { return identity.FromRequest(r) }

// FromContext returns the identity stored in a request context by jwt_auth.
func FromContext(ctx context.Context) (*Identity, bool) { return identity.FromContext(ctx) }

// SetIdentity stores id on the request so that later handlers (and handlers
// that wrap this one) can read it with FromRequest.
func SetIdentity(r *http.Request, id *Identity) { identity.Set(r, id) }

// ParseClaimPath parses a dotted claim path (see identity.ParseClaimPath).
func ParseClaimPath(s string) (ClaimPath, error) { return identity.ParseClaimPath(s) }

// MethodJWT is the Identity.Method of identities jwt_auth verified.
const MethodJWT = identity.MethodJWT
