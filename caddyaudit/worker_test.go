package caddyaudit

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// receiver is a real webhook receiver: it records every batch it accepts
// and answers with the status that fail decides (0: 200).
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	batches  [][]Event
	requests atomic.Int64
	fail     atomic.Pointer[func(n int64) int]
	headers  http.Header
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	n := rc.requests.Add(1)
	if f := rc.fail.Load(); f != nil {
		if code := (*f)(n); code != 0 {
			http.Error(w, "nope", code)
			return
		}
	}
	var evs []Event
	if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || r.Method != http.MethodPost {
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.batches = append(rc.batches, evs)
	rc.headers = r.Header.Clone()
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) setFail(f func(n int64) int) { rc.fail.Store(&f) }

func (rc *receiver) snapshot() [][]Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]Event(nil), rc.batches...)
}

// ids returns the distinct request ids received (events are delivered at
// least once: duplicates are removed here, as consumers do).
func (rc *receiver) ids() map[string]bool {
	out := map[string]bool{}
	for _, b := range rc.snapshot() {
		for _, e := range b {
			out[e.RequestID] = true
		}
	}
	return out
}

var workerSeq atomic.Int64

func testEvent(i int) *Event {
	return &Event{Time: time.Unix(1700000000, int64(i)), RequestID: fmt.Sprintf("id-%d", i), Method: "GET",
		Host: "api.test", Path: "/orders", Status: 200, Decision: "allow", Roles: []string{"a"}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startWorker(t *testing.T, cfg workerConfig, sink Sink, log *zap.Logger) *worker {
	t.Helper()
	if cfg.Name == "" {
		// Unique per run: counters are per sink name and process-wide.
		cfg.Name = fmt.Sprintf("%s#%d", t.Name(), workerSeq.Add(1))
	}
	cfg.Type = "test"
	w, err := newWorker(cfg, sink, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stop)
	return w
}

func allIDs(n int) func(map[string]bool) bool {
	return func(got map[string]bool) bool {
		for i := 0; i < n; i++ {
			if !got[fmt.Sprintf("id-%d", i)] {
				return false
			}
		}
		return true
	}
}

func TestHTTPSinkBatching(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batchSize   int
		flush       time.Duration
		events      int
		wantBatches []int
	}{
		{"by size", 10, time.Hour, 30, []int{10, 10, 10}},
		{"by time", 1000, 20 * time.Millisecond, 3, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t)
			w := startWorker(t, workerConfig{BatchSize: tc.batchSize, FlushInterval: tc.flush},
				newHTTPSink(rc.srv.URL, http.Header{"X-Token": {"s3cret"}}, time.Second), nil)
			for i := 0; i < tc.events; i++ {
				w.Enqueue(testEvent(i))
			}
			waitFor(t, "batches", func() bool { return len(rc.snapshot()) >= len(tc.wantBatches) })
			got := rc.snapshot()
			for i, want := range tc.wantBatches {
				if len(got[i]) != want {
					t.Fatalf("batch %d has %d events, want %d", i, len(got[i]), want)
				}
			}
			if got[0][0].RequestID != "id-0" || got[0][0].Path != "/orders" {
				t.Fatalf("first event %+v", got[0][0])
			}
			rc.mu.Lock()
			h := rc.headers
			rc.mu.Unlock()
			if h.Get("X-Token") != "s3cret" || h.Get("Content-Type") != "application/json" {
				t.Fatalf("headers %v", h)
			}
		})
	}
}

func TestHTTPSinkRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
	}{
		{"500", http.StatusInternalServerError},
		{"503", http.StatusServiceUnavailable},
		{"408", http.StatusRequestTimeout},
		{"429", http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t)
			rc.setFail(func(n int64) int {
				if n <= 3 {
					return tc.code
				}
				return 0
			})
			w := startWorker(t, workerConfig{BatchSize: 5, FlushInterval: 10 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond},
				newHTTPSink(rc.srv.URL, nil, time.Second), nil)
			for i := 0; i < 5; i++ {
				w.Enqueue(testEvent(i))
			}
			waitFor(t, "delivery after retries", func() bool { return allIDs(5)(rc.ids()) })
			if r := rc.requests.Load(); r < 4 {
				t.Fatalf("%d requests, want at least 4", r)
			}
			if got := w.m.retriedN.Load(); got < 15 {
				t.Fatalf("retried = %d, want >= 15 (3 failed attempts x 5 events)", got)
			}
			if w.m.droppedN.Load() != 0 || w.m.poisonedN.Load() != 0 {
				t.Fatal("nothing may be dropped or poisoned")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	base, max := 100*time.Millisecond, 2*time.Second
	for _, tc := range []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 400 * time.Millisecond, 800 * time.Millisecond},
		{10, time.Second, 2 * time.Second},
		{1000, time.Second, 2 * time.Second},
	} {
		t.Run(fmt.Sprint(tc.attempt), func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for i := 0; i < 200; i++ {
				d := backoff(base, max, tc.attempt)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("backoff(%d) = %v, want in [%v, %v]", tc.attempt, d, tc.lo, tc.hi)
				}
				seen[d] = true
			}
			if len(seen) < 2 {
				t.Fatal("no jitter")
			}
		})
	}
}

func TestHTTPSinkPoisonBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spool bool
	}{
		{"without spool: counted and logged", false},
		{"with spool: dead-letter file", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t)
			rc.setFail(func(int64) int { return http.StatusUnprocessableEntity })
			core, logs := observer.New(zap.InfoLevel)
			cfg := workerConfig{BatchSize: 4, FlushInterval: 10 * time.Millisecond, RetryBase: time.Millisecond}
			if tc.spool {
				cfg.SpoolDir = t.TempDir()
			}
			w := startWorker(t, cfg, newHTTPSink(rc.srv.URL, nil, time.Second), zap.New(core))
			for i := 0; i < 4; i++ {
				w.Enqueue(testEvent(i))
			}
			waitFor(t, "poisoned", func() bool { return w.m.poisonedN.Load() == 4 })
			if r := rc.requests.Load(); r != 1 {
				t.Fatalf("a poison batch must not be retried: %d requests", r)
			}
			if tc.spool {
				// the worker counts a poison batch, then writes it: wait
				// for the file, then it must hold exactly the batch
				var b []byte
				waitFor(t, "the dead-letter file's 4 lines", func() bool {
					b, _ = os.ReadFile(filepath.Join(cfg.SpoolDir, "poison.jsonl"))
					return strings.Count(string(b), "\n") >= 4
				})
				if n := strings.Count(string(b), "\n"); n != 4 {
					t.Fatalf("dead-letter file has %d lines, want 4", n)
				}
				if w.m.droppedN.Load() != 0 {
					t.Fatal("spooled poison must not count as dropped")
				}
			} else {
				// counted as poisoned first, then as dropped and logged
				waitFor(t, "4 dropped, logged", func() bool {
					return w.m.droppedN.Load() >= 4 && logs.FilterMessage("audit events dropped").Len() >= 1
				})
				if w.m.droppedN.Load() != 4 {
					t.Fatalf("dropped = %d, want 4", w.m.droppedN.Load())
				}
				if logs.FilterMessage("audit events dropped").Len() != 1 {
					t.Fatalf("drop not logged once: %v", logs.All())
				}
			}
		})
	}
}

// flakyListener serves the receiver on a fixed address that can be taken
// down (connection refused) and brought back.
type flakyListener struct {
	addr string
	rc   *receiver
	mu   sync.Mutex
	srv  *http.Server
}

func (f *flakyListener) up(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ln net.Listener
	var err error
	waitFor(t, "listen "+f.addr, func() bool { ln, err = net.Listen("tcp", f.addr); return err == nil })
	f.srv = &http.Server{Handler: http.HandlerFunc(f.rc.serve)}
	go f.srv.Serve(ln)
}

func (f *flakyListener) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		f.srv.Close()
		f.srv = nil
	}
}

func newFlaky(t *testing.T) (*flakyListener, string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	f := &flakyListener{addr: addr, rc: &receiver{}}
	t.Cleanup(f.down)
	return f, "http://" + addr + "/hook"
}

func TestHTTPSinkReceiverDownThenUp(t *testing.T) {
	const n = 300
	for _, tc := range []struct {
		name  string
		spool bool
	}{
		{"backpressure", false},
		{"spool", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, url := newFlaky(t)
			cfg := workerConfig{QueueSize: 16, BatchSize: 20, FlushInterval: 5 * time.Millisecond,
				RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, BlockTimeout: time.Minute}
			if tc.spool {
				cfg.SpoolDir = t.TempDir()
			}
			w := startWorker(t, cfg, newHTTPSink(url, nil, time.Second), nil)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < n; i++ {
					w.Enqueue(testEvent(i))
				}
			}()
			// Down until the worker has failed a few times (and, with a
			// spool, until events went to disk).
			waitFor(t, "failed attempts", func() bool {
				return w.m.retriedN.Load() > 0 && (!tc.spool || w.m.spooledN.Load() > 0)
			})
			f.up(t)
			<-done
			waitFor(t, "all events", func() bool { return allIDs(n)(f.rc.ids()) })
			if d := w.m.droppedN.Load(); d != 0 {
				t.Fatalf("%d events dropped", d)
			}
		})
	}
}

func TestDropIsCountedAndLogged(t *testing.T) {
	f, url := newFlaky(t) // never up until the end
	core, logs := observer.New(zap.InfoLevel)
	w := startWorker(t, workerConfig{QueueSize: 1, BatchSize: 1, FlushInterval: time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, BlockTimeout: time.Millisecond},
		newHTTPSink(url, nil, time.Second), zap.New(core))
	const n = 20
	for i := 0; i < n; i++ {
		w.Enqueue(testEvent(i))
	}
	dropped := w.m.droppedN.Load()
	if dropped == 0 {
		t.Fatal("a full queue without spool must drop after block_timeout")
	}
	if got := logs.FilterMessage("audit event dropped").Len(); int64(got) != dropped {
		t.Fatalf("%d drops, %d logged", dropped, got)
	}
	f.up(t)
	waitFor(t, "the rest", func() bool { return int64(len(f.rc.ids()))+dropped == n })
}

func TestSpoolSurvivesRestart(t *testing.T) {
	const n = 200
	f, url := newFlaky(t)
	dir := t.TempDir()
	cfg := workerConfig{QueueSize: 8, BatchSize: 16, FlushInterval: 5 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, ShutdownTimeout: 50 * time.Millisecond, SpoolDir: dir}
	cfg.Name, cfg.Type = fmt.Sprintf("%s#%d", t.Name(), workerSeq.Add(1)), "test"
	w, err := newWorker(cfg, newHTTPSink(url, nil, time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		w.Enqueue(testEvent(i))
	}
	w.stop() // sink still down: everything must be on disk now
	if d := w.m.droppedN.Load(); d != 0 {
		t.Fatalf("%d dropped at shutdown", d)
	}
	if len(f.rc.ids()) != 0 {
		t.Fatal("receiver was down")
	}

	w2, err := newWorker(cfg, newHTTPSink(url, nil, time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.stop()
	f.up(t)
	waitFor(t, "all spooled events after restart", func() bool { return allIDs(n)(f.rc.ids()) })
	// In order: the first event of the first batch is the oldest.
	if first := f.rc.snapshot()[0][0].RequestID; first != "id-0" {
		t.Fatalf("first delivered event %s, want id-0", first)
	}
	waitFor(t, "spool emptied", func() bool { return !w2.spool.Pending() })
}

func TestMaxRetriesThenDropOrSpool(t *testing.T) {
	rc := newReceiver(t)
	rc.setFail(func(int64) int { return 500 })
	core, logs := observer.New(zap.InfoLevel)
	w := startWorker(t, workerConfig{BatchSize: 3, FlushInterval: time.Hour, MaxRetries: 2,
		RetryBase: time.Millisecond, RetryMax: time.Millisecond}, newHTTPSink(rc.srv.URL, nil, time.Second), zap.New(core))
	for i := 0; i < 3; i++ {
		w.Enqueue(testEvent(i))
	}
	waitFor(t, "drop after max_retries", func() bool { return w.m.droppedN.Load() == 3 })
	if rc.requests.Load() != 3 {
		t.Fatalf("%d requests, want 1 + 2 retries", rc.requests.Load())
	}
	if logs.FilterMessage("audit events dropped").Len() == 0 {
		t.Fatal("drop not logged")
	}
}
