package caddypermcache

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/identity"
)

// TestDryRun: in dry run the service's deny and on_error deny let the
// request through, record what would have been denied (for audit), and
// count it under dry_run="true"; nothing is recorded as a denial.
func TestDryRun(t *testing.T) {
	var down atomic.Bool
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, req CheckRequest) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if req.Path != "/allow" {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	h, _ := newHandler(t, svc, func(h *Handler) { h.DryRun = true })
	deniedDry := denialsVec.WithLabelValues(t.Name(), "deny", "true")
	unavailDry := denialsVec.WithLabelValues(t.Name(), "unavailable", "true")
	deniedEnforced := denialsVec.WithLabelValues(t.Name(), "deny", "false")

	for _, tc := range []struct {
		name, path      string
		down            bool
		wouldBy, reason string
		cache           string
	}{
		{name: "service denies (miss)", path: "/deny", wouldBy: "permission: service", reason: "permission denied", cache: "miss"},
		{name: "cached deny (hit)", path: "/deny", wouldBy: "permission: service", reason: "permission denied", cache: "hit"},
		{name: "service down, on_error deny", path: "/new", down: true, wouldBy: "permission: on_error deny", reason: "permission service unavailable", cache: "miss"},
		{name: "allowed", path: "/allow", cache: "miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down.Store(tc.down)
			d0, u0, e0 := counterValue(deniedDry), counterValue(unavailDry), counterValue(deniedEnforced)
			s0 := ReadStats()
			r := newRequest("GET", tc.path)
			expect(t, serve(t, h, r), allowed)
			by, reason := identity.WouldDeny(r)
			if by != tc.wouldBy || reason != tc.reason {
				t.Errorf("would deny %q %q, want %q %q", by, reason, tc.wouldBy, tc.reason)
			}
			if got := identity.PermissionCache(r); got != tc.cache {
				t.Errorf("permission cache %q, want %q", got, tc.cache)
			}
			wantD, wantU := d0, u0
			switch tc.reason {
			case deniedReason:
				wantD++
			case unavailReason:
				wantU++
			}
			if counterValue(deniedDry) != wantD || counterValue(unavailDry) != wantU || counterValue(deniedEnforced) != e0 {
				t.Errorf("denials deny/unavailable (dry run) %v/%v, want %v/%v; enforced deny %v, want %v",
					counterValue(deniedDry), counterValue(unavailDry), wantD, wantU, counterValue(deniedEnforced), e0)
			}
			// the dashboard's view: would-be denials apart from enforced ones
			s1 := ReadStats()
			if s1.WouldDeny-s0.WouldDeny != (wantD-d0)+(wantU-u0) || s1.Denied != s0.Denied || s1.Unavailable != s0.Unavailable {
				t.Errorf("ReadStats would_deny +%v denied +%v unavailable +%v", s1.WouldDeny-s0.WouldDeny, s1.Denied-s0.Denied, s1.Unavailable-s0.Unavailable)
			}
		})
	}
}

// TestDecidedBy: the decided_by of each way permission decides, and the
// cache status beside it.
func TestDecidedBy(t *testing.T) {
	var down atomic.Bool
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, req CheckRequest) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if req.Path != "/allow" {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	stale, clk := newHandler(t, svc, func(h *Handler) {
		h.CacheTTL, h.NegativeTTL = dur(time.Minute), dur(time.Minute)
		h.StaleIfError = caddy.Duration(time.Hour)
	})
	onErrAllow, _ := newHandler(t, svc, func(h *Handler) { h.OnError = "allow"; h.Route = "TestDecidedBy/allow" })

	for _, tc := range []struct {
		name      string
		h         *Handler
		path      string
		down      bool
		advance   time.Duration
		want      result
		decidedBy string
		cache     string
	}{
		{name: "service allows", h: stale, path: "/allow", want: allowed, decidedBy: "permission: service", cache: "miss"},
		{name: "cached allow", h: stale, path: "/allow", want: allowed, decidedBy: "permission: service", cache: "hit"},
		{name: "service denies", h: stale, path: "/deny", want: denied, decidedBy: "permission: service", cache: "miss"},
		{name: "stale allow", h: stale, path: "/allow", down: true, advance: 2 * time.Minute, want: allowed, decidedBy: "permission: stale_if_error", cache: "stale"},
		{name: "stale deny", h: stale, path: "/deny", down: true, want: denied, decidedBy: "permission: stale_if_error", cache: "stale"},
		{name: "on_error deny", h: stale, path: "/never", down: true, want: unavail, decidedBy: "permission: on_error deny", cache: "miss"},
		{name: "on_error allow", h: onErrAllow, path: "/never", down: true, want: allowed, decidedBy: "permission: on_error allow", cache: "miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down.Store(tc.down)
			clk.advance(tc.advance)
			r := newRequest("GET", tc.path)
			expect(t, serve(t, tc.h, r), tc.want)
			if got := identity.DecidedBy(r); got != tc.decidedBy {
				t.Errorf("decided_by %q, want %q", got, tc.decidedBy)
			}
			if got := identity.PermissionCache(r); got != tc.cache {
				t.Errorf("permission cache %q, want %q", got, tc.cache)
			}
		})
	}
}
