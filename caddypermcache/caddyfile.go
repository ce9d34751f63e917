package caddypermcache

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/natsconn"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("permission", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("permission", httpcaddyfile.After, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var p Handler
	err := p.UnmarshalCaddyfile(h.Dispenser)
	return &p, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	permission [<url>] {
//		url            <url>
//		timeout        <duration>
//		cache_ttl      <duration>
//		negative_ttl   <duration>
//		cache_size     <entries>
//		key            <template...>
//		on_error       deny|allow
//		stale_if_error <duration>
//		roles_claim    <claim path>
//		route          <name>
//		invalidate_subject <nats subject>   # fleet: NATS messages drop decisions
//		nats {                              # default: the connection of `storage nats`
//			servers  <url>...
//			creds    <file>
//			nkey     <seed file>
//			user     <user>
//			password <password>
//			token    <token>
//			tls {
//				ca          <file>
//				cert        <file>
//				key         <file>
//				server_name <name>
//			}
//			name     <NATS client name>
//		}
//		dry_run        [true|false]         # pass every request; log, count and audit would-be denials
//	}
//
// The nats block is the gateway's one NATS connection block
// (natsconn.Config); nats_servers <url>... and nats_creds_file <file> are
// its older spellings and still work. The words of key are joined with
// single spaces; {method}, {path} and the
// other Caddyfile shorthands work. The invalidation message format is in
// invalidate.go (and docs/fleet.md).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.URL = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "url":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if h.URL != "" {
				return d.Errf("url given twice")
			}
			h.URL = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "timeout", "cache_ttl", "negative_ttl", "stale_if_error":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("invalid %s %q: %v", name, d.Val(), err)
			}
			if dur < 0 {
				return d.Errf("invalid %s %q: must not be negative", name, d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			cd := caddy.Duration(dur)
			switch name {
			case "timeout":
				if dur == 0 {
					return d.Errf("invalid timeout %q: must be positive", d.Val())
				}
				h.Timeout = cd
			case "cache_ttl":
				h.CacheTTL = &cd
			case "negative_ttl":
				h.NegativeTTL = &cd
			case "stale_if_error":
				h.StaleIfError = cd
			}
		case "cache_size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n < 1 {
				return d.Errf("invalid cache_size %q: must be a positive number of entries", d.Val())
			}
			h.CacheSize = n
			if d.NextArg() {
				return d.ArgErr()
			}
		case "key":
			words := d.RemainingArgs()
			if len(words) == 0 {
				return d.ArgErr()
			}
			h.Key = strings.Join(words, " ")
			if _, err := ParseKeyTemplate(h.Key); err != nil {
				return d.Errf("invalid key: %v", err)
			}
			if err := identity.CheckAuthPlaceholders("key", h.Key); err != nil {
				return d.Errf("%v", err)
			}
		case "on_error":
			if !d.NextArg() {
				return d.ArgErr()
			}
			switch d.Val() {
			case "deny", "allow":
				h.OnError = d.Val()
			default:
				return d.Errf("invalid on_error %q: must be deny or allow", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "roles_claim", "route":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if name == "route" {
				h.Route = d.Val()
			} else {
				h.RolesClaim = d.Val()
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "invalidate_subject", "nats_creds_file":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if name == "invalidate_subject" {
				if v := d.Val(); strings.ContainsAny(v, " \t\r\n") || strings.HasPrefix(v, ".") ||
					strings.HasSuffix(v, ".") || strings.Contains(v, "..") {
					return d.Errf("invalid invalidate_subject %q: not a NATS subject", v)
				}
				h.InvalidateSubject = d.Val()
			} else {
				h.natsBlock().Creds = d.Val() // the older spelling of nats { creds }
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "nats":
			if err := h.natsBlock().UnmarshalCaddyfileBlock(d); err != nil {
				return err
			}
		case "nats_servers": // the older spelling of nats { servers }
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.natsBlock().AddServers(args...)
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
	if h.URL == "" {
		return d.Err("missing url: the permission service's address (permission <url> or url <url>)")
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)

// natsBlock returns the handler's NATS connection block, made when absent.
func (h *Handler) natsBlock() *natsconn.Config {
	if h.NATS == nil {
		h.NATS = new(natsconn.Config)
	}
	return h.NATS
}
