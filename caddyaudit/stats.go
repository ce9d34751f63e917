package caddyaudit

import (
	"bytes"
	"encoding/json"
	"sort"
	"sync"
	"time"
)

// SinkStats is a snapshot of one sink, for dashboards. Counters are totals
// since the process started (they survive config reloads).
type SinkStats struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	QueueDepth int    `json:"queue_depth"`
	QueueSize  int    `json:"queue_size"`
	Spooling   bool   `json:"spooling"`
	Enqueued   int64  `json:"enqueued"`
	Sent       int64  `json:"sent"`
	Retried    int64  `json:"retried"`
	Spooled    int64  `json:"spooled"`
	Dropped    int64  `json:"dropped"`
	Poisoned   int64  `json:"poisoned"`
	// BacklogAgeSeconds is the age of the oldest event not delivered yet
	// (0: none); SpoolBytes the undelivered bytes in the disk spool.
	BacklogAgeSeconds float64 `json:"backlog_age_seconds"`
	SpoolBytes        int64   `json:"spool_bytes"`
	// Full counts what on_full did, by action (blocked, dropped_oldest,
	// rejected).
	Full        map[string]int64 `json:"full,omitempty"`
	LastError   string           `json:"last_error,omitempty"`
	LastErrorAt time.Time        `json:"last_error_at,omitzero"`
}

var (
	workersMu sync.Mutex
	workers   = map[*worker]struct{}{}
)

func registerWorker(w *worker) {
	workersMu.Lock()
	workers[w] = struct{}{}
	workersMu.Unlock()
}

func unregisterWorker(w *worker) {
	workersMu.Lock()
	delete(workers, w)
	workersMu.Unlock()
}

// successor returns a running worker with the same sink name and type as
// the stopped worker w, or nil.
func successor(w *worker) *worker {
	workersMu.Lock()
	defer workersMu.Unlock()
	for o := range workers {
		if o != w && o.cfg.Name == w.cfg.Name && o.cfg.Type == w.cfg.Type && !o.isClosed() {
			return o
		}
	}
	return nil
}

func liveWorkers() []*worker {
	workersMu.Lock()
	defer workersMu.Unlock()
	out := make([]*worker, 0, len(workers))
	for w := range workers {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cfg.Name < out[j].cfg.Name })
	return out
}

// Stats returns a snapshot of every running sink, sorted by name. It is
// read-only and safe to call at any time.
func Stats() []SinkStats {
	ws := liveWorkers()
	now := time.Now()
	out := make([]SinkStats, 0, len(ws))
	for _, w := range ws {
		s := SinkStats{
			Name: w.cfg.Name, Type: w.cfg.Type,
			QueueDepth: len(w.q), QueueSize: cap(w.q),
			Spooling: w.spooling.Load(),
			Enqueued: w.m.enqueuedN.Load(), Sent: w.m.sentN.Load(), Retried: w.m.retriedN.Load(),
			Spooled: w.m.spooledN.Load(), Dropped: w.m.droppedN.Load(), Poisoned: w.m.poisonedN.Load(),
			BacklogAgeSeconds: w.backlogAge(now).Seconds(), SpoolBytes: w.spoolBytes(),
		}
		if full := w.m.fullCounts(); len(full) > 0 {
			s.Full = full
		}
		if e := w.lastErr.Load(); e != nil {
			s.LastError, s.LastErrorAt = e.msg, e.at
		}
		out = append(out, s)
	}
	return out
}

// recentSize is how many events Recent keeps.
const recentSize = 256

var recent struct {
	mu   sync.Mutex
	buf  [recentSize]Event
	next int
	n    int
}

func remember(ev *Event) {
	recent.mu.Lock()
	recent.buf[recent.next] = *ev
	recent.next = (recent.next + 1) % recentSize
	if recent.n < recentSize {
		recent.n++
	}
	recent.mu.Unlock()
}

// Recent returns up to n of the most recent audit events, newest first.
// Events never hold tokens, nor claims beyond the subject, the roles and
// what the handler's include_claim options pick.
func Recent(n int) []Event {
	recent.mu.Lock()
	defer recent.mu.Unlock()
	if n > recent.n {
		n = recent.n
	}
	if n < 0 {
		n = 0
	}
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		ev := recent.buf[(recent.next-i+recentSize)%recentSize]
		ev.Roles = append([]string(nil), ev.Roles...)
		out = append(out, ev)
	}
	return out
}

// recordTime reads the time of an encoded event: the last member of the
// canonical form.
func recordTime(data []byte) (time.Time, bool) {
	i := bytes.LastIndex(data, []byte(`"time":"`))
	if i < 0 {
		return time.Time{}, false
	}
	rest := data[i+len(`"time":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	return t, err == nil
}

// extractRequestID reads request_id from an encoded event.
func extractRequestID(data []byte) string {
	var v struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(data, &v)
	return v.RequestID
}
