package caddydocker

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(Upstreams{})
}

// pools holds each discovered service's current replicas, keyed by
// server and service. The watcher replaces a pool whenever a replica
// starts, stops, turns unhealthy or healthy, or the service's canary
// release changes; the routes read it per request through Upstreams and
// the docker selection policy (policy.go), so none of these needs a
// config reload (a reload closes every client's idle keep-alive
// connection, and a non-idempotent request that races that close fails
// at the client).
var pools sync.Map // poolKey -> *atomic.Pointer[poolState]

type poolKey struct{ server, service string }

// poolState is one service's replicas and, when it runs a canary
// release, how they split between its versions: each replica's side and
// observer, in the order of dials (the order GetUpstreams keeps).
type poolState struct {
	dials []string
	split *split
	sides []uint8
	watch []*dialWatch
}

func newPoolState(dials []string, sp *split) *poolState {
	st := &poolState{dials: dials, split: sp}
	if sp != nil {
		st.sides = make([]uint8, len(dials))
		st.watch = make([]*dialWatch, len(dials))
		for i, d := range dials {
			st.sides[i] = sp.side(d)
			st.watch[i] = sp.rel.watchOf(d, st.sides[i])
		}
	}
	return st
}

func poolOf(server, service string) *atomic.Pointer[poolState] {
	k := poolKey{server, service}
	if v, ok := pools.Load(k); ok {
		return v.(*atomic.Pointer[poolState])
	}
	v, _ := pools.LoadOrStore(k, new(atomic.Pointer[poolState]))
	return v.(*atomic.Pointer[poolState])
}

// setPools publishes a plan's pools for server, with each service's
// canary split (nil: none), and calls changed for each service whose
// replicas changed (before: the previous ones). A pool that becomes empty
// keeps its last replicas: the plan then routes the service to a 503
// (no_healthy_upstream), and until that config applies, requests still go
// to the replicas that are leaving, which is better than to none.
func setPools(server string, plan map[string][]string, splits map[string]*split, changed func(service string, now, before []string)) {
	for svc, dials := range plan {
		if len(dials) == 0 {
			continue
		}
		p := poolOf(server, svc)
		var before []string
		sp := splits[svc]
		if old := p.Load(); old != nil {
			if slices.Equal(old.dials, dials) {
				if !old.split.equal(sp) {
					p.Store(newPoolState(old.dials, sp))
				}
				continue
			}
			before = old.dials
		}
		d := slices.Clone(dials)
		p.Store(newPoolState(d, sp))
		if changed != nil {
			changed(svc, d, before)
		}
	}
}

// PoolOf returns the replicas that server's routes to service use now.
func PoolOf(server, service string) []string {
	if p := poolOf(server, service).Load(); p != nil {
		return slices.Clone(p.dials)
	}
	return nil
}

// Upstreams is the reverse proxy's upstream source of discovered routes
// (module http.reverse_proxy.upstreams.docker): the current replicas of
// one service, as the docker app last saw them. A retry never goes back
// to a replica that already failed the request, unless it is the only one.
type Upstreams struct {
	// Server is the HTTP server whose discovered routes use the pool.
	Server string `json:"server"`
	// Service is the service (gateway.name) whose replicas are used.
	Service string `json:"service"`

	pool *atomic.Pointer[poolState]
}

// CaddyModule returns the Caddy module information.
func (Upstreams) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.docker",
		New: func() caddy.Module { return new(Upstreams) },
	}
}

// Provision binds the source to its pool.
func (u *Upstreams) Provision(caddy.Context) error {
	if u.Server == "" || u.Service == "" {
		return fmt.Errorf("docker upstreams: server and service are required (got server %q, service %q)", u.Server, u.Service)
	}
	u.pool = poolOf(u.Server, u.Service)
	return nil
}

// triedVar is the request variable listing the replicas a request failed on.
const triedVar = "gateway.docker_tried"

// GetUpstreams returns the service's replicas, minus those this request
// already failed on (all of them if that leaves none). The Upstream values
// are new for each request: the reverse proxy writes to them (its host
// table entry, health policy) while it serves, so sharing them between
// concurrent requests would be a data race.
func (u *Upstreams) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	p := u.pool.Load()
	if p == nil {
		return nil, nil
	}
	dials := p.dials
	tried, _ := caddyhttp.GetVar(r.Context(), triedVar).([]string)
	out := make([]*reverseproxy.Upstream, 0, len(dials))
	for _, d := range dials {
		if !slices.Contains(tried, d) {
			out = append(out, &reverseproxy.Upstream{Dial: d})
		}
	}
	if len(out) == 0 {
		for _, d := range dials {
			out = append(out, &reverseproxy.Upstream{Dial: d})
		}
	}
	return out, nil
}

// ResetCache is called before a retry: it records the replica that just
// failed, so that the retry goes to another one.
func (u *Upstreams) ResetCache(r *http.Request) error {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return nil
	}
	last, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	if last == "" {
		return nil
	}
	tried, _ := caddyhttp.GetVar(r.Context(), triedVar).([]string)
	caddyhttp.SetVar(r.Context(), triedVar, append(tried, last))
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner                  = (*Upstreams)(nil)
	_ reverseproxy.CachingUpstreamSource = (*Upstreams)(nil)
)
