package caddyaudit

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// Process-wide collectors. Workers outlive config reloads, and Caddy makes
// a new registry for every config, so the collectors are global and are
// registered on each new registry (registerMetrics).
var (
	metricLabels = []string{"sink", "type"}
	mEnqueued    = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_enqueued_total", Help: "Audit events handed to a sink's queue."}, metricLabels)
	mSent = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_sent_total", Help: "Audit events a sink accepted."}, metricLabels)
	mRetried = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_retried_total", Help: "Audit events sent again after a failed batch."}, metricLabels)
	mSpooled = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_spooled_total", Help: "Audit events written to the disk spool."}, metricLabels)
	mDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_dropped_total", Help: "Audit events lost (each one is also logged)."}, metricLabels)
	mPoisoned = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "events_poisoned_total", Help: "Audit events in batches a sink refused for good (4xx)."}, metricLabels)
	mCorrupt = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "spool_corrupt_bytes_total", Help: "Bytes skipped in the spool because they failed their checks."}, metricLabels)
	mLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "batch_duration_seconds", Help: "Time to send one batch to a sink (each attempt).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, metricLabels)
	mDepth = &depthCollector{desc: prometheus.NewDesc("gateway_audit_queue_depth",
		"Audit events waiting in a sink's in-memory queue.", metricLabels, nil)}
)

type depthCollector struct{ desc *prometheus.Desc }

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }
func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range liveWorkers() {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(len(w.q)), w.cfg.Name, w.cfg.Type)
	}
}

// registerMetrics registers the audit collectors on reg; registering twice
// on one registry is fine.
func registerMetrics(reg *prometheus.Registry) error {
	return metrics.Register(reg, mEnqueued, mSent, mRetried, mSpooled, mDropped, mPoisoned, mCorrupt, mLatency, mDepth)
}

// sinkMetrics are one sink's counters: Prometheus children, plus plain
// atomics for Stats.
type sinkMetrics struct {
	enqueued, sent, retried, spooled, dropped, poisoned, corrupt prometheus.Counter
	latency                                                      prometheus.Observer

	enqueuedN, sentN, retriedN, spooledN, droppedN, poisonedN atomic.Int64
}

var (
	sinkMetricsMu sync.Mutex
	sinkMetricsBy = map[[2]string]*sinkMetrics{}
)

// metricsFor returns the counters of a sink name (shared by the workers
// of successive configs, so totals keep counting across reloads).
func metricsFor(name, typ string) *sinkMetrics {
	sinkMetricsMu.Lock()
	defer sinkMetricsMu.Unlock()
	k := [2]string{name, typ}
	if m, ok := sinkMetricsBy[k]; ok {
		return m
	}
	m := &sinkMetrics{
		enqueued: mEnqueued.WithLabelValues(name, typ),
		sent:     mSent.WithLabelValues(name, typ),
		retried:  mRetried.WithLabelValues(name, typ),
		spooled:  mSpooled.WithLabelValues(name, typ),
		dropped:  mDropped.WithLabelValues(name, typ),
		poisoned: mPoisoned.WithLabelValues(name, typ),
		corrupt:  mCorrupt.WithLabelValues(name, typ),
		latency:  mLatency.WithLabelValues(name, typ),
	}
	sinkMetricsBy[k] = m
	return m
}
