package natsstore

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The local copies' metrics, labelled by bucket: whether the storage reads
// its local copy (NATS does not answer), and how many writes wait for
// NATS.
var (
	localDesc = prometheus.NewDesc("gateway_storage_nats_local",
		"1 while storage nats reads its local copy and queues writes because NATS does not answer, else 0.",
		[]string{"bucket"}, nil)
	queuedDesc = prometheus.NewDesc("gateway_storage_nats_queued_writes",
		"Writes of storage nats queued in its local copy, waiting for NATS.",
		[]string{"bucket"}, nil)
)

// open holds the local copies in use, for the collector.
var open sync.Map // *local -> struct{}

type collector struct{}

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- localDesc
	ch <- queuedDesc
}

// Collect implements prometheus.Collector.
func (collector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	open.Range(func(k, _ any) bool {
		l := k.(*local)
		if seen[l.bucket] {
			return true // two copies of one bucket (other servers): the first
		}
		seen[l.bucket] = true
		down := 0.0
		if l.down.Load() {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(localDesc, prometheus.GaugeValue, down, l.bucket)
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(l.queued()), l.bucket)
		return true
	})
}

// registerMetrics registers the collector on a config's registry.
func registerMetrics(reg *prometheus.Registry) error {
	return metrics.Register(reg, collector{})
}
