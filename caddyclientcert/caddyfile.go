package caddyclientcert

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("client_cert_auth", parseCaddyfile)
	// first of the identity sources: before api_key (before basicauth) and
	// jwt_auth (before basic_auth), whatever order the init functions run in
	httpcaddyfile.RegisterDirectiveOrder("client_cert_auth", httpcaddyfile.After, "try_files")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(ClientCertAuth)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	client_cert_auth [<matcher>] {
//		subject san_uri|san_dns|cn         # default san_uri (SPIFFE IDs)
//		role    <role> <subject>...        # exact subjects, or prefixes ending with *
//		plan    <plan> <subject>...        # the subjects' quota plan (first match)
//		realm   <realm>                    # default gateway
//		forward_claim <claim> <header>     # repeatable: sub, roles -> upstream header
//	}
//
// `role` may be repeated; a subject gets every role whose list matches it.
// `plan` may be repeated; a subject gets the plan of the first line that
// matches it.
func (c *ClientCertAuth) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch name := d.Val(); name {
		case "subject", "realm":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if name == "subject" {
				switch v {
				case SubjectSANURI, SubjectSANDNS, SubjectCN:
				default:
					return d.Errf("invalid subject %q: want san_uri, san_dns or cn", v)
				}
				c.Subject = v
			} else {
				c.Realm = v
			}
		case "role":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return d.Errf("role needs a role and at least one subject: role <role> <subject>...")
			}
			c.Roles = append(c.Roles, RoleRule{Role: args[0], Subjects: args[1:]})
		case "plan":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return d.Errf("plan needs a plan and at least one subject: plan <plan> <subject>...")
			}
			c.Plans = append(c.Plans, PlanRule{Plan: args[0], Subjects: args[1:]})
			if err := checkPlanRules(c.Plans[len(c.Plans)-1:]); err != nil {
				return d.Errf("%v", err)
			}
		case "forward_claim":
			fc, err := identity.UnmarshalForwardClaim(d)
			if err != nil {
				return err
			}
			c.ForwardClaims = append(c.ForwardClaims, fc)
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*ClientCertAuth)(nil)
