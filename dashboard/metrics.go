package dashboard

import (
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counters are the duty counters the page charts and lists, read from
// Caddy's metrics registry (the collectors the gateway's modules register).
// Counters are totals since the process started; the page derives rates.
type Counters struct {
	// Requests is the number of requests seen: Caddy's
	// caddy_http_requests_total when server metrics are on, else the audit
	// events recorded (the busiest sink), else jwt_auth verifications.
	Requests float64 `json:"requests"`
	// RequestsSource names the metric Requests comes from.
	RequestsSource string `json:"requests_source"`
	// Denials sums jwt_auth rejections (invalid, missing), rbac denials and
	// permission denials (cached deny decisions and on_error deny).
	Denials float64 `json:"denials"`

	JWT        JWTCounters        `json:"jwt"`
	RBAC       map[string]float64 `json:"rbac"`
	Permission PermCounters       `json:"permission"`
	Audit      AuditCounters      `json:"audit"`
	Docker     map[string]float64 `json:"docker"`
}

// JWTCounters are jwt_auth's results.
type JWTCounters struct {
	// Results counts verifications by "result: reason".
	Results      map[string]float64 `json:"results"`
	Valid        float64            `json:"valid"`
	Rejected     float64            `json:"rejected"`
	CacheHits    float64            `json:"cache_hits"`
	CacheMisses  float64            `json:"cache_misses"`
	CacheHitRate *float64           `json:"cache_hit_rate"`
}

// PermCounters are the permission cache's counters.
type PermCounters struct {
	HitsAllow     float64  `json:"hits_allow"`
	HitsDeny      float64  `json:"hits_deny"`
	Misses        float64  `json:"misses"`
	StaleServes   float64  `json:"stale_serves"`
	ServiceErrors float64  `json:"service_errors"`
	OnErrorAllow  float64  `json:"on_error_allow"`
	OnErrorDeny   float64  `json:"on_error_deny"`
	Entries       float64  `json:"entries"`
	CacheHitRate  *float64 `json:"cache_hit_rate"`
}

// AuditCounters are the audit sinks' totals; per-sink numbers are in Sinks.
type AuditCounters struct {
	Backlog  float64 `json:"backlog"`
	Enqueued float64 `json:"enqueued"`
	Sent     float64 `json:"sent"`
	Spooled  float64 `json:"spooled"`
	Dropped  float64 `json:"dropped"`
	Sinks    []Sink  `json:"sinks"`
}

// Sink is one audit sink's counters.
type Sink struct {
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	QueueDepth float64 `json:"queue_depth"`
	Enqueued   float64 `json:"enqueued"`
	Sent       float64 `json:"sent"`
	Retried    float64 `json:"retried"`
	Spooled    float64 `json:"spooled"`
	Dropped    float64 `json:"dropped"`
	Poisoned   float64 `json:"poisoned"`
}

// ReadCounters gathers g and sums the gateway's metrics into Counters. A
// nil gatherer, or a registry without the gateway's metrics, gives zeros.
func ReadCounters(g prometheus.Gatherer) (Counters, error) {
	c := Counters{
		JWT:    JWTCounters{Results: map[string]float64{}},
		RBAC:   map[string]float64{},
		Docker: map[string]float64{},
		Audit:  AuditCounters{Sinks: []Sink{}},
	}
	if g == nil {
		return c, nil
	}
	fams, err := g.Gather()
	if fams == nil && err != nil {
		return c, err
	}
	sinks := map[[2]string]*Sink{}
	sink := func(m *dto.Metric) *Sink {
		k := [2]string{label(m, "sink"), label(m, "type")}
		s, ok := sinks[k]
		if !ok {
			s = &Sink{Name: k[0], Type: k[1]}
			sinks[k] = s
		}
		return s
	}
	var httpRequests float64
	haveHTTP := false
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "gateway_") && name != "caddy_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			v := value(m)
			switch name {
			case "caddy_http_requests_total":
				haveHTTP = true
				httpRequests += v
			case "gateway_jwt_verifications_total":
				res, reason := label(m, "result"), label(m, "reason")
				c.JWT.Results[res+": "+reason] += v
				switch res {
				case "valid":
					c.JWT.Valid += v
				case "invalid", "missing":
					c.JWT.Rejected += v
				}
			case "gateway_jwt_cache_hits_total":
				c.JWT.CacheHits += v
			case "gateway_jwt_cache_misses_total":
				c.JWT.CacheMisses += v
			case "gateway_rbac_decisions_total":
				c.RBAC[label(m, "result")] += v
			case "gateway_permission_cache_hits_total":
				if label(m, "decision") == "deny" {
					c.Permission.HitsDeny += v
				} else {
					c.Permission.HitsAllow += v
				}
			case "gateway_permission_cache_misses_total":
				c.Permission.Misses += v
			case "gateway_permission_stale_serves_total":
				c.Permission.StaleServes += v
			case "gateway_permission_service_errors_total":
				c.Permission.ServiceErrors += v
			case "gateway_permission_on_error_total":
				if label(m, "action") == "deny" {
					c.Permission.OnErrorDeny += v
				} else {
					c.Permission.OnErrorAllow += v
				}
			case "gateway_permission_cache_entries":
				c.Permission.Entries += v
			case "gateway_audit_queue_depth":
				sink(m).QueueDepth += v
			case "gateway_audit_events_enqueued_total":
				sink(m).Enqueued += v
			case "gateway_audit_events_sent_total":
				sink(m).Sent += v
			case "gateway_audit_events_retried_total":
				sink(m).Retried += v
			case "gateway_audit_events_spooled_total":
				sink(m).Spooled += v
			case "gateway_audit_events_dropped_total":
				sink(m).Dropped += v
			case "gateway_audit_events_poisoned_total":
				sink(m).Poisoned += v
			case "gateway_docker_containers":
				c.Docker["containers_"+label(m, "state")] += v
			case "gateway_docker_routes":
				c.Docker["routes"] += v
			case "gateway_docker_errors_total":
				c.Docker["errors_"+label(m, "kind")] += v
			case "gateway_docker_applies_total":
				c.Docker["applies_"+label(m, "result")] += v
			}
		}
	}
	c.JWT.CacheHitRate = ratio(c.JWT.CacheHits, c.JWT.CacheHits+c.JWT.CacheMisses)
	p := &c.Permission
	p.CacheHitRate = ratio(p.HitsAllow+p.HitsDeny, p.HitsAllow+p.HitsDeny+p.Misses)

	keys := make([][2]string, 0, len(sinks))
	for k := range sinks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	var maxEnqueued float64
	for _, k := range keys {
		s := sinks[k]
		c.Audit.Sinks = append(c.Audit.Sinks, *s)
		c.Audit.Backlog += s.QueueDepth
		c.Audit.Enqueued += s.Enqueued
		c.Audit.Sent += s.Sent
		c.Audit.Spooled += s.Spooled
		c.Audit.Dropped += s.Dropped
		if s.Enqueued > maxEnqueued {
			maxEnqueued = s.Enqueued
		}
	}

	switch {
	case haveHTTP:
		c.Requests, c.RequestsSource = httpRequests, "caddy_http_requests_total"
	case len(sinks) > 0:
		c.Requests, c.RequestsSource = maxEnqueued, "gateway_audit_events_enqueued_total"
	default:
		var n float64
		for _, v := range c.JWT.Results {
			n += v
		}
		c.Requests, c.RequestsSource = n, "gateway_jwt_verifications_total"
	}
	c.Denials = c.JWT.Rejected + c.RBAC["deny_role"] + c.RBAC["deny_scope"] + c.RBAC["unauthenticated"] +
		p.HitsDeny + p.OnErrorDeny
	return c, nil
}

func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
