package dashboard

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("gateway_dashboard", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("gateway_dashboard", httpcaddyfile.Before, "file_server")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var d Handler
	err := d.UnmarshalCaddyfile(h.Dispenser)
	return &d, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	gateway_dashboard [<matcher>] {
//		path    <prefix>    # URL prefix as the request reaches the handler; default /
//		refresh <duration>  # how often the page polls; default 1s
//		admin   <address>   # Caddy's admin API; default: the config's own admin address
//	}
//
// The prefix is a subdirective, not an argument: a first argument that
// starts with / is Caddy's path matcher.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.Errf("unexpected argument '%s': set the URL prefix with the path subdirective", d.Val())
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "path":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Path = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "admin":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Admin = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "refresh":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("invalid refresh %q: %v", d.Val(), err)
			}
			if dur < 100*time.Millisecond {
				return d.Errf("invalid refresh %q: must be at least 100ms", d.Val())
			}
			h.Refresh = caddy.Duration(dur)
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)
