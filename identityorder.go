package gateway

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/apigate/gateway/dashboard"
	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/caddyfileerr"
)

// A duty that reads the identity (quota's default key, rbac, permission,
// openapi's enforce_security) with no identity source before it in its
// route validates, then refuses every request at runtime. The adapter
// warns of it: a handler sees neither its route nor the handlers before
// it at Provision (Caddy provisions each route's handlers in turn, and a
// handler of another route that provisioned earlier may never run before
// it), so the check reads the adapted config, where the route is whole.
// Caddy prints the warning (`caddy adapt`, `caddy validate`, `caddy run`)
// as a WARN log with the directive's file and line, read back from the
// Caddyfile (caddyfileerr.Source: the adapted JSON keeps no positions);
// where the Caddyfile uses the directive in several places that the
// route's hosts and paths do not tell apart, the message lists them all.
// JSON configs, which skip the adapter, are not checked.
func init() {
	caddyfileerr.AddReporter(identityOrderReport)
}

// identitySources are the handlers that set the identity: the gateway's
// and Caddy's basic_auth ("authentication"). "invoke" runs a named route
// this check does not follow, which may hold one.
var identitySources = map[string]bool{
	"jwt_auth": true, "api_key": true, "client_cert_auth": true, "oidc_login": true,
	"authentication": true, "invoke": true,
}

// needsIdentity says why a handler (its JSON) needs an identity source
// before it: what it does to every request without one, or "" when it
// does not need one.
func needsIdentity(h map[string]json.RawMessage) string {
	var name string
	_ = json.Unmarshal(h["handler"], &name)
	switch name {
	case "quota":
		key := "{http.auth.user.id}"
		_ = json.Unmarshal(h["key"], &key)
		if strings.Contains(key, "{http.auth.") {
			return "its key " + key + " resolves empty, and every request is refused with 500"
		}
	case "rbac":
		return "every request is refused with 401"
	case "permission":
		return "the permission service is asked about anonymous requests only"
	case "rate_limit": // github.com/mholt/caddy-ratelimit
		for _, z := range rateLimitZones(h) {
			if strings.Contains(z.key, "{http.auth.") {
				return "zone " + z.name + "'s key " + z.key + " is empty, and every request shares one bucket"
			}
		}
	case "openapi":
		var on bool
		_ = json.Unmarshal(h["enforce_security"], &on)
		if on {
			return "enforce_security refuses every request to an operation with security requirements with 401"
		}
	}
	return ""
}

// identityOrderReport warns of each duty that needs an identity and has
// no identity source before it in its server's routes, naming the server,
// the route's matchers and the directive.
func identityOrderReport(config []byte, src *caddyfileerr.Source) []caddyconfig.Warning {
	names, servers := caddyfileerr.Servers(config)
	var out []caddyconfig.Warning
	for _, name := range names {
		var srv struct {
			Routes []route `json:"routes"`
		}
		if json.Unmarshal(servers[name], &srv) != nil {
			continue
		}
		w := orderWalk{server: name, src: src}
		w.routes(srv.Routes, false, scope{})
		out = append(out, w.warnings...)
	}
	return out
}

// route is a route of the adapted config, as far as the check reads it.
type route struct {
	Group    string                       `json:"group"`
	Match    []map[string]json.RawMessage `json:"match"`
	Handle   []map[string]json.RawMessage `json:"handle"`
	Terminal bool                         `json:"terminal"`
}

type orderWalk struct {
	server   string
	src      *caddyfileerr.Source
	warnings []caddyconfig.Warning
}

// scope is what the matchers around a route say of it: its hosts and
// paths (each matcher's description, and the host and path patterns).
type scope struct {
	at           []string
	hosts, paths []string
}

func (sc scope) with(match []map[string]json.RawMessage) scope {
	if len(match) == 0 {
		return sc
	}
	out := scope{at: append(sc.at[:len(sc.at):len(sc.at)], dashboard.DescribeMatch(match)),
		hosts: sc.hosts, paths: sc.paths}
	for _, m := range match {
		var hosts, paths []string
		_ = json.Unmarshal(m["host"], &hosts)
		_ = json.Unmarshal(m["path"], &paths)
		out.hosts = append(out.hosts[:len(out.hosts):len(out.hosts)], hosts...)
		out.paths = append(out.paths[:len(out.paths):len(out.paths)], paths...)
	}
	return out
}

// routes walks a route list in the order Caddy runs it. A route has an
// identity source before it when its enclosing chain has one, or when an
// earlier route of the list that may run before it has one: neither
// terminal (then the later one does not run after it) nor of the same
// group (only one route of a group runs). An earlier route's matchers are
// not judged: it counts, so that the check does not warn of a config that
// works.
func (w *orderWalk) routes(rs []route, before bool, where scope) {
	for i, r := range rs {
		seen := before
		for _, e := range rs[:i] {
			if !e.Terminal && (e.Group == "" || e.Group != r.Group) && hasSource(e.Handle) {
				seen = true
			}
		}
		at := where.with(r.Match)
		for _, h := range r.Handle {
			var name string
			_ = json.Unmarshal(h["handler"], &name)
			switch {
			case identitySources[name]:
				seen = true
			case name == "subroute":
				var sub []route
				_ = json.Unmarshal(h["routes"], &sub)
				w.routes(sub, seen, at)
				seen = seen || hasSource([]map[string]json.RawMessage{h})
			default:
				if why := needsIdentity(h); why != "" && !seen {
					w.warn(name, at, why)
				}
				w.rateLimitTypos(name, h, at)
			}
		}
	}
}

func (w *orderWalk) warn(directive string, at scope, why string) {
	w.add(caddyconfig.Warning{
		Directive: directive,
		Message: fmt.Sprintf("no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server %s, route %s: %s; put one before it in the route",
			w.server, routeName(at.at), why),
	}, at)
}

// add adds a warning of the directive it names, at its line in the
// Caddyfile when the route's hosts and paths tell which use it is, else
// with every use the Caddyfile has listed in the message.
func (w *orderWalk) add(warn caddyconfig.Warning, at scope) {
	uses := w.src.Uses(warn.Directive)
	narrow := func(keep func(u caddyfileerr.Use) bool) {
		var in []caddyfileerr.Use
		for _, u := range uses {
			if keep(u) {
				in = append(in, u)
			}
		}
		if len(in) > 0 {
			uses = in
		}
	}
	if len(uses) > 1 && len(at.hosts) > 0 {
		narrow(func(u caddyfileerr.Use) bool { return anyHolds(u.Keys, at.hosts) })
	}
	if len(uses) > 1 && len(at.paths) > 0 {
		narrow(func(u caddyfileerr.Use) bool { return anyHolds(u.Enclosing, at.paths) })
	}
	switch {
	case len(uses) == 1:
		warn.File, warn.Line = uses[0].File, uses[0].Line
	case len(uses) > 1:
		lines := make([]string, len(uses))
		for i, u := range uses {
			lines[i] = fmt.Sprintf("%s:%d", u.File, u.Line)
		}
		warn.Message += " (" + warn.Directive + " is at " + strings.Join(lines, ", ") + ")"
	}
	w.warnings = append(w.warnings, warn)
}

// anyHolds reports whether a token of tokens holds one of wants: a site
// address holds its host (`http://example.com:8080`), a block's line its
// path pattern.
func anyHolds(tokens, wants []string) bool {
	for _, t := range tokens {
		for _, want := range wants {
			if want != "" && strings.Contains(t, want) {
				return true
			}
		}
	}
	return false
}

// hasSource says whether handlers hold an identity source, in subroutes
// too.
func hasSource(hs []map[string]json.RawMessage) bool {
	for _, h := range hs {
		var name string
		_ = json.Unmarshal(h["handler"], &name)
		if identitySources[name] {
			return true
		}
		if name == "subroute" {
			var sub []route
			_ = json.Unmarshal(h["routes"], &sub)
			for _, r := range sub {
				if hasSource(r.Handle) {
					return true
				}
			}
		}
	}
	return false
}

type zone struct{ name, key string }

// rateLimitZones are the zones of caddy-ratelimit's handler, by name.
func rateLimitZones(h map[string]json.RawMessage) []zone {
	var zones map[string]struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal(h["rate_limits"], &zones)
	out := make([]zone, 0, len(zones))
	for name, z := range zones {
		out = append(out, zone{name, z.Key})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// rateLimitTypos warns of a caddy-ratelimit zone whose key has a
// placeholder under http.auth. that no module sets (the gateway's quota
// and permission keys refuse one with its line; rate_limit is another
// project's module, so its mistake is a warning, named by route).
func (w *orderWalk) rateLimitTypos(name string, h map[string]json.RawMessage, at scope) {
	if name != "rate_limit" {
		return
	}
	for _, z := range rateLimitZones(h) {
		if err := identity.CheckAuthPlaceholders("key", z.key); err != nil {
			w.add(caddyconfig.Warning{Directive: name,
				Message: fmt.Sprintf("zone %s in server %s, route %s: %v: it is empty on every request, and every request shares one bucket",
					z.name, w.server, routeName(at.at), err)}, at)
		}
	}
}

// routeName names a route by its matchers, outermost first.
func routeName(at []string) string {
	if len(at) == 0 {
		return "every request"
	}
	return strings.Join(at, " > ")
}
