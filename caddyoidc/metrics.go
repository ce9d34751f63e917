package caddyoidc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The module's collectors, made once per process (their counts survive
// reloads) and registered on each config's registry.
var (
	loginsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "oidc", Name: "logins_total",
		Help: "Logins through the OpenID Provider that reached the callback, by result (success, state_mismatch, replayed, provider_error, exchange_failed, invalid_id_token, userinfo_failed, storage_failed).",
	}, []string{"result"})
	cachedSessions = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "gateway", Subsystem: "oidc", Name: "sessions",
		Help: "Login sessions this gateway holds in memory (the fleet's total is in the admin API, GET /gateway/sessions).",
	})
	checksVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "oidc", Name: "session_checks_total",
		Help: "Requests oidc_login checked, by result (session, no_session, csrf_refused, unavailable).",
	}, []string{"result"})
	refreshesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "oidc", Name: "refreshes_total",
		Help: "Token refreshes this gateway attempted, by result (ok, adopted: another gateway had refreshed, revoked: the provider refused, error).",
	}, []string{"result"})
	revocationsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "oidc", Name: "revocations_total",
		Help: "Sessions ended on the server, by cause (logout, backchannel, admin, refresh_refused, idle).",
	}, []string{"cause"})
)

func registerMetrics(reg *prometheus.Registry) error {
	return metrics.Register(reg, loginsVec, cachedSessions, checksVec, refreshesVec, revocationsVec)
}

// The login results (gateway_oidc_logins_total{result}).
const (
	loginSuccess         = "success"
	loginStateMismatch   = "state_mismatch"
	loginReplayed        = "replayed"
	loginProviderError   = "provider_error"
	loginExchangeFailed  = "exchange_failed"
	loginInvalidIDToken  = "invalid_id_token"
	loginUserinfoFailed  = "userinfo_failed"
	loginStorageFailed   = "storage_failed"
	loginProviderUnknown = "provider_unavailable"
)

// Stats is a snapshot of oidc_login's counters, totals since the process
// started, for the dashboard.
type Stats struct {
	// Logins counts callbacks by result.
	Logins map[string]float64 `json:"logins"`
	// Sessions is the sessions held in this gateway's memory.
	Sessions float64 `json:"sessions"`
	// Checks counts requests by result.
	Checks map[string]float64 `json:"checks"`
	// Refreshes counts token refreshes by result.
	Refreshes map[string]float64 `json:"refreshes"`
	// Revocations counts sessions ended on the server by cause.
	Revocations map[string]float64 `json:"revocations"`
}

// ReadStats returns oidc_login's counters.
func ReadStats() Stats {
	s := Stats{Logins: map[string]float64{}, Checks: map[string]float64{}, Refreshes: map[string]float64{}, Revocations: map[string]float64{}}
	for vec, m := range map[*prometheus.CounterVec]struct {
		label string
		into  map[string]float64
	}{loginsVec: {"result", s.Logins}, checksVec: {"result", s.Checks}, refreshesVec: {"result", s.Refreshes}, revocationsVec: {"cause", s.Revocations}} {
		metrics.Each(vec, func(l map[string]string, v float64) { m.into[l[m.label]] += v })
	}
	metrics.Each(cachedSessions, func(_ map[string]string, v float64) { s.Sessions = v })
	return s
}
