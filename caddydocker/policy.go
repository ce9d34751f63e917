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
	sp := st.split
	rel := sp.rel
	// one lookup of the variables table, then plain map operations
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	side := 0
	switch prev := vars[caddyh1.ObserverVar]; {
	case prev == any(rel.obs[1]):
		side = 1
	case prev == any(rel.obs[0]):
	default:
		if s.toCanary(rel, vars, r, w) {
			side = 1
		}
	}
	order := [3]int{0, 2, 1} // stable, retired, canary
	if side == 1 {
		order = [3]int{1, 0, 2}
	}
	for _, try := range order {
		if u := s.next(pool, sp, try); u != nil {
			if try == 2 {
				try = 0 // retired versions count on the stable side
			}
			if vars != nil {
				vars[caddyh1.ObserverVar] = rel.obs[try]
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
		if id, ok := vars[identity.VarIdentity].(*identity.Identity); ok && id != nil {
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
// canary, 2 retired), round robin.
func (s *Selection) next(pool reverseproxy.UpstreamPool, sp *split, side int) *reverseproxy.Upstream {
	var idx [maxSide]uint16 // positions in pool of the side's replicas
	k := 0
	for i, u := range pool {
		if k < maxSide && i <= 0xffff && sp.side(u.Dial) == side {
			idx[k] = uint16(i)
			k++
		}
	}
	if k == 0 {
		return nil
	}
	start := int(s.robin.Add(1) % uint32(k))
	for i := range k {
		if u := pool[idx[(start+i)%k]]; u.Available() {
			return u
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*Selection)(nil)
	_ reverseproxy.Selector = (*Selection)(nil)
)
