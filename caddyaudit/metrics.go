package caddyaudit

import (
	"sync"
	"sync/atomic"
	"time"

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
	mFull = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gateway", Subsystem: "audit",
		Name: "full_total", Help: "What on_full did when a sink had no room: blocked (an event waited for room and got it), " +
			"dropped_oldest (events dropped to make room), rejected (requests answered 503)."},
		[]string{"sink", "type", "action"})
	mBacklog = &backlogCollector{
		depth: prometheus.NewDesc("gateway_audit_queue_depth",
			"Audit events waiting in a sink's in-memory queue.", metricLabels, nil),
		age: prometheus.NewDesc("gateway_audit_backlog_age_seconds",
			"Age of the oldest audit event a sink has not delivered yet (0: none).", metricLabels, nil),
		spool: prometheus.NewDesc("gateway_audit_spool_bytes",
			"Bytes of undelivered audit events in a sink's disk spool.", metricLabels, nil),
	}
)

// on_full actions, the action label of gateway_audit_full_total.
const (
	actionBlocked       = "blocked"
	actionDroppedOldest = "dropped_oldest"
	actionRejected      = "rejected"
)

type backlogCollector struct{ depth, age, spool *prometheus.Desc }

func (d *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.depth
	ch <- d.age
	ch <- d.spool
}
func (d *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, w := range liveWorkers() {
		ch <- prometheus.MustNewConstMetric(d.depth, prometheus.GaugeValue, float64(len(w.q)), w.cfg.Name, w.cfg.Type)
		ch <- prometheus.MustNewConstMetric(d.age, prometheus.GaugeValue, w.backlogAge(now).Seconds(), w.cfg.Name, w.cfg.Type)
		ch <- prometheus.MustNewConstMetric(d.spool, prometheus.GaugeValue, float64(w.spoolBytes()), w.cfg.Name, w.cfg.Type)
	}
}

// registerMetrics registers the audit collectors on reg; registering twice
// on one registry is fine.
func registerMetrics(reg *prometheus.Registry) error {
	return metrics.Register(reg, mEnqueued, mSent, mRetried, mSpooled, mDropped, mPoisoned, mCorrupt, mLatency, mFull, mBacklog)
}

// sinkMetrics are one sink's counters: Prometheus children, plus plain
// atomics for Stats.
type sinkMetrics struct {
	enqueued, sent, retried, spooled, dropped, poisoned, corrupt prometheus.Counter
	latency                                                      prometheus.Observer

	enqueuedN, sentN, retriedN, spooledN, droppedN, poisonedN atomic.Int64

	sink, typ string
	fullMu    sync.Mutex
	fullBy    map[string]prometheus.Counter
	fullNBy   map[string]*atomic.Int64
}

// full counts one on_full action.
func (m *sinkMetrics) full(action string) { m.fullN(action, 1) }

func (m *sinkMetrics) fullN(action string, n int) {
	m.fullMu.Lock()
	c, ok := m.fullBy[action]
	if !ok {
		c = mFull.WithLabelValues(m.sink, m.typ, action)
		m.fullBy[action] = c
		m.fullNBy[action] = new(atomic.Int64)
	}
	cn := m.fullNBy[action]
	m.fullMu.Unlock()
	c.Add(float64(n))
	cn.Add(int64(n))
}

// fullCounts returns the on_full counters by action.
func (m *sinkMetrics) fullCounts() map[string]int64 {
	m.fullMu.Lock()
	defer m.fullMu.Unlock()
	out := make(map[string]int64, len(m.fullNBy))
	for k, v := range m.fullNBy {
		out[k] = v.Load()
	}
	return out
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
		sink:     name, typ: typ,
		fullBy: map[string]prometheus.Counter{}, fullNBy: map[string]*atomic.Int64{},
	}
	sinkMetricsBy[k] = m
	return m
}
