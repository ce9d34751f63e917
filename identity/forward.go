package identity

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// ForwardClaim copies a claim of the request's identity into a request
// header for the upstream: the `forward_claim <claim> <header>`
// subdirective of every identity source (jwt_auth, api_key,
// client_cert_auth).
type ForwardClaim struct {
	// Claim is a claim path, e.g. `sub` or `realm_access.roles`.
	Claim string `json:"claim"`
	// Header is the request header to set.
	Header string `json:"header"`
}

// Check reports what is wrong with fc, naming it.
func (fc ForwardClaim) Check() error {
	if fc.Claim == "" || fc.Header == "" {
		return fmt.Errorf("invalid forward_claim %q -> %q: both a claim and a header are required", fc.Claim, fc.Header)
	}
	if !ValidHeaderName(fc.Header) {
		return fmt.Errorf("invalid forward_claim header %q", fc.Header)
	}
	if _, err := ParseClaimPath(fc.Claim); err != nil {
		return fmt.Errorf("forward_claim: %v", err)
	}
	return nil
}

// UnmarshalForwardClaim reads the arguments of a `forward_claim <claim>
// <header>` subdirective (the dispenser is on the `forward_claim` token).
func UnmarshalForwardClaim(d *caddyfile.Dispenser) (ForwardClaim, error) {
	var fc ForwardClaim
	if !d.Args(&fc.Claim, &fc.Header) || d.NextArg() {
		return fc, d.ArgErr()
	}
	if err := fc.Check(); err != nil {
		return fc, d.Err(err.Error())
	}
	return fc, nil
}

// ClaimHeaders are the forward_claim rules of a handler, checked and
// compiled once (NewClaimHeaders) and then shared read-only by its
// requests. Every request path that passes a request on to the upstream
// calls Apply: each identity source's paths (a request it identified, one
// an earlier source identified, an anonymous one), and any other path
// serving the same requests, so that all of them forward the same headers.
type ClaimHeaders struct {
	rules []claimHeader
}

type claimHeader struct {
	path   ClaimPath
	header string // canonical
}

// NewClaimHeaders checks and compiles fcs; none gives nil, whose Apply does
// nothing.
func NewClaimHeaders(fcs []ForwardClaim) (*ClaimHeaders, error) {
	if len(fcs) == 0 {
		return nil, nil
	}
	c := &ClaimHeaders{rules: make([]claimHeader, 0, len(fcs))}
	for _, fc := range fcs {
		if err := fc.Check(); err != nil {
			return nil, err
		}
		p, _ := ParseClaimPath(fc.Claim)
		c.rules = append(c.rules, claimHeader{path: p, header: textproto.CanonicalMIMEHeaderKey(fc.Header)})
	}
	return c, nil
}

// Headers returns the names of the headers Apply sets (canonical).
func (c *ClaimHeaders) Headers() []string {
	if c == nil {
		return nil
	}
	names := make([]string, len(c.rules))
	for i, r := range c.rules {
		names[i] = r.header
	}
	return names
}

// Apply sets the forwarded headers of h from id: each header is removed
// first, so a client never chooses what the upstream believes came from a
// credential, then set from id's claim when id has it (nil id: anonymous,
// the headers are only removed). A claim's control characters become
// spaces; arrays are joined with commas (Stringify).
func (c *ClaimHeaders) Apply(h http.Header, id *Identity) {
	if c == nil {
		return
	}
	for _, r := range c.rules {
		delete(h, r.header)
		if id == nil {
			continue
		}
		if v, ok := r.path.Lookup(id.Claims); ok && v != nil {
			h[r.header] = []string{headerSafe(Stringify(v))}
		}
	}
}

// ValidHeaderName reports whether h is a valid HTTP header field name (an
// RFC 9110 token).
func ValidHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// headerSafe drops control characters a claim could smuggle into a header.
func headerSafe(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return strings.Map(func(r rune) rune {
				if r < ' ' && r != '\t' || r == 0x7f {
					return ' '
				}
				return r
			}, s)
		}
	}
	return s
}
