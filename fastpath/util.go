package fastpath

import (
	"net"
	"net/textproto"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func textprotoCanonical(s string) string { return textproto.CanonicalMIMEHeaderKey(s) }

func splitHostPort(hp string) (string, string, error) { return net.SplitHostPort(hp) }

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
