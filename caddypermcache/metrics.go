package caddypermcache

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The collectors are global, so their counts survive config reloads; every
// config's registry gets them registered (Caddy makes a new registry per
// config load).
var (
	hitsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "cache_hits_total",
		Help: "Permission checks answered from a fresh cached decision.",
	}, []string{"route"})
	missesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "cache_misses_total",
		Help: "Permission checks that found no fresh decision and asked the service (or joined a call in flight).",
	}, []string{"route"})
	staleVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "stale_serves_total",
		Help: "Expired decisions served because the service failed (stale_if_error).",
	}, []string{"route"})
	errorsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "service_errors_total",
		Help: "Calls to the permission service that failed: timeout, unreachable, or an unusable answer.",
	}, []string{"route"})
	decisionsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "decisions_total",
		Help: "Requests by outcome: allow, deny, error_allow (on_error allow), error_deny (503).",
	}, []string{"route", "decision"})
	latencyVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "service_call_duration_seconds",
		Help:    "Duration of calls to the permission service, failed ones included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"route"})
)

var collectors = []prometheus.Collector{hitsVec, missesVec, staleVec, errorsVec, decisionsVec, latencyVec}

func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue // another permission handler of this config did it
			}
			return err
		}
	}
	return nil
}

// routeMetrics are one route's children, resolved once at Provision so the
// request path does no label lookups.
type routeMetrics struct {
	hits, misses, stale, errors                prometheus.Counter
	decAllow, decDeny, decErrAllow, decErrDeny prometheus.Counter
	latency                                    prometheus.Observer
}

func metricsFor(route string) routeMetrics {
	return routeMetrics{
		hits:        hitsVec.WithLabelValues(route),
		misses:      missesVec.WithLabelValues(route),
		stale:       staleVec.WithLabelValues(route),
		errors:      errorsVec.WithLabelValues(route),
		decAllow:    decisionsVec.WithLabelValues(route, "allow"),
		decDeny:     decisionsVec.WithLabelValues(route, "deny"),
		decErrAllow: decisionsVec.WithLabelValues(route, "error_allow"),
		decErrDeny:  decisionsVec.WithLabelValues(route, "error_deny"),
		latency:     latencyVec.WithLabelValues(route),
	}
}
