package caddydocker

import (
	"encoding/json"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("docker", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("docker_routes", parseRoutesDirective)
	// after every directive that wraps or gates a site's routes (header,
	// request_body, rewrite, basic_auth, encode, the duties, ...), in
	// front of the site's handle blocks
	httpcaddyfile.RegisterDirectiveOrder("docker_routes", httpcaddyfile.Before, "handle")
}

// parseRoutesDirective sets up the docker_routes handler:
//
//	docker_routes [<matcher>]
//
// The docker app's discovered routes run where it stands (docs/caddydocker.md,
// "Where discovered routes run"). It takes no arguments or block.
func parseRoutesDirective(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h.Next() // directive name
	if h.NextArg() {
		return nil, h.Errf("docker_routes takes no arguments (the docker global option configures discovery), got %q", h.Val())
	}
	if h.NextBlock(0) {
		return nil, h.Errf("docker_routes takes no block (the docker global option configures discovery), got '%s'", h.Val())
	}
	return new(RoutesHandler), nil
}

func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		return nil, d.Err("docker: the global option may be given only once")
	}
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "docker", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the app from the `docker` global option:
//
//	docker {
//		host            unix:///run/podman/podman.sock
//		debounce        100ms
//		resync_interval 30s
//		stream_close_delay 1h
//		forget_after    24h       # a gone service's routes answer 404 no_route this long
//		scope           <label>=<value> ...  # route only the containers with these labels
//		state_file      /var/lib/gateway/docker-routes.json
//		server          gateway
//		admin           localhost:2019   # default: the config's own admin address
//		jwt_auth        { ... }   # as the jwt_auth directive
//		rbac            { ... }   # base of auth.roles checks, e.g. roles_claim
//		permission      { ... }   # as the permission directive
//		audit           [{ ... }] # as the audit handler directive
//		rate_limit_sync 250ms|off # rate_limit labels across the fleet
//		fleet           { ... }
//	}
//
// jwt_auth, rbac, permission and audit are parsed by those modules' own
// Caddyfile parsers, so they accept exactly what the directives accept.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "host", "state_file", "server", "admin":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			switch name {
			case "host":
				a.Host = v
			case "state_file":
				a.StateFile = v
			case "server":
				a.Server = v
			case "admin":
				a.Admin = v
			}
		case "stream_close_delay", "forget_after":
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
			if name == "forget_after" {
				a.ForgetAfter = &cd
			} else {
				a.StreamCloseDelay = &cd
			}
		case "debounce", "resync_interval":
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
			if name == "resync_interval" && dur < time.Second {
				return d.Errf("invalid resync_interval %q: must be at least 1s", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "debounce" {
				a.Debounce = caddy.Duration(dur)
			} else {
				a.ResyncInterval = caddy.Duration(dur)
			}
		case "scope":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("scope: expected <label>=<value> (or <label>), e.g. scope com.docker.compose.project=shop")
			}
			for _, arg := range args {
				if _, err := ParseScope(arg); err != nil {
					return d.Errf("%v", err)
				}
				a.Scope = append(a.Scope, arg)
			}
		case "rate_limit_sync":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			var dur time.Duration
			if v != "off" {
				var err error
				if dur, err = caddy.ParseDuration(v); err != nil || dur <= 0 {
					return d.Errf("invalid rate_limit_sync %q: a positive duration (e.g. 250ms), or off", v)
				}
			}
			cd := caddy.Duration(dur)
			a.RateLimitSync = &cd
		case "fleet":
			f, err := parseFleet(d)
			if err != nil {
				return err
			}
			a.Fleet = f
		case "jwt_auth", "rbac", "permission", "audit":
			raw, err := handlerFromCaddyfile(d, name)
			if err != nil {
				return err
			}
			switch name {
			case "jwt_auth":
				a.JWTAuth = raw
			case "rbac":
				a.RBAC = raw
			case "permission":
				a.Permission = raw
			case "audit":
				a.Audit = raw
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// parseFleet parses
//
//	fleet {
//		servers   <url>...   # default: the `storage nats` global option's connection
//		creds     <file>
//		nkey      <seed file>
//		user      <user>
//		password  <password>
//		token     <token>
//		tls {
//			ca          <file>
//			cert        <file>
//			key         <file>
//			server_name <name>
//		}
//		name      <NATS client name>
//		bucket    <name>
//		advertise <address>
//		ttl       <duration>
//		node      <name>
//		restart_grace <duration>|off
//	}
//
// The connection's subdirectives (servers to name) are the gateway's one
// NATS connection block (natsconn.Config); nats <url>... is the older
// spelling of servers.
func parseFleet(d *caddyfile.Dispenser) (*FleetOptions, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	f := &FleetOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		switch name {
		case "nats", "bucket", "advertise", "ttl", "node", "restart_grace":
		default:
			ok, err := f.Config.UnmarshalCaddyfileOption(d)
			if !ok {
				return nil, d.Errf("fleet: unrecognized subdirective '%s' (expected servers, creds, nkey, user, password, token, tls, name, bucket, advertise, ttl, node or restart_grace)", name)
			}
			if err != nil {
				return nil, err
			}
			continue
		}
		args := d.RemainingArgs()
		switch name {
		case "nats": // the older spelling of servers
			if len(args) == 0 {
				return nil, d.Errf("fleet nats: expected one or more NATS URLs")
			}
			f.Servers = append(f.Servers, args...)
		case "bucket", "advertise", "ttl", "node", "restart_grace":
			if len(args) != 1 {
				return nil, d.Errf("fleet %s: expected one value, got %d", name, len(args))
			}
			switch name {
			case "bucket":
				f.Bucket = args[0]
			case "advertise":
				f.Advertise = args[0]
			case "node":
				f.Node = args[0]
			case "ttl":
				dur, err := caddy.ParseDuration(args[0])
				if err != nil {
					return nil, d.Errf("fleet ttl %q: %v", args[0], err)
				}
				f.TTL = caddy.Duration(dur)
			case "restart_grace":
				var dur time.Duration
				if args[0] != "off" {
					var err error
					if dur, err = caddy.ParseDuration(args[0]); err != nil || dur < 0 {
						return nil, d.Errf("fleet restart_grace %q: a duration (0 or off: withdraw this host's containers when the gateway stops)", args[0])
					}
				}
				g := caddy.Duration(dur)
				f.RestartGrace = &g
			}
		}
	}
	if f.Advertise == "" {
		return nil, d.Errf("fleet: advertise is required: the address other hosts reach this host's published ports at")
	}
	return f, nil
}

// handlerFromCaddyfile parses the segment at d (a handler directive and its
// block) with the handler module's own Caddyfile parser.
func handlerFromCaddyfile(d *caddyfile.Dispenser, name string) (json.RawMessage, error) {
	id := "http.handlers." + name
	seg := d.NewFromNextSegment()
	mod, err := caddy.GetModule(id)
	if err != nil {
		return nil, d.Errf("%s: module %s is not compiled into this binary", name, id)
	}
	inst := mod.New()
	u, ok := inst.(caddyfile.Unmarshaler)
	if !ok {
		return nil, d.Errf("%s: module %s has no Caddyfile syntax", name, id)
	}
	if err := u.UnmarshalCaddyfile(seg); err != nil {
		return nil, err
	}
	return caddyconfig.JSONModuleObject(inst, "handler", name, nil), nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*App)(nil)
