package caddyaudit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// copyDir copies the files of a spool directory: what a restarted process
// would find on disk if this one died now.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// readIDs reads every request id a spool directory holds (from its
// cursor on). A segment a crash left at its preallocated size must read
// without any byte reported as corrupt.
func readIDs(t *testing.T, dir string) []string {
	t.Helper()
	s, err := OpenSpool(dir, func(b BadRange) { t.Errorf("corrupt bytes reported: %+v", b) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []string
	for _, r := range readAll(t, s, 100) {
		ids = append(ids, extractRequestID(r))
	}
	return ids
}

// TestDiskDurabilityWritesBeforeReturning: with durability disk, an event
// is in the spool's file when Enqueue returns, while the sink is down; a
// process that died then would find every one of them.
func TestDiskDurabilityWritesBeforeReturning(t *testing.T) {
	f, url := newFlaky(t) // down
	dir := t.TempDir()
	w := startWorker(t, workerConfig{Disk: true, SpoolDir: dir, BatchSize: 10, FlushInterval: 5 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond},
		newHTTPSink(url, nil, time.Second), nil)
	const n = 500
	for i := 0; i < n; i++ {
		w.Enqueue(testEvent(i))
	}
	if len(w.q) != 0 {
		t.Fatalf("%d events in the memory queue, want 0 in disk mode", len(w.q))
	}
	ids := readIDs(t, copyDir(t, dir))
	if len(ids) != n {
		t.Fatalf("the files hold %d events after %d Enqueue calls returned", len(ids), n)
	}
	for i, id := range ids {
		if want := testEvent(i).RequestID; id != want {
			t.Fatalf("event %d in the file is %s, want %s (arrival order)", i, id, want)
		}
	}
	f.up(t)
	waitFor(t, "delivery from the spool", func() bool { return allIDs(n)(f.rc.ids()) })
	if d := w.m.droppedN.Load(); d != 0 {
		t.Fatalf("%d dropped", d)
	}
}

// TestDiskDurabilityCursor: what was delivered is not delivered again
// after a crash, once the cursor was saved (every sync_interval).
func TestDiskDurabilityCursor(t *testing.T) {
	rc := newReceiver(t)
	dir := t.TempDir()
	w := startWorker(t, workerConfig{Disk: true, SpoolDir: dir, BatchSize: 50, FlushInterval: 5 * time.Millisecond,
		SyncInterval: 10 * time.Millisecond, ShutdownTimeout: 50 * time.Millisecond}, newHTTPSink(rc.srv.URL, nil, time.Second), nil)
	rc.setFail(func(int64) int { return 0 })
	for i := 0; i < 100; i++ {
		w.Enqueue(testEvent(i))
	}
	waitFor(t, "delivery", func() bool { return allIDs(100)(rc.ids()) })
	// Block the sink, add more, and let the cursor be saved.
	rc.setFail(func(int64) int { return 503 })
	for i := 100; i < 130; i++ {
		w.Enqueue(testEvent(i))
	}
	// The cursor is saved every sync_interval, the new events written as
	// they come: poll a copy of the spool (what a crash would leave) until
	// it holds the 30 undelivered and no more.
	waitFor(t, "a copy of the spool (after a crash) to hold only the 30 undelivered events from id-100", func() bool {
		ids := readIDs(t, copyDir(t, dir))
		return len(ids) == 30 && ids[0] == "id-100"
	})
	if len(rc.snapshot()) > 1 && len(rc.snapshot()[0]) < 2 {
		t.Errorf("batches of %d: the disk-mode worker should wake per batch, not per event", len(rc.snapshot()[0]))
	}
}

// TestOnFullDropOldestQueue: a full memory queue drops its oldest event
// for each new one; each drop is counted and logged, and every event is
// either delivered or dropped.
func TestOnFullDropOldestQueue(t *testing.T) {
	f, url := newFlaky(t)
	core, logs := observer.New(zap.InfoLevel)
	// The worker sends nothing before the tick (an hour): what it took
	// from the queue waits in its batch, and the queue fills.
	w := startWorker(t, workerConfig{QueueSize: 4, BatchSize: 1000, FlushInterval: time.Hour, OnFull: onFullDropOldest,
		ShutdownTimeout: 5 * time.Second}, newHTTPSink(url, nil, time.Second), zap.New(core))
	const n = 40
	for i := 0; i < n; i++ {
		w.Enqueue(testEvent(i))
	}
	dropped := w.m.droppedN.Load()
	if dropped == 0 {
		t.Fatal("nothing dropped")
	}
	if got := w.m.fullCounts()[actionDroppedOldest]; got != dropped {
		t.Fatalf("dropped_oldest %d, dropped %d", got, dropped)
	}
	if got := logs.FilterMessage("audit event dropped").Len(); int64(got) != dropped {
		t.Fatalf("%d drop log lines, %d dropped", got, dropped)
	}
	f.up(t)
	w.stop()
	got := f.rc.ids()
	if int64(len(got))+dropped != n {
		t.Fatalf("%d delivered + %d dropped, want %d", len(got), dropped, n)
	}
	if !got[testEvent(n-1).RequestID] {
		t.Error("the newest event was dropped")
	}
}

// TestOnFullSpoolMax: a bounded spool with the sink down. drop_oldest
// keeps the newest events within the bound; every event is either
// delivered once the sink is back, or counted and logged as dropped.
func TestOnFullSpoolMax(t *testing.T) {
	for _, policy := range []string{onFullDropOldest, onFullBlock} {
		t.Run(policy, func(t *testing.T) {
			f, url := newFlaky(t)
			const max = 256 << 10
			w := startWorker(t, workerConfig{Disk: true, SpoolDir: t.TempDir(), SpoolMaxSize: max, OnFull: policy,
				BatchSize: 100, FlushInterval: 5 * time.Millisecond, BlockTimeout: time.Millisecond,
				RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
				newHTTPSink(url, nil, time.Second), nil)
			const n = 3000 // ~1 MB of events
			for i := 0; i < n; i++ {
				w.Enqueue(testEvent(i))
				if s := w.spool.Size(); s > max+(64<<10) {
					t.Fatalf("spool %d bytes, over spool_max_size %d by more than a segment", s, max)
				}
			}
			dropped := w.m.droppedN.Load()
			if dropped == 0 {
				t.Fatal("nothing dropped with a full spool")
			}
			if policy == onFullDropOldest && w.m.fullCounts()[actionDroppedOldest] != dropped {
				t.Fatalf("dropped %d, dropped_oldest %d", dropped, w.m.fullCounts()[actionDroppedOldest])
			}
			f.up(t)
			waitFor(t, "spool drained", func() bool { return int64(len(f.rc.ids()))+dropped == n })
			got := f.rc.ids()
			last := testEvent(n - 1).RequestID
			if policy == onFullDropOldest && !got[last] {
				t.Errorf("drop_oldest lost the newest event %s", last)
			}
			if policy == onFullBlock && !got[testEvent(0).RequestID] {
				t.Errorf("block lost the oldest event")
			}
		})
	}
}

// TestOnFullReject: a route's requests get 503 while a reject sink is
// full, and pass again once it has room.
func TestOnFullReject(t *testing.T) {
	f, url := newFlaky(t)
	w := startWorker(t, workerConfig{QueueSize: 2, BatchSize: 1000, FlushInterval: time.Hour, OnFull: onFullReject,
		ShutdownTimeout: 5 * time.Second}, newHTTPSink(url, nil, time.Second), nil)
	h := &Handler{app: &App{workers: []*worker{w}, rejecting: []*worker{w}, rejects: true}}
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		err := h.ServeHTTP(rec, newRequest("GET", "http://api.test/x"), caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for i := 0; i < 2; i++ {
		if rec := serve(); rec.Code != 200 {
			t.Fatalf("request %d with room: %d", i, rec.Code)
		}
	}
	rec := serve()
	var body struct{ Error string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || body.Error != "audit_unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("full sink: %d %s (Retry-After %q), want 503 audit_unavailable", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if got := w.m.fullCounts()[actionRejected]; got != 1 {
		t.Fatalf("rejected %d, want 1", got)
	}
	// Room again (as when the worker takes a batch): requests pass.
	<-w.q
	if rec := serve(); rec.Code != 200 {
		t.Fatalf("with room again: %d", rec.Code)
	}
	f.up(t)
}

// TestBacklogAgeAndAlert: the age of the oldest undelivered event grows
// while the sink is down, is logged past alert_after, and goes back to 0.
func TestBacklogAgeAndAlert(t *testing.T) {
	for _, disk := range []bool{false, true} {
		name := "memory"
		if disk {
			name = "disk"
		}
		t.Run(name, func(t *testing.T) {
			f, url := newFlaky(t)
			core, logs := observer.New(zap.InfoLevel)
			cfg := workerConfig{BatchSize: 10, FlushInterval: 5 * time.Millisecond, AlertAfter: 100 * time.Millisecond,
				RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond}
			if disk {
				cfg.Disk, cfg.SpoolDir = true, t.TempDir()
			}
			w := startWorker(t, cfg, newHTTPSink(url, nil, time.Second), zap.New(core))
			if age := w.backlogAge(time.Now()); age != 0 {
				t.Fatalf("age %s with nothing queued", age)
			}
			for i := 0; i < 5; i++ {
				ev := testEvent(i)
				ev.Time = time.Now()
				w.Enqueue(ev)
			}
			waitFor(t, "alert", func() bool { return logs.FilterMessage("audit backlog is older than alert_after").Len() > 0 })
			if age := w.backlogAge(time.Now()); age < 100*time.Millisecond {
				t.Fatalf("age %s after the alert", age)
			}
			if disk && w.spoolBytes() == 0 {
				t.Fatal("spool_bytes 0 with events on disk")
			}
			f.up(t)
			waitFor(t, "recovery log", func() bool { return logs.FilterMessage("audit backlog back under alert_after").Len() > 0 })
			waitFor(t, "age 0", func() bool { return w.backlogAge(time.Now()) == 0 })
			waitFor(t, "spool empty", func() bool { return w.spoolBytes() == 0 })
		})
	}
}
