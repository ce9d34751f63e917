package caddyrbac

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/deny"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("rbac", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("rbac", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m RBAC
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	rbac [<matcher>] {
//		roles_claim   <claim path>
//		scopes_claim  <claim path>
//		require       any|all <role...>
//		require_scope any|all <scope...>
//		realm         <realm>
//		dry_run       [true|false]
//	}
//
// require and require_scope may be repeated; every line must hold (AND).
// A claim path is dotted (`realm_access.roles`); `\.` is a literal dot in a
// claim name, and a namespaced name such as `https://example.com/roles`
// also works as written. An rbac block with no require lines only demands
// a verified identity. dry_run lets every request pass and logs, counts
// and audits (decision "would_deny") what would have been denied.
func (h *RBAC) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "roles_claim", "scopes_claim", "realm":
			if !d.NextArg() {
				return d.ArgErr()
			}
			val := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			switch name {
			case "roles_claim":
				if h.RolesClaim != "" {
					return d.Errf("roles_claim given twice")
				}
				h.RolesClaim = val
			case "scopes_claim":
				if h.ScopesClaim != "" {
					return d.Errf("scopes_claim given twice")
				}
				h.ScopesClaim = val
			case "realm":
				if h.Realm != "" {
					return d.Errf("realm given twice")
				}
				h.Realm = val
			}
		case "require", "require_scope":
			if !d.NextArg() {
				return d.Errf("%s needs a mode (any or all) and at least one value", name)
			}
			mode, err := ParseMode(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			values := d.RemainingArgs()
			if len(values) == 0 {
				return d.Errf("%s %s needs at least one value", name, mode)
			}
			rc := RuleConfig{Any: values}
			if mode == All {
				rc = RuleConfig{All: values}
			}
			if _, err := rc.compile(name, 0); err != nil {
				return d.Errf("%v", err)
			}
			if name == "require" {
				h.Require = append(h.Require, rc)
			} else {
				h.RequireScope = append(h.RequireScope, rc)
			}
		case "dry_run":
			on, err := deny.ParseDryRun(d)
			if err != nil {
				return err
			}
			h.DryRun = on
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*RBAC)(nil)
