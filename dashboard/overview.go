package dashboard

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddyoidc"
	"github.com/apigate/gateway/caddyopenapi"
	"github.com/apigate/gateway/caddypermcache"
	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/caddyquota/quotausage"
	"github.com/apigate/gateway/fastpath"
)

// Sources are where the dashboard reads from. Every field is optional: a
// missing source shows as "not configured" on the page.
type Sources struct {
	// HTTPConfig returns the running config's apps.http JSON.
	HTTPConfig func(ctx context.Context) ([]byte, error)
	// Counters returns the modules' counters.
	Counters func() Counters
	// Discovery returns the docker app's snapshot, if a docker app runs.
	Discovery func() (caddydocker.Snapshot, bool)
	// DiscoveredRoutes returns the routes a server's docker_routes
	// handlers run (not in the config's JSON).
	DiscoveredRoutes func(server string) []json.RawMessage
	// Events returns up to n recent audit events, newest first.
	Events func(n int) []Event
	// FastPath returns, per server with the apigate listener wrapper,
	// whether the fast path serves it (docs/fastpath.md).
	FastPath func() []FastPathServer
	// Quota returns the quota's state: the top consumers, those near
	// their limit, the fleet's shared counts.
	Quota func() QuotaStats
	// OpenAPI returns the summary of each OpenAPI document the openapi
	// handlers validate against (docs/caddyopenapi.md).
	OpenAPI func() []caddyopenapi.Summary
	// Sessions returns oidc_login's counters (docs/oidc.md).
	Sessions func() SessionStats
}

// SessionStats is oidc_login's snapshot: logins by result, sessions held,
// checks, refreshes and revocations (docs/oidc.md).
type SessionStats = caddyoidc.Stats

// QuotaStats is the quota's snapshot (docs/caddyquota.md).
type QuotaStats = caddyquota.Stats

// FastPathServer is one server's fast path status: on, or off with the
// reason the config load logged, and its counts.
type FastPathServer = fastpath.ServerStatus

// Event is one recent audit event, as the audit module records it (see
// docs/caddyaudit.md): who, what, and the decision. It never holds a token
// or claims beyond the subject and roles.
type Event = caddyaudit.Event

// Overview is everything the page shows, in one JSON document.
type Overview struct {
	Time        time.Time  `json:"time"`
	RefreshMS   int64      `json:"refresh_ms"`
	Routes      []Route    `json:"routes"`
	RoutesError string     `json:"routes_error,omitempty"`
	Containers  Containers `json:"containers"`
	Counters    Counters   `json:"counters"`
	// RateLimited counts 429 answers among the recent audit events
	// (caddy-ratelimit has no metrics of its own).
	RateLimited   int     `json:"rate_limited_recent"`
	Events        []Event `json:"events"`
	EventsEnabled bool    `json:"events_enabled"`
	CountersError string  `json:"counters_error,omitempty"`
	// FastPath lists the servers with the apigate wrapper; empty when
	// none has it.
	FastPath []FastPathServer `json:"fast_path"`
	// Quota is the quota duty's state (enabled false without one).
	Quota QuotaStats `json:"quota"`
	// OpenAPI lists the OpenAPI documents in use, per operation the
	// requests and violations; empty when no openapi handler runs.
	OpenAPI []caddyopenapi.Summary `json:"openapi"`
	// Sessions is oidc_login's browser sessions (zero counts without one).
	Sessions SessionStats `json:"sessions"`
}

// Containers is the docker app's view: every opted-in container, routed or
// rejected with its label errors.
type Containers struct {
	// Enabled is false when no docker app runs.
	Enabled         bool        `json:"enabled"`
	Server          string      `json:"server,omitempty"`
	Engine          string      `json:"engine,omitempty"`
	EngineReachable bool        `json:"engine_reachable"`
	FromStateFile   bool        `json:"from_state_file,omitempty"`
	LastList        time.Time   `json:"last_list,omitzero"`
	LastApply       time.Time   `json:"last_apply,omitzero"`
	LastError       string      `json:"last_error,omitempty"`
	Warnings        []string    `json:"warnings,omitempty"`
	Routed          int         `json:"routed"`
	Rejected        int         `json:"rejected"`
	Items           []Container `json:"items"`
	// Fleet is discovery across hosts, when configured.
	Fleet *caddydocker.FleetStatus `json:"fleet,omitempty"`
	// Canaries are the canary releases in use: per service, the state,
	// the weight and each side's share, error rate and P99 in the window.
	Canaries []caddydocker.CanaryStatus `json:"canaries"`
	// Scope are the labels the app routes containers by; OutOfScope the
	// opted-in containers without them; Placement where site policies do
	// not cover the discovered routes.
	Scope      []string `json:"scope,omitempty"`
	OutOfScope int      `json:"out_of_scope,omitempty"`
	Placement  []string `json:"placement,omitempty"`
}

// Container is one discovered container.
type Container struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// State is routed, rejected (label errors), or why a valid container
	// takes no requests here: starting, unhealthy, stopping, local_only.
	State string `json:"state"`
	// Reason explains a state other than routed and rejected.
	Reason string `json:"reason,omitempty"`
	// Node is the fleet host the container runs on ("" = this host).
	Node     string                   `json:"node,omitempty"`
	Service  string                   `json:"service,omitempty"`
	Upstream string                   `json:"upstream,omitempty"`
	Routers  []caddydocker.Router     `json:"routers,omitempty"`
	Errors   []caddydocker.LabelError `json:"errors,omitempty"`
	Labels   map[string]string        `json:"labels"`
	Health   string                   `json:"health,omitempty"`
}

// ContainersFrom converts a docker app snapshot.
func ContainersFrom(s caddydocker.Snapshot, ok bool) Containers {
	c := Containers{Enabled: ok, Items: []Container{}, Canaries: []caddydocker.CanaryStatus{}}
	if !ok {
		return c
	}
	if s.Canaries != nil {
		c.Canaries = s.Canaries
	}
	c.Server, c.Engine, c.EngineReachable, c.FromStateFile = s.Server, s.Engine, s.EngineReachable, s.FromStateFile
	c.Scope, c.OutOfScope, c.Placement = s.Scope, s.OutOfScope, s.Placement
	c.LastList, c.LastApply, c.LastError, c.Warnings = s.LastList, s.LastApply, s.LastError, s.Warnings
	c.Fleet = s.Fleet
	for _, d := range s.Containers {
		it := Container{Name: d.Container.Name, ID: shortID(d.Container.ID), Health: d.Container.Health, Node: d.Container.Node, Labels: map[string]string{}}
		for k, v := range d.Container.Labels {
			if strings.HasPrefix(k, caddydocker.LabelPrefix) {
				it.Labels[k] = v
			}
		}
		if len(d.Errors) > 0 || d.Service == nil {
			it.State = "rejected"
			it.Errors = d.Errors
			c.Rejected++
		} else {
			it.State = d.State
			if it.State == "" {
				it.State = caddydocker.StateRouted
			}
			if it.State == caddydocker.StateRouted {
				c.Routed++
			} else {
				it.Reason = d.Reason
			}
			it.Service, it.Upstream, it.Routers = d.Service.Name, d.Service.Upstream, d.Service.Routers
		}
		c.Items = append(c.Items, it)
	}
	// Rejected first: they are what a user looks for.
	sort.SliceStable(c.Items, func(i, j int) bool {
		return c.Items[i].State == "rejected" && c.Items[j].State != "rejected"
	})
	return c
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Build assembles the overview from the sources.
func (s Sources) Build(ctx context.Context, refresh time.Duration, events int) Overview {
	o := Overview{Time: time.Now().UTC(), RefreshMS: refresh.Milliseconds(), Routes: []Route{}, Events: []Event{}, FastPath: []FastPathServer{}}
	if s.FastPath != nil {
		o.FastPath = append(o.FastPath, s.FastPath()...)
	}
	if s.Quota != nil {
		o.Quota = s.Quota()
	} else {
		o.Quota = QuotaStats{Decisions: map[string]float64{}, Top: []quotausage.Summary{}, NearLimit: []quotausage.Summary{}}
	}
	if s.Sessions != nil {
		o.Sessions = s.Sessions()
	} else {
		o.Sessions = SessionStats{Logins: map[string]float64{}, Checks: map[string]float64{}, Refreshes: map[string]float64{}, Revocations: map[string]float64{}}
	}
	o.OpenAPI = []caddyopenapi.Summary{}
	if s.OpenAPI != nil {
		o.OpenAPI = append(o.OpenAPI, s.OpenAPI()...)
	}
	o.Routes, o.RoutesError = s.routes(ctx)
	if s.Discovery != nil {
		o.Containers = ContainersFrom(s.Discovery())
	} else {
		o.Containers = ContainersFrom(caddydocker.Snapshot{}, false)
	}
	if s.Counters != nil {
		o.Counters = s.Counters()
	} else {
		o.Counters = CountersFrom(caddyjwt.Stats{}, nil, caddypermcache.Stats{}, nil, nil)
	}
	if s.Events != nil {
		o.EventsEnabled = true
		all := s.Events(256)
		for _, e := range all {
			if e.Status == 429 {
				o.RateLimited++
			}
		}
		if len(all) > events {
			all = all[:events]
		}
		o.Events = append(o.Events, all...)
	}
	return o
}

func (s Sources) routes(ctx context.Context) ([]Route, string) {
	if s.HTTPConfig == nil {
		return []Route{}, ""
	}
	raw, err := s.HTTPConfig(ctx)
	if err != nil {
		return []Route{}, err.Error()
	}
	rs, err := ExtractRoutesWith(raw, s.DiscoveredRoutes)
	if err != nil {
		return []Route{}, err.Error()
	}
	return rs, ""
}
