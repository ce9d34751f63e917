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
// as a WARN log; JSON configs, which skip the adapter, are not checked.
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
func identityOrderReport(config []byte) []caddyconfig.Warning {
	names, servers := caddyfileerr.Servers(config)
	var out []caddyconfig.Warning
	for _, name := range names {
		var srv struct {
			Routes []route `json:"routes"`
		}
		if json.Unmarshal(servers[name], &srv) != nil {
			continue
		}
		w := orderWalk{server: name}
		w.routes(srv.Routes, false, nil)
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
	warnings []caddyconfig.Warning
}

// routes walks a route list in the order Caddy runs it. A route has an
// identity source before it when its enclosing chain has one, or when an
// earlier route of the list that may run before it has one: neither
// terminal (then the later one does not run after it) nor of the same
// group (only one route of a group runs). An earlier route's matchers are
// not judged: it counts, so that the check does not warn of a config that
// works.
func (w *orderWalk) routes(rs []route, before bool, where []string) {
	for i, r := range rs {
		seen := before
		for _, e := range rs[:i] {
			if !e.Terminal && (e.Group == "" || e.Group != r.Group) && hasSource(e.Handle) {
				seen = true
			}
		}
		at := where
		if len(r.Match) > 0 {
			at = append(where[:len(where):len(where)], dashboard.DescribeMatch(r.Match))
		}
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

func (w *orderWalk) warn(directive string, at []string, why string) {
	w.warnings = append(w.warnings, caddyconfig.Warning{
		Directive: directive,
		Message: fmt.Sprintf("no identity source (jwt_auth, api_key, client_cert_auth, oidc_login or basic_auth) before it in server %s, route %s: %s; put one before it in the route",
			w.server, routeName(at), why),
	})
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
func (w *orderWalk) rateLimitTypos(name string, h map[string]json.RawMessage, at []string) {
	if name != "rate_limit" {
		return
	}
	for _, z := range rateLimitZones(h) {
		if err := identity.CheckAuthPlaceholders("key", z.key); err != nil {
			w.warnings = append(w.warnings, caddyconfig.Warning{Directive: name,
				Message: fmt.Sprintf("zone %s in server %s, route %s: %v: it is empty on every request, and every request shares one bucket",
					z.name, w.server, routeName(at), err)})
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
