package caddyrbac

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// decisionsVec is global, so its counts survive config reloads; every
// config's registry gets it registered (Caddy makes a new registry per
// config load).
var decisionsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "gateway", Subsystem: "rbac", Name: "decisions_total",
	Help: "rbac decisions by result (allow, deny_role, deny_scope, unauthenticated) and dry_run: \"true\" for handlers in dry run, whose denials were not enforced.",
}, []string{"dry_run", "result"})

func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	return metrics.Register(reg, decisionsVec)
}

// decisionCounters are the children of decisionsVec, resolved once so the
// request path does no label lookups.
type decisionCounters [len(resultNames)]prometheus.Counter

func newDecisionCounters(dryRun bool) decisionCounters {
	var c decisionCounters
	for i, name := range resultNames {
		c[i] = decisionsVec.WithLabelValues(strconv.FormatBool(dryRun), name)
	}
	return c
}

func (c *decisionCounters) inc(r Result) {
	if int(r) < len(c) && c[r] != nil {
		c[r].Inc()
	}
}

// ReadStats returns rbac's decisions by result (allow, deny_role,
// deny_scope, unauthenticated), totals since the process started. The
// decisions of handlers in dry run are under "dry_run_" + result, so that
// denials counts only what was enforced.
func ReadStats() map[string]float64 {
	out := map[string]float64{}
	metrics.Each(decisionsVec, func(l map[string]string, v float64) {
		key := l["result"]
		if l["dry_run"] == "true" {
			key = "dry_run_" + key
		}
		out[key] += v
	})
	return out
}
