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
