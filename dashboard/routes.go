package dashboard

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	caddyrl "github.com/mholt/caddy-ratelimit"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddyopenapi"
	"github.com/apigate/gateway/caddypathguard"
	"github.com/apigate/gateway/caddypermcache"
	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/caddyrbac"
)

// Route is one effective route of the running config, flattened from
// Caddy's nested route lists: the matchers on the way to a terminal
// handler, the duties (handlers) that run before it, and its upstreams.
type Route struct {
	// Server is the key under apps.http.servers.
	Server string `json:"server"`
	// Listen are the server's listener addresses.
	Listen []string `json:"listen,omitempty"`
	// ID is the route's @id (the innermost one on the way), if any.
	ID string `json:"id,omitempty"`
	// Source is "discovery" for routes the docker app added, else "config".
	Source string `json:"source"`
	// Match describes the matchers, one string per level, e.g.
	// "host api.example.com", "path /orders/*".
	Match []string `json:"match"`
	// Duties are the handlers in chain order, the terminal one last.
	Duties []Duty `json:"duties"`
	// Upstreams are the reverse_proxy dial addresses, if any.
	Upstreams []string `json:"upstreams,omitempty"`
}

// Duty is one handler of a route's chain, as a badge: its name and a short
// detail (roles, rate, optional...). Secrets are never part of a detail.
type Duty struct {
	Name   string `json:"name"`
	Detail string `json:"detail,omitempty"`
}

// terminal handlers end a chain: a row is emitted when one is reached.
var terminal = map[string]bool{
	"reverse_proxy": true, "static_response": true, "file_server": true, "error": true,
	"gateway_dashboard": true, "php_fastcgi": true, "acme_server": true, "metrics": true,
	"copy_response": true, "templates": false, "docker_answer": true,
}

type rawRoute struct {
	ID       string                       `json:"@id"`
	Group    string                       `json:"group"`
	Match    []map[string]json.RawMessage `json:"match"`
	Handle   []json.RawMessage            `json:"handle"`
	Terminal bool                         `json:"terminal"`
}

type rawServer struct {
	Listen []string   `json:"listen"`
	Routes []rawRoute `json:"routes"`
}

// ExtractRoutes flattens the routes of an HTTP app's JSON (the value of
// apps.http in Caddy's config) into one row per terminal handler, sorted by
// server then config order. Unknown or malformed parts are skipped, not
// fatal: the dashboard shows what it can read.
func ExtractRoutes(httpApp []byte) ([]Route, error) {
	return ExtractRoutesWith(httpApp, nil)
}

// ExtractRoutesWith is ExtractRoutes where discovered returns the routes
// that a server's docker_routes handlers run (caddydocker.ServedRoutes):
// they are not in the config's JSON, and are flattened where the handler
// stands. A nil discovered shows none.
func ExtractRoutesWith(httpApp []byte, discovered func(server string) []json.RawMessage) ([]Route, error) {
	if len(httpApp) == 0 || string(httpApp) == "null" {
		return []Route{}, nil
	}
	var app struct {
		Servers map[string]rawServer `json:"servers"`
	}
	if err := json.Unmarshal(httpApp, &app); err != nil {
		return nil, fmt.Errorf("reading apps.http: %w", err)
	}
	names := make([]string, 0, len(app.Servers))
	for n := range app.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []Route{}
	for _, n := range names {
		srv := app.Servers[n]
		w := walker{server: n, listen: srv.Listen}
		if discovered != nil {
			for _, raw := range discovered(n) {
				var rt rawRoute
				if json.Unmarshal(raw, &rt) == nil {
					w.discovered = append(w.discovered, rt)
				}
			}
		}
		w.routes(srv.Routes, nil, nil, "", 0)
		out = append(out, w.out...)
	}
	return out, nil
}

type walker struct {
	server     string
	listen     []string
	discovered []rawRoute // what the server's docker_routes handlers run
	out        []Route
}

const maxDepth = 16

func (w *walker) routes(list []rawRoute, match []string, duties []Duty, id string, depth int) {
	if depth > maxDepth {
		return
	}
	// Handlers of earlier matcher-less, non-terminal routes run before the
	// later routes of the same list.
	carried := append([]Duty(nil), duties...)
	for _, rt := range list {
		m := append([]string(nil), match...)
		if len(rt.Match) > 0 {
			m = append(m, DescribeMatch(rt.Match))
		}
		rid := id
		if rt.ID != "" {
			rid = rt.ID
		}
		chain := append([]Duty(nil), carried...)
		emitted := false
		for _, raw := range rt.Handle {
			var h struct {
				Handler  string     `json:"handler"`
				Routes   []rawRoute `json:"routes"`
				CatchAll bool       `json:"catch_all"`
			}
			if json.Unmarshal(raw, &h) != nil || h.Handler == "" {
				continue
			}
			if h.Handler == "subroute" {
				w.routes(h.Routes, m, chain, rid, depth+1)
				emitted = true
				continue
			}
			if h.Handler == "docker_routes" && !h.CatchAll {
				// the discovered routes, run where the handler stands;
				// what they leave goes on to the next handler
				w.routes(w.discovered, m, chain, rid, depth+1)
				continue
			}
			if h.Handler == "docker_routes" {
				r := Route{Server: w.server, Listen: w.listen, ID: rid, Source: "discovery", Match: m,
					Duties: append(chain, Duty{Name: "docker_routes", Detail: "catch-all: 404 no_route"})}
				if r.Match == nil {
					r.Match = []string{}
				}
				w.out = append(w.out, r)
				emitted = true
				break
			}
			d := Duty{Name: h.Handler, Detail: dutyDetail(h.Handler, raw)}
			chain = append(chain, d)
			if terminal[h.Handler] {
				r := Route{Server: w.server, Listen: w.listen, ID: rid, Source: source(rid), Match: m, Duties: chain}
				if h.Handler == "reverse_proxy" {
					r.Upstreams = upstreams(raw)
				}
				if r.Match == nil {
					r.Match = []string{}
				}
				w.out = append(w.out, r)
				emitted = true
				break
			}
		}
		if !emitted && len(rt.Match) == 0 && !rt.Terminal {
			carried = chain
		}
		if rt.Terminal && len(rt.Match) == 0 {
			break
		}
	}
}

func source(id string) string {
	if strings.HasPrefix(id, "docker:") {
		return "discovery"
	}
	return "config"
}

// DescribeMatch renders a matcher set list (OR of ANDs) as text: "host
// a.example & path /api/*" (the dashboard's routes, the adapter's warnings).
func DescribeMatch(sets []map[string]json.RawMessage) string {
	parts := make([]string, 0, len(sets))
	for _, set := range sets {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var and []string
		for _, k := range keys {
			and = append(and, k+" "+matcherValue(set[k]))
		}
		parts = append(parts, strings.Join(and, " & "))
	}
	return strings.Join(parts, " | ")
}

func matcherValue(raw json.RawMessage) string {
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, ",")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj map[string]any
	if json.Unmarshal(raw, &obj) == nil {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+short(fmt.Sprint(obj[k])))
		}
		return strings.Join(kv, " ")
	}
	return short(string(raw))
}

func short(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// upstreams are a reverse_proxy handler's dial addresses, read with
// Caddy's own handler type.
func upstreams(raw json.RawMessage) []string {
	var rp reverseproxy.Handler
	if json.Unmarshal(raw, &rp) != nil {
		return nil
	}
	var out []string
	for _, u := range rp.Upstreams {
		out = append(out, u.Dial)
	}
	if len(rp.DynamicUpstreamsRaw) > 0 {
		var src struct {
			Source string `json:"source"`
		}
		_ = json.Unmarshal(rp.DynamicUpstreamsRaw, &src)
		out = append(out, "dynamic:"+src.Source)
	}
	return out
}

// describers summarize a duty's JSON config; each is the owning module's
// own (it decodes its own config type), so the dashboard keeps no copy of
// another module's configuration.
var describers = map[string]func(json.RawMessage) string{
	"jwt_auth":      caddyjwt.DescribeConfig,
	"rbac":          caddyrbac.DescribeConfig,
	"permission":    caddypermcache.DescribeConfig,
	"audit":         caddyaudit.DescribeConfig,
	"path_guard":    caddypathguard.DescribeConfig,
	"openapi":       caddyopenapi.DescribeConfig,
	"quota":         caddyquota.DescribeConfig,
	"rate_limit":    describeRateLimit,
	"docker_answer": caddydocker.DescribeAnswer,
	"static_response": func(raw json.RawMessage) string {
		var h caddyhttp.StaticResponse
		if json.Unmarshal(raw, &h) != nil {
			return ""
		}
		return h.StatusCode.String()
	},
}

// dutyDetail is a short, secret-free description of a handler's settings.
func dutyDetail(name string, raw json.RawMessage) string {
	if d := describers[name]; d != nil {
		return short(d(raw))
	}
	return ""
}

// describeRateLimit lists a rate_limit handler's zones as events/window,
// read with caddy-ratelimit's own handler type.
func describeRateLimit(raw json.RawMessage) string {
	var h caddyrl.Handler
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	keys := make([]string, 0, len(h.RateLimits))
	for k := range h.RateLimits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		z := h.RateLimits[k]
		parts = append(parts, fmt.Sprintf("%d/%s", z.MaxEvents, durationText(time.Duration(z.Window).String())))
	}
	return strings.Join(parts, ", ")
}

func durationText(w string) string {
	d, err := time.ParseDuration(w)
	switch {
	case err != nil || d <= 0:
		return w
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
