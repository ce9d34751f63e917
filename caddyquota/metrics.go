package caddyquota

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The collectors are made once per process and registered on each
// config's registry, so their counts survive reloads. None has a label
// per consumer but the opt-in, bounded consumer counter.
var (
	decisionsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "quota", Name: "decisions_total",
		Help: "quota decisions by plan and decision: admitted, refused (429), would_refuse (dry run: admitted over the quota), unavailable (503: the counts could not be kept), unidentified (500: the consumer key resolved empty, a config mistake).",
	}, []string{"plan", "decision"})
	consumerVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "quota", Name: "consumer_requests_total",
		Help: "quota decisions per consumer (opt-in with consumer_metrics N: the first N consumers seen; the others under consumer=\"other\").",
	}, []string{"consumer", "plan", "decision"})
	fleetAvailable = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "gateway", Subsystem: "quota", Name: "fleet_available",
		Help: "1 while the fleet's shared counts answer, 0 while this gateway decides on its share of the remaining quota alone (NATS unreachable).",
	})
	leaseTimeouts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "quota", Name: "fleet_lease_timeouts_total",
		Help: "requests that waited lease_wait for a lease and were decided on this gateway's share (NATS too slow).",
	})
	leaseOpsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "quota", Name: "fleet_operations_total",
		Help: "updates of the fleet's shared counts by result: ok, conflict (another gateway wrote first; retried), error.",
	}, []string{"result"})
)

// registerMetrics registers the collectors on a config's registry; the
// fleet's availability only when the config's quota has a fleet, so that a gateway
// alone by design does not show gateway_quota_fleet_available 0, the
// value of an outage.
func registerMetrics(reg *prometheus.Registry, fleet bool) error {
	if !fleet {
		return metrics.Register(reg, decisionsVec, consumerVec, leaseOpsVec, leaseTimeouts)
	}
	return metrics.Register(reg, decisionsVec, consumerVec, fleetAvailable, leaseOpsVec, leaseTimeouts)
}

// decisionCounters are one plan's children of decisionsVec, resolved
// once so that the request path does no label lookup.
type decisionCounters struct {
	admitted, refused, wouldRefuse, unavailable, unidentified prometheus.Counter
}

func newDecisionCounters(plan string) *decisionCounters {
	return &decisionCounters{
		admitted:     decisionsVec.WithLabelValues(plan, "admitted"),
		refused:      decisionsVec.WithLabelValues(plan, "refused"),
		wouldRefuse:  decisionsVec.WithLabelValues(plan, "would_refuse"),
		unavailable:  decisionsVec.WithLabelValues(plan, "unavailable"),
		unidentified: decisionsVec.WithLabelValues(plan, "unidentified"),
	}
}

// consumerCounters bound the consumer label: the first max consumers get
// a series each, the others share "other".
type consumerCounters struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool
}

func newConsumerCounters(max int) *consumerCounters {
	return &consumerCounters{max: max, seen: map[string]bool{}}
}

func (c *consumerCounters) inc(consumer, plan, decision string) {
	c.mu.Lock()
	if !c.seen[consumer] {
		if len(c.seen) >= c.max {
			consumer = "other"
		} else {
			c.seen[consumer] = true
		}
	}
	c.mu.Unlock()
	consumerVec.WithLabelValues(consumer, plan, decision).Inc()
}

// countConsumer counts a decision per consumer when consumer_metrics is
// on.
func (a *App) countConsumer(consumer, plan, decision string) {
	if a.consumerCnt != nil {
		a.consumerCnt.inc(NormalizeConsumer(consumer), plan, decision)
	}
}

// errorLog lets an error be logged at most once every 10 seconds.
type errorLog struct{ last atomic.Int64 }

func (e *errorLog) due() bool {
	if e == nil { // (a handler made without Provision, in tests)
		return true
	}
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(10*time.Second) && e.last.CompareAndSwap(last, now)
}
