package caddyopenapi

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("openapi", parseCaddyfile)
	// after the identity sources and rbac (enforce_security reads the
	// identity; a client that may not call the API learns nothing of
	// its shape), before permission and the proxy: rbac, whose package
	// this one imports, is already before basic_auth
	httpcaddyfile.RegisterDirectiveOrder("openapi", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	o := new(OpenAPI)
	err := o.UnmarshalCaddyfile(h.Dispenser)
	return o, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	openapi [<matcher>] {
//		spec                <file>                # the OpenAPI document (YAML or JSON)
//		validate request    [dry_run|off]         # the default: enforce
//		validate response   [dry_run|off]         # without this line: off
//		undeclared          reject|pass           # default pass
//		enforce_security                          # check security requirements against the identity
//		scopes_claim        <claim path>          # default scope
//		roles_claim         <claim path>          # default roles
//		max_request_body    <size>                # default 10MiB
//		max_response_body   <size>                # default 1MiB
//		check_interval      <duration>            # default 1s
//		realm               <realm>               # default gateway
//		annotation_formats  <format>...           # formats of the document's own, not checked
//	}
func (o *OpenAPI) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		// a path here would be read as a path matcher: the document is
		// named inside the block only
		return d.Errf("unexpected argument %q: name the document with spec <file> inside the block", d.Val())
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "spec", "scopes_claim", "roles_claim", "realm":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			switch name {
			case "spec":
				o.Spec = v
			case "scopes_claim":
				o.ScopesClaim = v
			case "roles_claim":
				o.RolesClaim = v
			default:
				o.Realm = v
			}
		case "validate":
			if !d.NextArg() {
				return d.ArgErr()
			}
			what := d.Val()
			mode := ModeEnforce
			if d.NextArg() {
				switch v := d.Val(); v {
				case "dry_run", "off", "enforce":
					mode = v
				default:
					return d.Errf("invalid validate %s mode %q: must be dry_run, off or nothing (enforce)", what, v)
				}
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			switch what {
			case "request":
				o.Request = mode
			case "response":
				o.Response = mode
			default:
				return d.Errf("invalid validate %q: must be request or response", what)
			}
		case "undeclared":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if v != UndeclaredReject && v != UndeclaredPass {
				return d.Errf("invalid undeclared %q: must be reject or pass", v)
			}
			o.Undeclared = v
		case "enforce_security":
			if d.NextArg() {
				return d.ArgErr()
			}
			o.EnforceSecurity = true
		case "max_request_body", "max_response_body":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > 1<<40 {
				return d.Errf("invalid %s %q: must be a size such as 1MiB", name, v)
			}
			if name == "max_request_body" {
				o.MaxRequestBody = int64(n)
			} else {
				o.MaxResponseBody = int64(n)
			}
		case "annotation_formats":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			o.AnnotationFormats = append(o.AnnotationFormats, args...)
		case "check_interval":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur <= 0 {
				return d.Errf("invalid check_interval %q: must be a positive duration", v)
			}
			o.CheckInterval = caddy.Duration(dur)
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	if o.Spec == "" {
		return d.Err("openapi needs a spec file (spec <file>)")
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*OpenAPI)(nil)
