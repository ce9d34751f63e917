package fastpath

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/caddyfileerr"
)

// ServerStatus says whether the fast path serves a server of the running
// config, and why not when it does not.
type ServerStatus struct {
	Server string `json:"server"`
	On     bool   `json:"on"`
	// Reason is every server option that keeps an off server on Caddy's
	// path, joined with "; ".
	Reason string `json:"reason,omitempty"`
	// Routes are the server's top-level routes, each with how it runs
	// (once the server listens).
	Routes []RouteStatus `json:"routes,omitempty"`
	// Requests the fast path served on this server since the process
	// started (gateway_fastpath_requests_total).
	Requests float64 `json:"requests"`
	// Of the running config: requests the plan served (HTTP/1.1 and
	// HTTP/2), malformed ones it refused, and connections it handed to
	// Caddy's server (upgrades, CONNECT, HTTP/2 where the server does not
	// allow it on the plan).
	Served    int64 `json:"served"`
	Refused   int64 `json:"refused"`
	HandedOff int64 `json:"handed_off"`
	// Requests the fast path's connections served through Caddy's server
	// handler (gateway_fastpath_delegated_total), of the running config.
	Delegated int64 `json:"delegated"`
}

// RouteStatus is how one of a server's top-level routes runs.
type RouteStatus struct {
	// Route is the route's index in the server's routes.
	Route string `json:"route"`
	// Plan: the route runs on the plan (false: on Caddy's path, with
	// Reason).
	Plan   bool   `json:"plan"`
	Reason string `json:"reason,omitempty"`
	// AsCaddy are the handler modules of the route, at any depth, that the
	// plan runs as Caddy's route chain calls them (at their own cost, with
	// the plan around them) rather than as steps of its own.
	AsCaddy []string `json:"as_caddy_calls_it,omitempty"`
}

// describeRoutes says how each top-level route of a plan runs.
func describeRoutes(routes []*route) []RouteStatus {
	out := make([]RouteStatus, len(routes))
	for i, rt := range routes {
		rs := RouteStatus{Route: strconv.Itoa(i), Plan: true}
		var walk func(steps []step)
		walk = func(steps []step) {
			for _, s := range steps {
				switch s := s.(type) {
				case *subroute:
					for _, r := range s.routes {
						walk(r.steps)
					}
				case *delegated:
					name := moduleID(s.h)
					if s.why != "" {
						name += " (" + s.why + ")"
					}
					if !slices.Contains(rs.AsCaddy, name) {
						rs.AsCaddy = append(rs.AsCaddy, name)
					}
				}
			}
		}
		walk(rt.steps)
		out[i] = rs
	}
	return out
}

var (
	statusMu sync.Mutex
	statuses = map[string]statusEntry{}
)

type statusEntry struct {
	owner  *ListenerWrapper
	on     bool
	why    string
	routes []RouteStatus
}

func (lw *ListenerWrapper) setStatus(name string, on bool, reason string, routes []RouteStatus) {
	statusMu.Lock()
	statuses[name] = statusEntry{owner: lw, on: on, why: reason, routes: routes}
	statusMu.Unlock()
	v := 0.0
	if on {
		v = 1
	}
	onGauge.WithLabelValues(name).Set(v)
}

// Cleanup forgets the wrapper's server status, unless a newer config's
// wrapper of that server already replaced it.
func (lw *ListenerWrapper) Cleanup() error {
	if lw.srv == nil {
		return nil
	}
	statusMu.Lock()
	if e, ok := statuses[lw.srv.Name()]; ok && e.owner == lw {
		delete(statuses, lw.srv.Name())
		onGauge.DeleteLabelValues(lw.srv.Name())
	}
	statusMu.Unlock()
	return nil
}

// Status returns, for each server with the apigate wrapper in the running
// config, whether the fast path serves it (the dashboard shows it).
func Status() []ServerStatus {
	statusMu.Lock()
	out := make([]ServerStatus, 0, len(statuses))
	for name, e := range statuses {
		st := ServerStatus{Server: name, On: e.on, Reason: e.why, Routes: e.routes}
		if s := e.owner.stats; s != nil {
			st.Served, st.Refused, st.HandedOff = s.served.Load(), s.refused.Load(), s.handoffs.Load()
			st.Delegated = s.delegated.Load()
		}
		out = append(out, st)
	}
	statusMu.Unlock()
	for i := range out {
		if c, err := requestsTotal.GetMetricWithLabelValues(out[i].Server); err == nil {
			out[i].Requests = counterValue(c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}

func init() {
	caddyfileerr.AddReporter(Report)
}

// Report says, for each HTTP server of an adapted config (JSON) that has
// the apigate listener wrapper, whether the fast path will serve it: on,
// with how many routes run on the plan, or off, with every reason. The
// Caddyfile adapter adds it to its warnings, so `caddy adapt`, `caddy
// validate`, `caddy run` and reloads print it.
func Report(config []byte, _ *caddyfileerr.Source) []caddyconfig.Warning {
	names, servers := caddyfileerr.Servers(config)
	var out []caddyconfig.Warning
	for _, name := range names {
		var srv caddyhttp.Server
		if json.Unmarshal(servers[name], &srv) != nil || !hasApigate(srv.ListenerWrappersRaw) {
			continue
		}
		msg := fmt.Sprintf("fast path on for server %s: %d of %d routes run on the plan", name, len(srv.Routes), len(srv.Routes))
		if r := serverReasons(&srv); len(r) > 0 {
			msg = fmt.Sprintf("fast path off for server %s: %s", name, strings.Join(r, "; "))
		}
		out = append(out, caddyconfig.Warning{Directive: "apigate", Message: msg})
	}
	return out
}

func hasApigate(wrappers []json.RawMessage) bool {
	for _, w := range wrappers {
		var m struct {
			Wrapper string `json:"wrapper"`
		}
		if json.Unmarshal(w, &m) == nil && m.Wrapper == "apigate" {
			return true
		}
	}
	return false
}
