package caddypermcache

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/internal/metrics"
)

// The collectors are global, so their counts survive config reloads; every
// config's registry gets them registered (Caddy makes a new registry per
// config load).
var (
	missesVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "cache_misses_total",
		Help: "Permission checks that found no fresh decision and asked the service (or joined a call in flight).",
	}, []string{"route"})
	staleVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "stale_serves_total",
		Help: "Expired decisions served because the service failed (stale_if_error).",
	}, []string{"route"})
	errorsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "service_errors_total",
		Help: "Calls to the permission service that failed: timeout, unreachable, or an unusable answer.",
	}, []string{"route"})
	onErrorVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "on_error_total",
		Help: "Requests decided by on_error because the service failed and no stale decision could be served.",
	}, []string{"route", "action"})
	denialsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "denials_total",
		Help: "Requests the permission handler denied, by result (deny: the service's answer, fresh or stale; unavailable: on_error deny), and dry_run: \"true\" for handlers in dry run, which let them pass.",
	}, []string{"route", "result", "dry_run"})
	latencyVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "service_call_duration_seconds",
		Help:    "Duration of calls to the permission service, failed ones included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"route"})

	hitsDesc = prometheus.NewDesc("gateway_permission_cache_hits_total",
		"Permission checks answered from a fresh cached decision, by decision (allow, deny).",
		[]string{"route", "decision"}, nil)
	entriesDesc = prometheus.NewDesc("gateway_permission_cache_entries",
		"Decisions in the cache, expired ones included.",
		[]string{"route"}, nil)
)

var collectors = []prometheus.Collector{missesVec, staleVec, errorsVec, onErrorVec, denialsVec, latencyVec, cacheCollector{}}

func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	return metrics.Register(reg, collectors...)
}

// routeMetrics are one route's children, resolved once at Provision so
// requests do no label lookups. Hits are not here: the cache counts them
// per shard (see cacheCollector).
type routeMetrics struct {
	misses, stale, errors prometheus.Counter
	onErrAllow, onErrDeny prometheus.Counter
	latency               prometheus.Observer
}

func metricsFor(route string) routeMetrics {
	return routeMetrics{
		misses:     missesVec.WithLabelValues(route),
		stale:      staleVec.WithLabelValues(route),
		errors:     errorsVec.WithLabelValues(route),
		onErrAllow: onErrorVec.WithLabelValues(route, "allow"),
		onErrDeny:  onErrorVec.WithLabelValues(route, "deny"),
		latency:    latencyVec.WithLabelValues(route),
	}
}

// denialCounters are one handler's children of denialsVec.
type denialCounters struct {
	denied, unavailable prometheus.Counter
}

func denialCountersFor(route string, dryRun bool) denialCounters {
	dr := strconv.FormatBool(dryRun)
	return denialCounters{
		denied:      denialsVec.WithLabelValues(route, "deny", dr),
		unavailable: denialsVec.WithLabelValues(route, "unavailable", dr),
	}
}

// live tracks the shared states in use, for the hits collector and the
// coarse clock. Hits of states that were destructed are kept in retired,
// so the counter never goes back when a config change replaces a cache.
var live struct {
	sync.Mutex
	set     map[*shared]struct{}
	retired map[string][2]uint64 // route -> {allow, deny}
	clock   *coarseClock
}

func addLive(s *shared) {
	live.Lock()
	defer live.Unlock()
	if live.set == nil {
		live.set = make(map[*shared]struct{})
		live.retired = make(map[string][2]uint64)
	}
	if len(live.set) == 0 {
		live.clock = startCoarseClock()
	}
	live.set[s] = struct{}{}
}

func removeLive(s *shared) {
	live.Lock()
	defer live.Unlock()
	if _, ok := live.set[s]; !ok {
		return
	}
	delete(live.set, s)
	a, d := s.cache.Hits()
	r := live.retired[s.route]
	live.retired[s.route] = [2]uint64{r[0] + a, r[1] + d}
	if len(live.set) == 0 && live.clock != nil {
		live.clock.stop()
		live.clock = nil
	}
}

// routeHits returns the fresh hits of a route, over its live and retired caches.
func routeHits(route string) (allow, deny uint64) {
	live.Lock()
	defer live.Unlock()
	r := live.retired[route]
	allow, deny = r[0], r[1]
	for s := range live.set {
		if s.route == route {
			a, d := s.cache.Hits()
			allow, deny = allow+a, deny+d
		}
	}
	return allow, deny
}

// cacheCollector reports the per-shard hit counters and cache sizes.
type cacheCollector struct{}

func (cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- hitsDesc
	ch <- entriesDesc
}

func (cacheCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		allow, deny uint64
		entries     int
		live        bool
	}
	byRoute := map[string]*agg{}
	live.Lock()
	for route, r := range live.retired {
		byRoute[route] = &agg{allow: r[0], deny: r[1]}
	}
	for s := range live.set {
		a := byRoute[s.route]
		if a == nil {
			a = &agg{}
			byRoute[s.route] = a
		}
		al, de := s.cache.Hits()
		a.allow += al
		a.deny += de
		a.entries += s.cache.Len()
		a.live = true
	}
	live.Unlock()
	for route, a := range byRoute {
		ch <- prometheus.MustNewConstMetric(hitsDesc, prometheus.CounterValue, float64(a.allow), route, "allow")
		ch <- prometheus.MustNewConstMetric(hitsDesc, prometheus.CounterValue, float64(a.deny), route, "deny")
		if a.live {
			ch <- prometheus.MustNewConstMetric(entriesDesc, prometheus.GaugeValue, float64(a.entries), route)
		}
	}
}

// Stats is a snapshot of the permission handlers' counters, summed over
// routes, totals since the process started (for the dashboard).
type Stats struct {
	HitsAllow     float64 `json:"hits_allow"`
	HitsDeny      float64 `json:"hits_deny"`
	Misses        float64 `json:"misses"`
	StaleServes   float64 `json:"stale_serves"`
	ServiceErrors float64 `json:"service_errors"`
	OnErrorAllow  float64 `json:"on_error_allow"`
	OnErrorDeny   float64 `json:"on_error_deny"`
	Entries       float64 `json:"entries"`
	// Denied and Unavailable are the requests refused (403, and 503 by
	// on_error deny); WouldDeny those that handlers in dry_run let pass.
	Denied      float64 `json:"denied"`
	Unavailable float64 `json:"unavailable"`
	WouldDeny   float64 `json:"would_deny"`
}

// ReadStats returns the permission handlers' counters.
func ReadStats() Stats {
	var s Stats
	metrics.Each(cacheCollector{}, func(l map[string]string, v float64) {
		switch l["decision"] {
		case "allow":
			s.HitsAllow += v
		case "deny":
			s.HitsDeny += v
		default:
			s.Entries += v
		}
	})
	metrics.Each(missesVec, func(_ map[string]string, v float64) { s.Misses += v })
	metrics.Each(staleVec, func(_ map[string]string, v float64) { s.StaleServes += v })
	metrics.Each(errorsVec, func(_ map[string]string, v float64) { s.ServiceErrors += v })
	metrics.Each(denialsVec, func(l map[string]string, v float64) {
		switch {
		case l["dry_run"] == "true":
			s.WouldDeny += v
		case l["result"] == "deny":
			s.Denied += v
		default:
			s.Unavailable += v
		}
	})
	metrics.Each(onErrorVec, func(l map[string]string, v float64) {
		if l["action"] == "deny" {
			s.OnErrorDeny += v
		} else {
			s.OnErrorAllow += v
		}
	})
	return s
}
