package caddyoidc

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("oidc_login", parseCaddyfile)
	// with the identity sources: after client_cert_auth and api_key
	// (registered before basicauth by a package initialized earlier),
	// before jwt_auth, openapi and rbac (before basic_auth): a request
	// an earlier source identified is passed on, and the duties after
	// it read the session's identity
	httpcaddyfile.RegisterDirectiveOrder("oidc_login", httpcaddyfile.Before, "basicauth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	o := new(OIDCLogin)
	err := o.UnmarshalCaddyfile(h.Dispenser)
	return o, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	oidc_login [<matcher>] {
//		issuer                  <url>              # required
//		client_id               <id>               # required
//		client_secret           <secret>           # {env.X}, {file.X}; none: a public client
//		scopes                  <scope>...         # default: openid email profile
//		redirect_path           <path>             # default /oauth2/callback
//		login_path              <path>             # default /oauth2/login (?rd=<path>)
//		logout_path             <path>             # default /oauth2/logout
//		post_logout_redirect    <url|path>         # default /
//		backchannel_logout_path <path>             # default /oauth2/backchannel_logout
//		session_ttl             <duration>         # default 8h
//		idle_timeout            <duration>         # default 1h
//		cookie_name             <name>             # default gateway_session (__Host- over HTTPS)
//		unauthenticated         redirect|401       # default: browser navigations redirect, others 401
//		optional                                   # no session: pass on anonymous
//		session_key             <secret>...        # current first; default: derived from client_secret
//		forward_claim           <claim> <header>   # repeatable
//		cache_size              <n>                # default 100000
//	}
func (o *OIDCLogin) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "issuer", "client_id", "client_secret", "redirect_path", "login_path", "logout_path",
			"post_logout_redirect", "backchannel_logout_path", "cookie_name", "unauthenticated":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			*o.stringField(name) = v
			if err := o.checkField(name); err != "" {
				return d.Errf("%s", err)
			}
		case "scopes", "session_key":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			if name == "scopes" {
				o.Scopes = append(o.Scopes, args...)
			} else {
				o.SessionKeys = append(o.SessionKeys, args...)
			}
		case "session_ttl", "idle_timeout":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return d.Errf("invalid %s %q: must be a positive duration", name, d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "session_ttl" {
				o.SessionTTL = caddy.Duration(dur)
			} else {
				o.IdleTimeout = caddy.Duration(dur)
			}
			if err := o.checkField(name); err != "" {
				return d.Errf("%s", err)
			}
		case "cache_size":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return d.Errf("invalid cache_size %q: must be a positive number", v)
			}
			o.CacheSize = n
		case "optional":
			if d.NextArg() {
				return d.ArgErr()
			}
			o.Optional = true
		case "forward_claim":
			fc, err := identity.UnmarshalForwardClaim(d)
			if err != nil {
				return err
			}
			o.ForwardClaims = append(o.ForwardClaims, fc)
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	if o.Issuer == "" {
		return d.Err("oidc_login: issuer is required")
	}
	if o.ClientID == "" {
		return d.Err("oidc_login: client_id is required")
	}
	return nil
}

func (o *OIDCLogin) stringField(name string) *string {
	return map[string]*string{
		"issuer": &o.Issuer, "client_id": &o.ClientID, "client_secret": &o.ClientSecret,
		"redirect_path": &o.RedirectPath, "login_path": &o.LoginPath, "logout_path": &o.LogoutPath,
		"post_logout_redirect": &o.PostLogoutRedirect, "backchannel_logout_path": &o.BackchannelLogoutPath,
		"cookie_name": &o.CookieName, "unauthenticated": &o.Unauthenticated,
	}[name]
}

// checkField checks one field as Validate does, so that the Caddyfile's
// error names the line.
func (o *OIDCLogin) checkField(name string) string {
	probe := OIDCLogin{Issuer: "https://probe.invalid", ClientID: "probe"}
	switch name {
	case "issuer":
		probe.Issuer = o.Issuer
	case "client_id", "client_secret", "scopes":
		return ""
	case "session_ttl":
		probe.SessionTTL = o.SessionTTL
	case "idle_timeout":
		probe.IdleTimeout = o.IdleTimeout
	default:
		*probe.stringField(name) = *o.stringField(name)
	}
	if err := probe.Validate(); err != nil {
		return err.Error()
	}
	return ""
}

// Interface guard
var _ caddyfile.Unmarshaler = (*OIDCLogin)(nil)
