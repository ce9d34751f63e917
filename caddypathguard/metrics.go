package caddypathguard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The actions of gateway_path_guard_total.
const (
	ActionPassed     = "passed"
	ActionNormalized = "normalized"
	ActionRejected   = "rejected"
)

// totalVec is global, so its counts survive config reloads; every
// config's registry gets it registered.
var totalVec = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "gateway", Subsystem: "path_guard", Name: "total",
	Help: "Requests path_guard judged, by action: passed (the path was normal), normalized (forwarded on the normalized path), rejected (answered 400 ambiguous_path).",
}, []string{"action"})

func registerMetrics(reg *prometheus.Registry) error {
	return metrics.Register(reg, totalVec)
}

// counters are totalVec's children, resolved once so the request path
// does no label lookup.
type counters struct {
	passed, normalized, rejected prometheus.Counter
}

func newCounters() counters {
	return counters{
		passed:     totalVec.WithLabelValues(ActionPassed),
		normalized: totalVec.WithLabelValues(ActionNormalized),
		rejected:   totalVec.WithLabelValues(ActionRejected),
	}
}
