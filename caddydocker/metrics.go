package caddydocker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	gwmetrics "github.com/apigate/gateway/internal/metrics"
)

// metrics are process-wide: the watcher they describe outlives config
// reloads, so they are created once and registered on every new registry.
type metrics struct {
	containers    *prometheus.GaugeVec
	routes        prometheus.Gauge
	applies       *prometheus.CounterVec
	applyDuration prometheus.Histogram
	errors        *prometheus.CounterVec
	events        prometheus.Counter
	// canary releases
	canaryRollbacks *prometheus.CounterVec
	canaryWeight    *prometheus.GaugeVec
}

var (
	metricsOnce sync.Once
	gm          *metrics
)

func globalMetrics() *metrics {
	metricsOnce.Do(func() {
		ns, sub := "gateway", "docker"
		gm = &metrics{
			containers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Namespace: ns, Subsystem: sub, Name: "containers",
				Help: "Opted-in running containers seen at the last list, by state (routed, invalid, starting, unhealthy, stopping, local_only).",
			}, []string{"state"}),
			routes: prometheus.NewGauge(prometheus.GaugeOpts{
				Namespace: ns, Subsystem: sub, Name: "routes",
				Help: "Discovered routes in the route set that applied last.",
			}),
			applies: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "applies_total",
				Help: "Route set applications through the admin API, by result (changed, unchanged, error).",
			}, []string{"result"}),
			applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
				Namespace: ns, Subsystem: sub, Name: "apply_duration_seconds",
				Help:    "Time to apply a changed route set (admin API call including Caddy's reload).",
				Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
			}),
			errors: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "errors_total",
				Help: "Errors by kind (list, events, apply, state_file, labels).",
			}, []string{"kind"}),
			events: prometheus.NewCounter(prometheus.CounterOpts{
				Namespace: ns, Subsystem: sub, Name: "events_total",
				Help: "Container events received that may change routes.",
			}),
			canaryRollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: ns, Subsystem: "canary", Name: "rollbacks_total",
				Help: "Canary releases this gateway rolled back because their answers broke a limit, by service.",
			}, []string{"service"}),
			canaryWeight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Namespace: ns, Subsystem: "canary", Name: "weight",
				Help: "The current canary's share of its service's requests, in percent, by service (services running a release).",
			}, []string{"service"}),
		}
	})
	return gm
}

// register registers the collectors on reg, reusing collectors that are
// already registered there.
func (m *metrics) register(reg *prometheus.Registry) error {
	return gwmetrics.Register(reg, m.containers, m.routes, m.applies, m.applyDuration, m.errors, m.events,
		m.canaryRollbacks, m.canaryWeight)
}

// ReadStats returns the discovery counters as the dashboard shows them:
// containers_<state>, routes, errors_<kind>, applies_<result>.
func ReadStats() map[string]float64 {
	m := globalMetrics()
	out := map[string]float64{}
	gwmetrics.Each(m.containers, func(l map[string]string, v float64) { out["containers_"+l["state"]] += v })
	gwmetrics.Each(m.routes, func(_ map[string]string, v float64) { out["routes"] += v })
	gwmetrics.Each(m.errors, func(l map[string]string, v float64) { out["errors_"+l["kind"]] += v })
	gwmetrics.Each(m.applies, func(l map[string]string, v float64) { out["applies_"+l["result"]] += v })
	gwmetrics.Each(m.canaryRollbacks, func(_ map[string]string, v float64) { out["canary_rollbacks"] += v })
	return out
}
