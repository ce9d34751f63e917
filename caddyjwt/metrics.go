package caddyjwt

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the module's Prometheus collectors, registered on the
// config's registry (and reused when a reload registers them again).
type metrics struct {
	verifications *prometheus.CounterVec
	cacheHits     prometheus.Counter
	cacheMisses   prometheus.Counter
	jwksFetches   *prometheus.CounterVec

	valid     prometheus.Counter
	missing   prometheus.Counter
	anonymous prometheus.Counter
}

const metricsNamespace = "gateway"

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: "jwt",
			Name:      "verifications_total",
			Help:      "Requests seen by jwt_auth, by result (valid, invalid, missing, anonymous) and reason.",
		}, []string{"result", "reason"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: "jwt",
			Name:      "cache_hits_total",
			Help:      "Tokens found in the verified-token cache.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: "jwt",
			Name:      "cache_misses_total",
			Help:      "Tokens not in the verified-token cache (fully verified).",
		}),
		jwksFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Subsystem: "jwt",
			Name:      "jwks_refreshes_total",
			Help:      "JWKS fetches, by URL and result (ok, error).",
		}, []string{"url", "result"}),
	}
	if reg != nil {
		m.verifications = register(reg, m.verifications)
		m.cacheHits = register(reg, m.cacheHits)
		m.cacheMisses = register(reg, m.cacheMisses)
		m.jwksFetches = register(reg, m.jwksFetches)
	}
	m.valid = m.verifications.WithLabelValues("valid", "ok")
	m.missing = m.verifications.WithLabelValues("missing", "missing token")
	m.anonymous = m.verifications.WithLabelValues("anonymous", "missing token")
	return m
}

// register registers c, or returns the collector already registered
// under the same name (Provision runs again on every config reload).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
	}
	return c
}
