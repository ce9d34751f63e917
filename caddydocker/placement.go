package caddydocker

// Where discovered routes sit in a server: in the docker_routes handlers
// (handler.go) the config places, and by default (a server with none) in
// one in front of the server's own routes; the server ends with the
// catch-all. A Caddyfile gets them when it is adapted, so a gateway
// started from it routes from its first request; a JSON config without
// them gets them through the admin API once the app starts.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/apigate/gateway/internal/caddyfileerr"
)

func init() {
	caddyfileerr.AfterAdapt(adaptStep)
}

// adaptStep completes an adapted Caddyfile that has a docker app: the
// server its routes go to gets the docker_routes handlers it lacks
// (EnsureHandlers). A config it cannot read, or whose server is not
// clear, is left as it is: loading it says what is wrong.
func adaptStep(cfg []byte, options map[string]any) (caddyfileerr.Adapted, error) {
	out, server, routes, err := placeHandlers(cfg)
	if err != nil || server == "" {
		return caddyfileerr.Adapted{Config: cfg}, nil
	}
	res := caddyfileerr.Adapted{Config: out}
	file, _ := options["filename"].(string)
	for _, w := range PlacementWarnings(server, routes) {
		res.Warnings = append(res.Warnings, caddyconfig.Warning{File: file, Directive: "docker_routes", Message: w})
	}
	return res, nil
}

// placeHandlers returns config (Caddy JSON) with the docker_routes
// handlers placed in the server of its docker app, that server's name and
// its routes; config comes back as it is when it has no docker app or
// nothing to add.
func placeHandlers(config []byte) (out []byte, server string, routes []json.RawMessage, err error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, "", nil, fmt.Errorf("config is not a JSON object: %v", err)
	}
	var apps map[string]json.RawMessage
	if raw, ok := cfg["apps"]; ok {
		if err := json.Unmarshal(raw, &apps); err != nil {
			return nil, "", nil, fmt.Errorf("config apps: %v", err)
		}
	}
	rawDocker, ok := apps["docker"]
	if !ok {
		return config, "", nil, nil
	}
	var docker struct {
		Server string `json:"server"`
	}
	if err := json.Unmarshal(rawDocker, &docker); err != nil {
		return nil, "", nil, fmt.Errorf("docker app: %v", err)
	}
	var httpApp map[string]json.RawMessage
	if err := json.Unmarshal(apps["http"], &httpApp); err != nil || httpApp == nil {
		return nil, "", nil, fmt.Errorf("docker app without an http app in the config")
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(httpApp["servers"], &servers); err != nil || servers == nil {
		return nil, "", nil, fmt.Errorf("http app without servers in the config")
	}
	server = docker.Server
	if server == "" {
		names := make([]string, 0, len(servers))
		for name := range servers {
			names = append(names, name)
		}
		if server, err = onlyServer(names); err != nil {
			return nil, "", nil, err
		}
	}
	var srv map[string]json.RawMessage
	if err := json.Unmarshal(servers[server], &srv); err != nil || srv == nil {
		return nil, "", nil, fmt.Errorf("docker app: server %q is not an HTTP server of the config", server)
	}
	var own []json.RawMessage
	if raw, ok := srv["routes"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &own); err != nil {
			return nil, "", nil, fmt.Errorf("routes of server %q: %v", server, err)
		}
	}
	placed := EnsureHandlers(server, own)
	if SameRoutes(own, placed) {
		return config, server, placed, nil
	}
	if srv["routes"], err = json.Marshal(placed); err != nil {
		return nil, "", nil, err
	}
	if servers[server], err = json.Marshal(srv); err != nil {
		return nil, "", nil, err
	}
	if httpApp["servers"], err = json.Marshal(servers); err != nil {
		return nil, "", nil, err
	}
	if apps["http"], err = json.Marshal(httpApp); err != nil {
		return nil, "", nil, err
	}
	if cfg["apps"], err = json.Marshal(apps); err != nil {
		return nil, "", nil, err
	}
	out, err = json.Marshal(cfg)
	return out, server, placed, err
}

// policyHandlers are the handlers that wrap or gate the routes after them
// (the site policies a user expects discovered routes to run inside), by
// their JSON name, with the Caddyfile directive a user wrote.
var policyHandlers = map[string]string{
	"headers":          "header",
	"request_body":     "request_body",
	"encode":           "encode",
	"authentication":   "basic_auth",
	"audit":            "audit",
	"jwt_auth":         "jwt_auth",
	"api_key":          "api_key",
	"client_cert_auth": "client_cert_auth",
	"rbac":             "rbac",
	"rate_limit":       "rate_limit",
	"permission":       "permission",
	"quota":            "quota",
	"openapi":          "openapi",
	"path_guard":       "path_guard",
	"timeouts":         "timeouts",
}

// routeJSONView is what the placement check reads of a route.
type routeJSONView struct {
	Group  string                       `json:"group"`
	Match  []map[string]json.RawMessage `json:"match"`
	Handle []json.RawMessage            `json:"handle"`
}

// gating reports whether matcher sets select requests by something other
// than their path (remote_ip, header, not, expression, ...): a responder
// behind such a matcher is a policy (`respond @blocked 403`), one behind a
// path matcher is a route of its own (`respond /health 200`).
func gating(sets []map[string]json.RawMessage) bool {
	for _, set := range sets {
		for k := range set {
			if k != "path" && k != "path_regexp" && k != "host" {
				return true
			}
		}
	}
	return false
}

// policiesOf names the policies that a route is or holds at its top level:
// wrapping handlers, and responders (respond, error, abort, or a handle
// block of them) behind a gating matcher.
func policiesOf(raw json.RawMessage) []string {
	var rt routeJSONView
	if json.Unmarshal(raw, &rt) != nil {
		return nil
	}
	return policyNames(rt.Handle, gating(rt.Match))
}

// policyNames names the policies among handlers (gate: behind a gating
// matcher).
func policyNames(handlers []json.RawMessage, gate bool) []string {
	var out []string
	for _, h := range handlers {
		var hj struct {
			Handler string            `json:"handler"`
			Abort   bool              `json:"abort"`
			Routes  []json.RawMessage `json:"routes"`
		}
		if json.Unmarshal(h, &hj) != nil {
			continue
		}
		if name, ok := policyHandlers[hj.Handler]; ok {
			out = append(out, name)
			continue
		}
		if !gate {
			continue
		}
		switch hj.Handler {
		case "static_response":
			if hj.Abort {
				out = append(out, "abort @matcher")
			} else {
				out = append(out, "respond @matcher")
			}
		case "error":
			out = append(out, "error @matcher")
		case "subroute":
			if respondsOnly(hj.Routes) {
				out = append(out, "handle @matcher")
			}
		}
	}
	return out
}

// respondsOnly reports whether routes only answer (a `handle @blocked {
// respond 403 }` block), not proxy or serve.
func respondsOnly(routes []json.RawMessage) bool {
	if len(routes) == 0 {
		return false
	}
	for _, r := range routes {
		var rt routeJSONView
		if json.Unmarshal(r, &rt) != nil {
			return false
		}
		for _, h := range rt.Handle {
			var hj struct {
				Handler string `json:"handler"`
			}
			if json.Unmarshal(h, &hj) != nil {
				return false
			}
			switch hj.Handler {
			case "static_response", "error", "headers", "vars":
			default:
				return false
			}
		}
	}
	return true
}

// siteName names a top-level route for a warning: its hosts, or "the
// site for every host".
func siteName(raw json.RawMessage) string {
	var rt struct {
		Match []struct {
			Host []string `json:"host"`
		} `json:"match"`
	}
	if json.Unmarshal(raw, &rt) == nil {
		var hosts []string
		for _, m := range rt.Match {
			hosts = append(hosts, m.Host...)
		}
		if len(hosts) > 0 {
			return "site " + strings.Join(hosts, ", ")
		}
	}
	return "the site for every host"
}

// isSiteRoute reports whether a top-level route is a site block: one
// subroute, matched by host or by nothing, not a handle block. (A
// Caddyfile with a single site without hosts has its directives at the
// top level instead.)
func isSiteRoute(raw json.RawMessage) bool {
	var rt routeJSONView
	if json.Unmarshal(raw, &rt) != nil || rt.Group != "" || len(rt.Handle) != 1 {
		return false
	}
	for _, set := range rt.Match {
		for k := range set {
			if k != "host" {
				return false
			}
		}
	}
	hs := routeHandlers(raw)
	return len(hs) == 1 && hs[0].Handler == "subroute"
}

// PlacementWarnings says, for a server's route list, where site policies
// do not cover the discovered routes: with the default placement (the
// docker_routes route in front of the server's routes), every policy of
// every site; with docker_routes placed in a site, the policies that run
// after it (a `respond @blocked 403` written beside it: Caddy orders
// respond, error and abort after the handle blocks and docker_routes).
func PlacementWarnings(server string, routes []json.RawMessage) []string {
	if len(routes) == 0 || !SameRoutes(routes[:1], []json.RawMessage{RoutesHandlerRoute}) {
		return after(server, "the site for every host", routes, true)
	}
	var out, flat []string
	for _, r := range routes[1:] {
		switch {
		case isCatchAll(r):
		case isSiteRoute(r):
			var names []string
			for _, sr := range routeHandlers(r)[0].Routes {
				names = append(names, policiesOf(sr)...)
			}
			if len(names) > 0 {
				out = append(out, frontWarning(server, siteName(r), names))
			}
		default:
			flat = append(flat, policiesOf(r)...)
		}
	}
	if len(flat) > 0 {
		out = append(out, frontWarning(server, "the site for every host", flat))
	}
	return out
}

func frontWarning(server, site string, names []string) string {
	return fmt.Sprintf("server %s: discovered routes run in front of %s, so its %s do not apply to them; put `docker_routes` in the site where they should run (docs/caddydocker.md, \"Where discovered routes run\")",
		server, site, strings.Join(uniq(names), ", "))
}

// after finds the docker_routes handler in routes (one level: the server's
// routes when top, else a subroute's) and names the policies that run
// after it, at its level and at each level around it; nil when routes
// hold none.
func after(server, site string, routes []json.RawMessage, top bool) []string {
	for i, r := range routes {
		var rt routeJSONView
		if json.Unmarshal(r, &rt) != nil {
			continue
		}
		hs := routeHandlers(r)
		for j, h := range hs {
			var inner []string
			switch {
			case h.Handler == "docker_routes" && !h.CatchAll:
			case h.Handler == "subroute" && HasRoutesHandler(h.Routes):
				innerSite := site
				if top && isSiteRoute(r) {
					innerSite = siteName(r)
				}
				inner = after(server, innerSite, h.Routes, false)
			default:
				continue
			}
			var names []string
			if j+1 < len(rt.Handle) {
				names = policyNames(rt.Handle[j+1:], gating(rt.Match))
			}
			for _, later := range routes[i+1:] {
				if !isCatchAll(later) {
					names = append(names, policiesOf(later)...)
				}
			}
			if len(names) > 0 {
				inner = append(inner, fmt.Sprintf("server %s, %s: %s runs after docker_routes, so it does not apply to discovered routes; write it before docker_routes in a `route` block, or as a `handle` block and docker_routes in the site's catch-all `handle` (docs/caddydocker.md, \"Where discovered routes run\")",
					server, site, strings.Join(uniq(names), ", ")))
			}
			return inner
		}
	}
	return nil
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	out := ss[:0:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
