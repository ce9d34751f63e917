package caddyaudit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/caddyaudit"
)

// pathHook is a real webhook receiver that records the path of every event
// it accepts; while down it answers 503, so the sink retries or spools.
type pathHook struct {
	*httptest.Server
	down  atomic.Bool
	mu    sync.Mutex
	paths map[string]bool
}

func newPathHook(t *testing.T) *pathHook {
	h := &pathHook{paths: map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var evs []caddyaudit.Event
		if err := json.NewDecoder(r.Body).Decode(&evs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		for _, e := range evs {
			h.paths[e.Path] = true
		}
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h
}

// missing waits up to within for events with every one of paths, and
// returns how many never arrived.
func (h *pathHook) missing(paths []string, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		h.mu.Lock()
		n := 0
		for _, p := range paths {
			if !h.paths[p] {
				n++
			}
		}
		h.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}
