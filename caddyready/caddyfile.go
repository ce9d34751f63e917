package caddyready

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("gateway_ready", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("gateway_ready", httpcaddyfile.Before, "respond")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Ready
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	gateway_ready [<matcher>]
//
// It takes no options; route a readiness path to it:
//
//	handle /ready {
//		gateway_ready
//	}
func (h *Ready) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("unrecognized subdirective '%s': gateway_ready takes no options", d.Val())
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Ready)(nil)
