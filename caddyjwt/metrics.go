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

// Stats is a snapshot of jwt_auth's counters, totals since the process
// started (for the dashboard).
type Stats struct {
	// Results counts requests by "result: reason" (valid: ok, invalid:
	// token expired, missing: missing token, anonymous: missing token).
	Results     map[string]float64 `json:"results"`
	Valid       float64            `json:"valid"`
	Rejected    float64            `json:"rejected"` // invalid or missing
	CacheHits   float64            `json:"cache_hits"`
	CacheMisses float64            `json:"cache_misses"`
}

// ReadStats returns jwt_auth's counters.
func ReadStats() Stats {
	s := Stats{Results: map[string]float64{}}
	metrics.Each(verificationsVec, func(l map[string]string, v float64) {
		s.Results[l["result"]+": "+l["reason"]] += v
		switch l["result"] {
		case "valid":
			s.Valid += v
		case "invalid", "missing":
			s.Rejected += v
		}
	})
	metrics.Each(cacheHitsTotal, func(_ map[string]string, v float64) { s.CacheHits += v })
	metrics.Each(cacheMissesTotal, func(_ map[string]string, v float64) { s.CacheMisses += v })
	return s
}
