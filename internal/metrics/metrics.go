// Package metrics registers the gateway's Prometheus collectors.
//
// Every collector is made once per process (a package variable of its
// module), so its counts survive config reloads; Caddy makes a new registry
// at every config load, so each Provision registers its module's collectors
// on its config's registry (ctx.GetMetricsRegistry()), as Caddy's own
// reverse_proxy metrics do. Registering one twice on a registry (two handlers
// of one config) is not an error.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Register registers cs on reg (which may be nil: no metrics). A collector
// already registered there is skipped; a different collector under the same
// name is an error.
func Register(reg *prometheus.Registry, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) && are.ExistingCollector == c {
				continue
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Each calls fn with the label values and the value of every metric c
// collects (counters and gauges; histograms give their sample count). A
// module reads its own collectors with it for the typed snapshots it
// exports, instead of other modules reading its metric names.
func Each(c prometheus.Collector, fn func(labels map[string]string, value float64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		labels := make(map[string]string, len(d.GetLabel()))
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch {
		case d.Counter != nil:
			fn(labels, d.GetCounter().GetValue())
		case d.Gauge != nil:
			fn(labels, d.GetGauge().GetValue())
		case d.Histogram != nil:
			fn(labels, float64(d.GetHistogram().GetSampleCount()))
		case d.Untyped != nil:
			fn(labels, d.GetUntyped().GetValue())
		}
	}
}
