package dashboard

import (
	"sort"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddypermcache"
	"github.com/apigate/gateway/caddyrbac"
)

// Counters are the duty counters the page charts and lists, from the typed
// snapshots the modules export (ReadStats, Stats). Counters are totals since
// the process started; the page derives rates.
type Counters struct {
	// Requests is the number of requests the duties saw: the audit events
	// recorded (the busiest sink), else jwt_auth's verifications.
	Requests float64 `json:"requests"`
	// RequestsSource says what Requests counts.
	RequestsSource string `json:"requests_source"`
	// Denials sums jwt_auth rejections (invalid, missing), rbac denials and
	// permission denials (403s and on_error deny's 503s), enforced only.
	Denials float64 `json:"denials"`
	// WouldDeny sums what rbac and permission handlers in dry_run would
	// have refused and let pass.
	WouldDeny float64 `json:"would_deny"`

	JWT        JWTCounters        `json:"jwt"`
	RBAC       map[string]float64 `json:"rbac"`
	Permission PermCounters       `json:"permission"`
	Audit      AuditCounters      `json:"audit"`
	Docker     map[string]float64 `json:"docker"`
}

// JWTCounters are jwt_auth's results (its own snapshot) and the cache's
// hit rate.
type JWTCounters struct {
	caddyjwt.Stats
	CacheHitRate *float64 `json:"cache_hit_rate"`
}

// PermCounters are the permission cache's counters (its own snapshot) and
// its hit rate.
type PermCounters struct {
	caddypermcache.Stats
	CacheHitRate *float64 `json:"cache_hit_rate"`
}

// AuditCounters are the audit sinks' totals; per-sink numbers are in Sinks.
type AuditCounters struct {
	// Backlog is the events in the sinks' memory queues.
	Backlog float64 `json:"backlog"`
	// BacklogAgeSeconds is the age of the oldest undelivered event of any
	// sink (memory queue, or disk spool with durability disk).
	BacklogAgeSeconds float64 `json:"backlog_age_seconds"`
	Enqueued          float64 `json:"enqueued"`
	Sent              float64 `json:"sent"`
	Spooled           float64 `json:"spooled"`
	Dropped           float64 `json:"dropped"`
	Sinks             []Sink  `json:"sinks"`
}

// Sink is one audit sink's counters.
type Sink struct {
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	QueueDepth float64 `json:"queue_depth"`
	// BacklogAgeSeconds and SpoolBytes: the sink's oldest undelivered
	// event's age and its spool's undelivered bytes.
	BacklogAgeSeconds float64 `json:"backlog_age_seconds"`
	SpoolBytes        float64 `json:"spool_bytes"`
	Enqueued          float64 `json:"enqueued"`
	Sent              float64 `json:"sent"`
	Retried           float64 `json:"retried"`
	Spooled           float64 `json:"spooled"`
	Dropped           float64 `json:"dropped"`
	Poisoned          float64 `json:"poisoned"`
}

// ReadCounters reads the typed snapshots each module exports (their own
// counters, totals since the process started).
func ReadCounters() Counters {
	return CountersFrom(caddyjwt.ReadStats(), caddyrbac.ReadStats(), caddypermcache.ReadStats(),
		caddyaudit.Stats(), caddydocker.ReadStats())
}

// CountersFrom assembles Counters from the modules' snapshots.
func CountersFrom(jwt caddyjwt.Stats, rbac map[string]float64, perm caddypermcache.Stats,
	sinks []caddyaudit.SinkStats, docker map[string]float64) Counters {
	c := Counters{
		JWT:        JWTCounters{Stats: jwt},
		RBAC:       rbac,
		Docker:     docker,
		Permission: PermCounters{Stats: perm},
		Audit:      AuditCounters{Sinks: []Sink{}},
	}
	if c.JWT.Results == nil {
		c.JWT.Results = map[string]float64{}
	}
	if c.RBAC == nil {
		c.RBAC = map[string]float64{}
	}
	if c.Docker == nil {
		c.Docker = map[string]float64{}
	}
	c.JWT.CacheHitRate = ratio(c.JWT.CacheHits, c.JWT.CacheHits+c.JWT.CacheMisses)
	p := &c.Permission
	p.CacheHitRate = ratio(p.HitsAllow+p.HitsDeny, p.HitsAllow+p.HitsDeny+p.Misses)

	var maxEnqueued float64
	for _, st := range sinks {
		s := Sink{Name: st.Name, Type: st.Type, QueueDepth: float64(st.QueueDepth), Enqueued: float64(st.Enqueued),
			Sent: float64(st.Sent), Retried: float64(st.Retried), Spooled: float64(st.Spooled),
			Dropped: float64(st.Dropped), Poisoned: float64(st.Poisoned),
			BacklogAgeSeconds: st.BacklogAgeSeconds, SpoolBytes: float64(st.SpoolBytes)}
		c.Audit.Sinks = append(c.Audit.Sinks, s)
		c.Audit.Backlog += s.QueueDepth
		c.Audit.Enqueued += s.Enqueued
		c.Audit.Sent += s.Sent
		c.Audit.Spooled += s.Spooled
		c.Audit.Dropped += s.Dropped
		c.Audit.BacklogAgeSeconds = max(c.Audit.BacklogAgeSeconds, s.BacklogAgeSeconds)
		maxEnqueued = max(maxEnqueued, s.Enqueued)
	}
	sort.Slice(c.Audit.Sinks, func(i, j int) bool {
		a, b := c.Audit.Sinks[i], c.Audit.Sinks[j]
		return a.Name < b.Name || a.Name == b.Name && a.Type < b.Type
	})

	// Requests: what the duties saw. Every request through an audit handler
	// is one event in each sink (the busiest sink counts them); without
	// audit, jwt_auth's results count the requests it saw.
	var verified float64
	for _, v := range c.JWT.Results {
		verified += v
	}
	if len(sinks) > 0 {
		c.Requests, c.RequestsSource = maxEnqueued, "audit events enqueued"
	} else {
		c.Requests, c.RequestsSource = verified, "jwt_auth verifications"
	}
	c.Denials = c.JWT.Rejected + c.RBAC["deny_role"] + c.RBAC["deny_scope"] + c.RBAC["unauthenticated"] +
		p.Denied + p.Unavailable
	c.WouldDeny = c.RBAC["dry_run_deny_role"] + c.RBAC["dry_run_deny_scope"] + c.RBAC["dry_run_unauthenticated"] + p.WouldDeny
	return c
}

func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}
