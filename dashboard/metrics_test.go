package dashboard

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registry builds collectors with the names and labels the gateway's
// modules use, on a fresh registry.
func registry(t *testing.T, withHTTP bool) (*prometheus.Registry, map[string]*prometheus.CounterVec, *prometheus.GaugeVec) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	vec := func(name string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name}, labels)
		reg.MustRegister(v)
		return v
	}
	c := map[string]*prometheus.CounterVec{
		"jwt":      vec("gateway_jwt_verifications_total", "result", "reason"),
		"jwthit":   vec("gateway_jwt_cache_hits_total"),
		"jwtmiss":  vec("gateway_jwt_cache_misses_total"),
		"rbac":     vec("gateway_rbac_decisions_total", "result"),
		"permhit":  vec("gateway_permission_cache_hits_total", "route", "decision"),
		"permmiss": vec("gateway_permission_cache_misses_total", "route"),
		"stale":    vec("gateway_permission_stale_serves_total", "route"),
		"onerr":    vec("gateway_permission_on_error_total", "route", "action"),
		"enq":      vec("gateway_audit_events_enqueued_total", "sink", "type"),
		"sent":     vec("gateway_audit_events_sent_total", "sink", "type"),
		"dropped":  vec("gateway_audit_events_dropped_total", "sink", "type"),
	}
	if withHTTP {
		c["http"] = vec("caddy_http_requests_total", "server", "handler")
	}
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gateway_audit_queue_depth", Help: "d"}, []string{"sink", "type"})
	reg.MustRegister(depth)
	return reg, c, depth
}

func TestReadCounters(t *testing.T) {
	t.Run("every duty", func(t *testing.T) {
		reg, c, depth := registry(t, false)
		c["jwt"].WithLabelValues("valid", "ok").Add(90)
		c["jwt"].WithLabelValues("invalid", "token expired").Add(4)
		c["jwt"].WithLabelValues("missing", "missing token").Add(6)
		c["jwthit"].WithLabelValues().Add(75)
		c["jwtmiss"].WithLabelValues().Add(25)
		c["rbac"].WithLabelValues("allow").Add(80)
		c["rbac"].WithLabelValues("deny_role").Add(7)
		c["rbac"].WithLabelValues("deny_scope").Add(3)
		c["permhit"].WithLabelValues("r", "allow").Add(30)
		c["permhit"].WithLabelValues("r", "deny").Add(10)
		c["permmiss"].WithLabelValues("r").Add(10)
		c["stale"].WithLabelValues("r").Add(2)
		c["onerr"].WithLabelValues("r", "deny").Add(1)
		c["enq"].WithLabelValues("a", "http").Add(100)
		c["enq"].WithLabelValues("b", "file").Add(100)
		c["sent"].WithLabelValues("a", "http").Add(95)
		c["dropped"].WithLabelValues("b", "file").Add(1)
		depth.WithLabelValues("a", "http").Set(5)

		got, err := ReadCounters(reg)
		if err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			name      string
			got, want float64
		}{
			{"requests (busiest audit sink)", got.Requests, 100},
			{"denials", got.Denials, 4 + 6 + 7 + 3 + 10 + 1},
			{"jwt valid", got.JWT.Valid, 90},
			{"jwt rejected", got.JWT.Rejected, 10},
			{"jwt expired", got.JWT.Results["invalid: token expired"], 4},
			{"jwt hit rate", *got.JWT.CacheHitRate, 0.75},
			{"perm hit rate", *got.Permission.CacheHitRate, 0.8},
			{"perm stale", got.Permission.StaleServes, 2},
			{"audit backlog", got.Audit.Backlog, 5},
			{"audit sent", got.Audit.Sent, 95},
			{"audit dropped", got.Audit.Dropped, 1},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
			}
		}
		if got.RequestsSource != "gateway_audit_events_enqueued_total" {
			t.Errorf("requests source %q", got.RequestsSource)
		}
		if len(got.Audit.Sinks) != 2 || got.Audit.Sinks[0].Name != "a" || got.Audit.Sinks[0].QueueDepth != 5 {
			t.Errorf("sinks = %+v", got.Audit.Sinks)
		}
	})
	t.Run("caddy http metrics win for requests", func(t *testing.T) {
		reg, c, _ := registry(t, true)
		c["http"].WithLabelValues("gw", "reverse_proxy").Add(42)
		c["enq"].WithLabelValues("a", "http").Add(10)
		got, _ := ReadCounters(reg)
		if got.Requests != 42 || got.RequestsSource != "caddy_http_requests_total" {
			t.Errorf("requests = %v from %s", got.Requests, got.RequestsSource)
		}
	})
	t.Run("nothing registered", func(t *testing.T) {
		got, err := ReadCounters(nil)
		if err != nil || got.Requests != 0 || got.JWT.CacheHitRate != nil || got.Audit.Sinks == nil {
			t.Errorf("ReadCounters(nil) = %+v, %v", got, err)
		}
	})
}

func BenchmarkReadCounters(b *testing.B) {
	reg := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_jwt_verifications_total", Help: "h"}, []string{"result", "reason"})
	reg.MustRegister(v)
	for _, r := range []string{"a", "b", "c", "d", "e"} {
		v.WithLabelValues("invalid", r).Inc()
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadCounters(reg); err != nil {
			b.Fatal(err)
		}
	}
}
