package caddypathguard

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("path_guard", parseCaddyfile)
	// First of the directives that read or change the path (redir,
	// rewrite, uri, try_files, handle, route, ... all come later), after
	// audit (ordered before header) so that its event records the
	// refusal, and after header so that a site's response headers (HSTS,
	// say) are on the 400 too. "After header" holds whichever of the two
	// modules registers its order first.
	httpcaddyfile.RegisterDirectiveOrder("path_guard", httpcaddyfile.After, "header")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m PathGuard
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	path_guard [<matcher>] [reject|normalize] {
//		keep_encoded_slash
//		reject_params
//	}
//
// reject (the default) answers 400 {"error":"ambiguous_path"} for a path
// an upstream could read differently from the gateway's matchers;
// normalize forwards the path the matchers saw and refuses only what it
// cannot normalize safely. keep_encoded_slash lets %2F stand inside a
// segment (group%2Fproject); reject_params refuses ";" parameters on every
// segment, not only on dot segments.
func (h *PathGuard) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		switch v := d.Val(); v {
		case ModeReject, ModeNormalize:
			h.Mode = v
		default:
			return d.Errf("invalid path_guard mode '%s': must be %s or %s", v, ModeReject, ModeNormalize)
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for d.NextBlock(0) {
		switch name := d.Val(); name {
		case "keep_encoded_slash", "reject_params":
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "keep_encoded_slash" {
				h.KeepEncodedSlash = true
			} else {
				h.RejectParams = true
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*PathGuard)(nil)
