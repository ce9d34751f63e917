package caddyapikey

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("api_key", parseCaddyfile)
	// before every authentication handler, jwt_auth included (which goes
	// before basic_auth, after basicauth), whatever order the packages'
	// init functions run in: a request identified by api_key is passed on
	// by jwt_auth
	httpcaddyfile.RegisterDirectiveOrder("api_key", httpcaddyfile.Before, "basicauth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	a := new(APIKey)
	err := a.UnmarshalCaddyfile(h.Dispenser)
	return a, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	api_key [<matcher>] {
//		keys_file      <path>              # required: JSON array of key hashes
//		from_header    <header>...         # default: X-API-Key
//		from_query     <param>...
//		optional                           # no key: pass on anonymous
//		check_interval <duration>          # default 1s: how often the file is checked for changes
//		realm          <realm>             # default gateway
//		forward_claim  <claim> <header>    # repeatable: sub, roles, scope -> upstream header
//	}
func (a *APIKey) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "from_header", "from_query":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			if name == "from_header" {
				a.FromHeaders = append(a.FromHeaders, args...)
			} else {
				a.FromQuery = append(a.FromQuery, args...)
			}
		case "keys_file", "realm":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if name == "keys_file" {
				a.KeysFile = v
			} else {
				a.Realm = v
			}
		case "check_interval":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return d.Errf("invalid check_interval %q: must be a positive duration", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			a.CheckInterval = caddy.Duration(dur)
		case "optional":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.Optional = true
		case "forward_claim":
			fc, err := identity.UnmarshalForwardClaim(d)
			if err != nil {
				return err
			}
			a.ForwardClaims = append(a.ForwardClaims, fc)
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*APIKey)(nil)
