package caddyjwt

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The module's Prometheus collectors, made once per process so that their
// counts survive config reloads (which, with discovery, happen at every
// container change); each config's registry gets them registered.
var (
	verificationsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "jwt", Name: "verifications_total",
		Help: "Requests seen by jwt_auth, by result (valid, invalid, missing, anonymous) and reason.",
	}, []string{"result", "reason"})
	cacheHitsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "jwt", Name: "cache_hits_total",
		Help: "Tokens found in the verified-token cache.",
	})
	cacheMissesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "jwt", Name: "cache_misses_total",
		Help: "Tokens not in the verified-token cache (fully verified).",
	})
	jwksFetchesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "jwt", Name: "jwks_refreshes_total",
		Help: "JWKS fetches, by URL and result (ok, error).",
	}, []string{"url", "result"})
)

// jwtMetrics are the collectors and the children the request path uses,
// resolved once.
type jwtMetrics struct {
	verifications *prometheus.CounterVec
	cacheHits     prometheus.Counter
	cacheMisses   prometheus.Counter
	jwksFetches   *prometheus.CounterVec

	valid     prometheus.Counter
	missing   prometheus.Counter
	anonymous prometheus.Counter
}

// newMetrics registers the collectors on reg (a config's registry; nil: none).
func newMetrics(reg *prometheus.Registry) (*jwtMetrics, error) {
	if err := metrics.Register(reg, verificationsVec, cacheHitsTotal, cacheMissesTotal, jwksFetchesVec); err != nil {
		return nil, err
	}
	return &jwtMetrics{
		verifications: verificationsVec,
		cacheHits:     cacheHitsTotal,
		cacheMisses:   cacheMissesTotal,
		jwksFetches:   jwksFetchesVec,
		valid:         verificationsVec.WithLabelValues("valid", "ok"),
		missing:       verificationsVec.WithLabelValues("missing", "missing token"),
		anonymous:     verificationsVec.WithLabelValues("anonymous", "missing token"),
	}, nil
}
