package caddydocker

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/apigate/gateway/caddyh1"
	"github.com/apigate/gateway/identity"
)

func init() {
	caddy.RegisterModule(new(Selection))
}

// Selection is the selection policy of discovered routes (module
// http.reverse_proxy.selection_policies.docker): round robin over the
// replicas the docker upstream source gives, as Caddy's round_robin
// does; and, while the service runs a canary release, the split between
// its versions. It is the one place the split is decided: Caddy's
// reverse_proxy and the fast path both call Select with the request (its
// variables and identity) and the response writer (for the sticky
// cookie), so both paths split traffic alike. It also sets the answer
// observer (caddyh1.Observe) through which the release's windows count
// what each side answered, on either path.
//
// A policy rather than the upstream source decides because choosing a
// version may set a cookie, and only Select is given the response
// writer.
type Selection struct {
	// Server is the HTTP server whose discovered routes use the pool.
	Server string `json:"server"`
	// Service is the service (gateway.name) whose replicas are chosen from.
	Service string `json:"service"`

	pool  *atomic.Pointer[poolState]
	rr    reverseproxy.RoundRobinSelection
	robin atomic.Uint32
}

// CaddyModule returns the Caddy module information.
func (*Selection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.docker",
		New: func() caddy.Module { return new(Selection) },
	}
}

// Provision binds the policy to its service's pool.
func (s *Selection) Provision(caddy.Context) error {
	if s.Server == "" || s.Service == "" {
		return fmt.Errorf("docker selection policy: server and service are required (got server %q, service %q)", s.Server, s.Service)
	}
	s.pool = poolOf(s.Server, s.Service)
	return nil
}

// Select returns an available replica: for a service without a release,
// the next in round robin; with one, the next of the side (canary or
// stable) the request goes to, else of the other side, else of a retired
// version. A retry stays on the side the request was sent to first.
func (s *Selection) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	st := s.pool.Load()
	if st == nil || st.split == nil {
		return s.rr.Select(pool, r, w)
	}
	rel := st.split.rel
	// one lookup of the variables table, then plain map operations
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	var side uint8
	// A retry's pool lacks the replicas the request failed on: only then
	// is there an earlier side to look up.
	retry := false
	if len(pool) < len(st.dials) {
		if prev, ok := vars[caddyh1.ObserverVar].(*dialWatch); ok && prev.side.rel == rel {
			retry = true
			if prev.side.canary {
				side = 1
			}
		}
	}
	if !retry && s.toCanary(rel, vars, r, w) {
		side = 1
	}
	order := [3]uint8{0, 2, 1} // stable, retired, canary
	if side == 1 {
		order = [3]uint8{1, 0, 2}
	}
	for _, try := range order {
		if u, watch := s.next(pool, st, try); u != nil {
			if vars != nil {
				vars[caddyh1.ObserverVar] = watch
			}
			return u
		}
	}
	return nil
}

// toCanary decides the request's side, and sets the sticky cookie when
// the client needs one.
func (s *Selection) toCanary(rel *release, vars map[string]any, r *http.Request, w http.ResponseWriter) bool {
	c := canaryClient{header: r.Header}
	spec := &rel.spec
	if spec.Sticky == CanaryStickySubject {
		if id, ok := identity.FromVars(vars); ok {
			c.subject = id.Subject
		}
	}
	if spec.Sticky != CanaryStickyNone && c.subject == "" {
		c.cookie = cookieToken(r.Header)
	}
	canary, token := spec.choose(int(rel.weight.Load()), rel.salt, c, newCookieToken)
	if token != "" && w != nil {
		w.Header().Add("Set-Cookie", setCookie(token, r.TLS != nil))
	}
	return canary
}

// maxSide bounds the replicas of one side that next chooses from (the
// first ones of the pool).
const maxSide = 64

// next returns the next available replica of one side (0 stable, 1
// canary, 2 retired), round robin, and its observer. The pool is the
// upstream source's: the state's replicas in their order, less those the
// request failed on, so one walk in step finds each one's side.
func (s *Selection) next(pool reverseproxy.UpstreamPool, st *poolState, side uint8) (*reverseproxy.Upstream, *dialWatch) {
	var at [maxSide]uint16 // positions in pool of the side's replicas
	var in [maxSide]int16  // their positions in st (-1: not there)
	k, j := 0, 0
	for i, u := range pool {
		if k == maxSide || i > 0xffff {
			break
		}
		pos := j
		for pos < len(st.dials) && st.dials[pos] != u.Dial {
			pos++
		}
		var sd uint8
		if pos < len(st.dials) {
			sd, j = st.sides[pos], pos+1
		} else {
			// a pool of another state (replaced in between)
			sd, pos = st.split.side(u.Dial), -1
		}
		if sd == side {
			if pos > 0x7fff {
				pos = -1
			}
			at[k], in[k] = uint16(i), int16(pos)
			k++
		}
	}
	if k == 0 {
		return nil, nil
	}
	start := int(s.robin.Add(1) % uint32(k))
	for i := range k {
		c := (start + i) % k
		if u := pool[at[c]]; u.Available() {
			if in[c] >= 0 {
				return u, st.watch[in[c]]
			}
			return u, st.split.rel.watchOf(u.Dial, side)
		}
	}
	return nil, nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Selection)(nil)
	_ reverseproxy.Selector = (*Selection)(nil)
)
