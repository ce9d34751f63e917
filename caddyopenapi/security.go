package caddyopenapi

import (
	"maps"
	"slices"
	"strings"

	"github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/identity"
)

// scheme is a Security Scheme Object, as far as the gateway checks it.
type scheme struct {
	name string
	typ  string // oauth2, openIdConnect, http, apiKey, mutualTLS
	http string // the http scheme, lower case: bearer, basic, ...
}

// scoped reports whether a requirement's list names scopes (OAuth 2.0 and
// OpenID Connect) rather than roles (OpenAPI 3.1, any other scheme).
func (s *scheme) scoped() bool { return s.typ == "oauth2" || s.typ == "openIdConnect" }

// accepts reports whether an identity proved in the way method can stand
// for the scheme: a token (jwt_auth) for OAuth 2.0, OpenID Connect and
// bearer; an API key (api_key) for apiKey, and for bearer too (a key may be
// sent as a bearer token); a client certificate (client_cert_auth) for
// mutualTLS. Nothing the gateway verifies stands for HTTP basic or digest.
func (s *scheme) accepts(method string) bool {
	switch s.typ {
	case "oauth2", "openIdConnect":
		return method == identity.MethodJWT
	case "http":
		return s.http == "bearer" && (method == identity.MethodJWT || method == identity.MethodAPIKey)
	case "apiKey":
		return method == identity.MethodAPIKey
	case "mutualTLS":
		return method == identity.MethodClientCert
	}
	return false
}

// requirement is one Security Requirement Object: every scheme it names
// (with its scopes or roles) must be satisfied. An empty one is satisfied
// by any request, anonymous included.
type requirement struct {
	parts []reqPart
	text  string // "oauth: orders:write orders:read" for messages and logs
}

type reqPart struct {
	scheme *scheme
	values []string
	policy *caddyrbac.Policy // nil when values is empty
}

func (s *Spec) compileSchemes(c *compiler, root node) error {
	comps, ok := root.child("components")
	if !ok || comps.v == nil {
		return nil
	}
	sn, ok := comps.child("securitySchemes")
	if !ok || sn.v == nil {
		return nil
	}
	sm, err := sn.object("securitySchemes")
	if err != nil {
		return err
	}
	for name := range sm {
		en, _ := sn.child(name)
		en, err := c.l.deref(en)
		if err != nil {
			return err
		}
		if _, err := en.object("a security scheme"); err != nil {
			return err
		}
		sc := &scheme{name: name}
		if sc.typ, err = en.str("type"); err != nil {
			return err
		}
		switch sc.typ {
		case "oauth2", "openIdConnect", "apiKey", "mutualTLS":
		case "http":
			h, err := en.str("scheme")
			if err != nil {
				return err
			}
			sc.http = strings.ToLower(h)
		default:
			return en.errorf("security scheme %q: type %q is not apiKey, http, mutualTLS, oauth2 or openIdConnect", name, sc.typ)
		}
		s.schemes[name] = sc
	}
	return nil
}

// compileSecurity compiles a security array (of the document or of an
// operation); an empty array means no security.
func (s *Spec) compileSecurity(n node) ([]requirement, error) {
	if n.v == nil {
		return nil, nil
	}
	arr, ok := n.v.([]any)
	if !ok {
		return nil, n.errorf("security must be an array")
	}
	out := []requirement{}
	for i := range arr {
		en := n.index(i)
		rm, err := en.object("a security requirement")
		if err != nil {
			return nil, err
		}
		var req requirement
		names := slices.Sorted(maps.Keys(rm))
		var texts []string
		for _, name := range names {
			vn, _ := en.child(name)
			sc, ok := s.schemes[name]
			if !ok {
				return nil, vn.errorf("security scheme %q is not in components.securitySchemes", name)
			}
			part := reqPart{scheme: sc}
			list, isArr := vn.v.([]any)
			if !isArr && vn.v != nil {
				return nil, vn.errorf("the scopes of %q must be an array", name)
			}
			for j, e := range list {
				v, ok := e.(string)
				if !ok || v == "" {
					return nil, vn.index(j).errorf("a scope must be a non-empty string")
				}
				part.values = append(part.values, v)
			}
			req.parts = append(req.parts, part)
			texts = append(texts, strings.TrimSpace(name+" "+strings.Join(part.values, " ")))
		}
		req.text = strings.Join(texts, " + ")
		out = append(out, req)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// compilePolicies makes, per requirement part with scopes (or roles), the
// rbac policy that checks them: the same decision rbac's require_scope
// all (require all, for roles) makes, on the same claims.
func (s *Spec) compilePolicies(scopesClaim, rolesClaim string) error {
	for _, op := range s.Operations {
		for i := range op.security {
			for j := range op.security[i].parts {
				part := &op.security[i].parts[j]
				if len(part.values) == 0 || part.policy != nil {
					continue
				}
				rule, err := caddyrbac.NewRule(caddyrbac.All, part.values)
				if err != nil {
					return err
				}
				var roles, scopes []caddyrbac.Rule
				if part.scheme.scoped() {
					scopes = []caddyrbac.Rule{rule}
				} else {
					roles = []caddyrbac.Rule{rule}
				}
				if part.policy, err = caddyrbac.NewPolicy(rolesClaim, scopesClaim, roles, scopes); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// securityResult is what checking an operation's security found.
type securityResult uint8

const (
	securityOK           securityResult = iota
	securityNoIdentity                  // no identity that any requirement accepts: 401
	securityInsufficient                // an accepted identity without the scopes or roles: 403
)

// checkSecurity decides an operation's security requirements against the
// request's verified identity: at least one requirement must hold.
func checkSecurity(reqs []requirement, id *identity.Identity) (securityResult, *requirement) {
	if reqs == nil {
		return securityOK, nil
	}
	result := securityNoIdentity
	var first *requirement
	for i := range reqs {
		req := &reqs[i]
		if len(req.parts) == 0 {
			return securityOK, nil
		}
		if id == nil {
			continue
		}
		accepted, holds := true, true
		for _, part := range req.parts {
			if !part.scheme.accepts(id.Method) {
				accepted = false
				break
			}
			if part.policy != nil {
				if res, _ := part.policy.Check(id.Claims); res != caddyrbac.Allow {
					holds = false
				}
			}
		}
		if !accepted {
			continue
		}
		if holds {
			return securityOK, nil
		}
		if first == nil {
			result, first = securityInsufficient, req
		}
	}
	if first == nil && len(reqs) > 0 {
		first = &reqs[0]
	}
	return result, first
}
