package natsconn

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The shared connections' metrics, labelled by connection: the server list
// (user info removed) and the client name.
var (
	connectedDesc = prometheus.NewDesc("gateway_nats_connected",
		"1 when the shared NATS connection is connected, 0 while it is reconnecting.",
		[]string{"servers", "name"}, nil)
	reconnectsDesc = prometheus.NewDesc("gateway_nats_reconnects_total",
		"Reconnections of the shared NATS connection.",
		[]string{"servers", "name"}, nil)
	bufferedDesc = prometheus.NewDesc("gateway_nats_reconnect_buffer_bytes",
		"Bytes of publishes buffered while the shared NATS connection is reconnecting.",
		[]string{"servers", "name"}, nil)
	msgsDesc = prometheus.NewDesc("gateway_nats_messages_total",
		"Messages through the shared NATS connection, by direction (in, out).",
		[]string{"servers", "name", "direction"}, nil)
	bytesDesc = prometheus.NewDesc("gateway_nats_bytes_total",
		"Payload bytes through the shared NATS connection, by direction (in, out).",
		[]string{"servers", "name", "direction"}, nil)
)

type collector struct{}

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connectedDesc, reconnectsDesc, bufferedDesc, msgsDesc, bytesDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (collector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range open() {
		servers, name := c.labels[0], c.labels[1]
		connected := 0.0
		if c.nc.Status() == nats.CONNECTED {
			connected = 1
		}
		st := c.nc.Stats()
		buf, _ := c.nc.Buffered()
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, connected, servers, name)
		ch <- prometheus.MustNewConstMetric(reconnectsDesc, prometheus.CounterValue, float64(st.Reconnects), servers, name)
		ch <- prometheus.MustNewConstMetric(bufferedDesc, prometheus.GaugeValue, float64(buf), servers, name)
		ch <- prometheus.MustNewConstMetric(msgsDesc, prometheus.CounterValue, float64(st.InMsgs), servers, name, "in")
		ch <- prometheus.MustNewConstMetric(msgsDesc, prometheus.CounterValue, float64(st.OutMsgs), servers, name, "out")
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(st.InBytes), servers, name, "in")
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(st.OutBytes), servers, name, "out")
	}
}

// RegisterMetrics registers the shared connections' collector on reg (a
// Caddy config's metrics registry); registering it again is not an error,
// so every module that uses natsconn may call it from Provision.
func RegisterMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	return metrics.Register(reg, collector{})
}
