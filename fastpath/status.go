package fastpath

import (
	"sort"
	"sync"
)

// ServerStatus says whether the fast path serves a server of the running
// config, and why not when it does not.
type ServerStatus struct {
	Server string `json:"server"`
	On     bool   `json:"on"`
	Reason string `json:"reason,omitempty"`
	// Requests the fast path served on this server since the process
	// started (gateway_fastpath_requests_total).
	Requests float64 `json:"requests"`
	// Of the running config: requests the plan served, malformed ones it
	// refused, and connections it handed to Caddy's server (HTTP/2, h2c,
	// upgrades, requests the plan does not take).
	Served    int64 `json:"served"`
	Refused   int64 `json:"refused"`
	HandedOff int64 `json:"handed_off"`
	// Requests the fast path's connections served through Caddy's server
	// handler (gateway_fastpath_delegated_total), of the running config.
	Delegated int64 `json:"delegated"`
}

var (
	statusMu sync.Mutex
	statuses = map[string]statusEntry{}
)

type statusEntry struct {
	owner *ListenerWrapper
	on    bool
	why   string
}

func (lw *ListenerWrapper) setStatus(name string, on bool, reason string) {
	statusMu.Lock()
	statuses[name] = statusEntry{owner: lw, on: on, why: reason}
	statusMu.Unlock()
}

// Cleanup forgets the wrapper's server status, unless a newer config's
// wrapper of that server already replaced it.
func (lw *ListenerWrapper) Cleanup() error {
	if lw.srv == nil {
		return nil
	}
	statusMu.Lock()
	if e, ok := statuses[lw.srv.Name()]; ok && e.owner == lw {
		delete(statuses, lw.srv.Name())
	}
	statusMu.Unlock()
	return nil
}

// Status returns, for each server with the apigate wrapper in the running
// config, whether the fast path serves it (the dashboard shows it).
func Status() []ServerStatus {
	statusMu.Lock()
	out := make([]ServerStatus, 0, len(statuses))
	for name, e := range statuses {
		st := ServerStatus{Server: name, On: e.on, Reason: e.why}
		if s := e.owner.stats; s != nil {
			st.Served, st.Refused, st.HandedOff = s.served.Load(), s.refused.Load(), s.handoffs.Load()
			st.Delegated = s.delegated.Load()
		}
		out = append(out, st)
	}
	statusMu.Unlock()
	for i := range out {
		if c, err := requestsTotal.GetMetricWithLabelValues(out[i].Server); err == nil {
			out[i].Requests = counterValue(c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}
