package caddyjwt

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("jwt_auth", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("jwt_auth", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	j := new(JWTAuth)
	err := j.UnmarshalCaddyfile(h.Dispenser)
	return j, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	jwt_auth [<matcher>] {
//		hmac_secret    <secret>...         # HS256/384/512; {env.X} and {file./path} work
//		public_key     <pem_file>...       # RSA, ECDSA or Ed25519 public keys
//		jwks_url       <url>...
//		jwks_refresh   <duration>          # default 10m
//		jwks_cooldown  <duration>          # default 30s: early refreshes on unknown kid
//		jwks_timeout   <duration>          # default 5s
//		algorithms     <alg>...            # allow-list
//		issuer         <iss>...
//		audience       <aud>...
//		leeway         <duration>
//		require_claims <claim>...
//		from_header    <header>...         # default: Authorization (Bearer)
//		from_cookie    <cookie>...
//		from_query     <param>...
//		forward_claim  <claim> <header>
//		strip_token
//		optional
//		realm          <realm>             # default gateway
//		max_token_size <bytes>             # default 8192
//		cache_size     <entries>|off       # default 10000
//		cache_ttl      <duration>          # default 5m
//		provider <name> {                  # repeatable; a token's iss picks one
//			oidc       <issuer-url>        # discovery: issuer and jwks_uri
//			issuer     <iss>               # or: issuer and its key sources
//			jwks_url   <url>...
//			public_key <pem_file>...
//			hmac_secret <secret>...
//			audience   <aud>...
//			algorithms <alg>...
//			leeway     <duration>
//		}
//	}
//
// Every subdirective that takes a list may also be repeated. With provider
// blocks, keys, issuer, audience, algorithms and leeway go inside them.
func (j *JWTAuth) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "hmac_secret", "public_key", "jwks_url", "algorithms", "issuer", "audience",
			"require_claims", "from_header", "from_cookie", "from_query":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			switch name {
			case "hmac_secret":
				j.HMACSecrets = append(j.HMACSecrets, args...)
			case "public_key":
				j.PublicKeys = append(j.PublicKeys, args...)
			case "jwks_url":
				j.JWKSURLs = append(j.JWKSURLs, args...)
			case "algorithms":
				j.Algorithms = append(j.Algorithms, args...)
			case "issuer":
				j.Issuers = append(j.Issuers, args...)
			case "audience":
				j.Audiences = append(j.Audiences, args...)
			case "require_claims":
				j.RequireClaims = append(j.RequireClaims, args...)
			case "from_header":
				j.FromHeaders = append(j.FromHeaders, args...)
			case "from_cookie":
				j.FromCookies = append(j.FromCookies, args...)
			case "from_query":
				j.FromQuery = append(j.FromQuery, args...)
			}
		case "jwks_refresh", "jwks_cooldown", "jwks_timeout", "leeway", "cache_ttl":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("invalid %s %q: %v", name, d.Val(), err)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			switch name {
			case "jwks_refresh":
				j.JWKSRefresh = caddy.Duration(dur)
			case "jwks_cooldown":
				j.JWKSCooldown = caddy.Duration(dur)
			case "jwks_timeout":
				j.JWKSTimeout = caddy.Duration(dur)
			case "leeway":
				j.Leeway = caddy.Duration(dur)
			case "cache_ttl":
				j.CacheTTL = caddy.Duration(dur)
			}
		case "forward_claim":
			fc, err := identity.UnmarshalForwardClaim(d)
			if err != nil {
				return err
			}
			j.ForwardClaims = append(j.ForwardClaims, fc)
		case "strip_token", "optional":
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "strip_token" {
				j.StripToken = true
			} else {
				j.Optional = true
			}
		case "realm":
			if !d.Args(&j.Realm) {
				return d.ArgErr()
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "max_token_size", "cache_size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			val := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "cache_size" && val == "off" {
				j.CacheSize = -1
				continue
			}
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return d.Errf("invalid %s %q: must be a positive integer", name, val)
			}
			if name == "max_token_size" {
				j.MaxTokenSize = n
			} else {
				j.CacheSize = n
			}
		case "provider":
			p, err := unmarshalProvider(d)
			if err != nil {
				return err
			}
			j.Providers = append(j.Providers, p)
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	if err := j.checkProviders(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// unmarshalProvider reads a `provider <name> { ... }` block.
func unmarshalProvider(d *caddyfile.Dispenser) (IdentityProvider, error) {
	var p IdentityProvider
	if !d.Args(&p.Name) {
		return p, d.ArgErr()
	}
	if d.NextArg() {
		return p, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		switch name {
		case "oidc", "issuer":
			var v string
			if !d.Args(&v) {
				return p, d.ArgErr()
			}
			if d.NextArg() {
				return p, d.ArgErr()
			}
			if name == "oidc" {
				p.OIDC = v
			} else {
				p.Issuer = v
			}
		case "jwks_url", "public_key", "hmac_secret", "audience", "algorithms":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return p, d.ArgErr()
			}
			switch name {
			case "jwks_url":
				p.JWKSURLs = append(p.JWKSURLs, args...)
			case "public_key":
				p.PublicKeys = append(p.PublicKeys, args...)
			case "hmac_secret":
				p.HMACSecrets = append(p.HMACSecrets, args...)
			case "audience":
				p.Audiences = append(p.Audiences, args...)
			case "algorithms":
				p.Algorithms = append(p.Algorithms, args...)
			}
		case "leeway":
			if !d.NextArg() {
				return p, d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return p, d.Errf("invalid leeway %q: %v", d.Val(), err)
			}
			if d.NextArg() {
				return p, d.ArgErr()
			}
			p.Leeway = caddy.Duration(dur)
		default:
			return p, d.Errf("provider %q: unrecognized subdirective '%s'", p.Name, name)
		}
	}
	return p, nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*JWTAuth)(nil)
