package caddyquota

import (
	"sort"
	"sync"
	"time"

	"github.com/apigate/gateway/caddyquota/quotausage"
	"github.com/apigate/gateway/internal/metrics"
)

// Stats is the quota's state for the dashboard: its typed snapshot (the
// dashboard reads nothing else of this package).
type Stats struct {
	// Enabled is false when the running config has no quota.
	Enabled  bool   `json:"enabled"`
	Timezone string `json:"timezone,omitempty"`
	Date     string `json:"date,omitempty"`
	Month    string `json:"month,omitempty"`
	// Consumers counted on this gateway.
	Consumers int `json:"consumers"`
	// Decisions by decision (admitted, refused, would_refuse,
	// unavailable, unidentified), totals since the process started.
	Decisions map[string]float64 `json:"decisions"`
	// Fleet is the shared counts' state, with a fleet.
	Fleet *FleetStats `json:"fleet,omitempty"`
	// Top are the consumers with the most requests today (10).
	Top []quotausage.Summary `json:"top"`
	// NearLimit are the consumers that used 80% or more of a day's or a
	// month's limit, the closest first (10).
	NearLimit []quotausage.Summary `json:"near_limit"`
	// Error says why the counts could not be read.
	Error string `json:"error,omitempty"`
}

// FleetStats is the state of a fleet's shared counts.
type FleetStats struct {
	Node string `json:"node"`
	// Available is false while this gateway decides on its share alone
	// (NATS unreachable); Since is when that began (RFC 3339).
	Available bool   `json:"available"`
	Since     string `json:"since,omitempty"`
	// Gateways sharing the counts (fresh heartbeats).
	Gateways      int     `json:"gateways"`
	OnUnavailable string  `json:"on_unavailable"`
	Share         float64 `json:"share"`
}

// NearLimitShare is the share of a limit from which a consumer is listed
// as near it.
const NearLimitShare = 0.8

var statsCache struct {
	sync.Mutex
	at    time.Time
	app   *App
	stats Stats
}

// ReadStats returns the running config's quota state. The consumer lists
// cost one pass over every consumer: they are computed at most once a
// second.
func ReadStats() Stats {
	a := activeApp()
	if a == nil {
		return Stats{Decisions: map[string]float64{}, Top: []quotausage.Summary{}, NearLimit: []quotausage.Summary{}}
	}
	statsCache.Lock()
	defer statsCache.Unlock()
	if statsCache.app == a && time.Since(statsCache.at) < time.Second {
		return statsCache.stats
	}
	s := a.stats()
	statsCache.app, statsCache.at, statsCache.stats = a, time.Now(), s
	return s
}

func (a *App) stats() Stats {
	s := Stats{Enabled: true, Decisions: map[string]float64{}, Top: []quotausage.Summary{}, NearLimit: []quotausage.Summary{}}
	metrics.Each(decisionsVec, func(l map[string]string, v float64) { s.Decisions[l["decision"]] += v })
	st, err := a.store()
	if err != nil {
		s.Error = err.Error()
		return s
	}
	now := a.clock()
	day, month := st.Periods(now)
	s.Timezone, s.Date, s.Month = st.Calendar().Location().String(), DateString(day.ID), MonthString(month.ID)
	s.Consumers = st.Consumers()
	if f := st.fleet.Load(); f != nil {
		fs := &FleetStats{Node: f.o.Node, Available: f.Available(), Gateways: f.Nodes(), OnUnavailable: FailOpen, Share: f.share()}
		if f.policy.Load().failClosed {
			fs.OnUnavailable = FailClosed
		}
		if since := f.downSince.Load(); since != 0 {
			fs.Since = time.Unix(0, since).UTC().Format(time.RFC3339)
		}
		s.Fleet = fs
	}
	all := a.summaries(st, now)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Day > all[j].Day })
	for _, u := range all {
		if len(s.Top) == 10 || u.Day == 0 {
			break
		}
		s.Top = append(s.Top, u)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Used > all[j].Used })
	for _, u := range all {
		if len(s.NearLimit) == 10 || u.Limit == "" || u.Used < NearLimitShare {
			break
		}
		s.NearLimit = append(s.NearLimit, u)
	}
	return s
}
