package caddyaudit

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// nopSink accepts every batch.
type nopSink struct{}

func (nopSink) Send(context.Context, []record) error { return nil }
func (nopSink) Close() error                         { return nil }

// benchWorker is a worker whose queue the benchmark empties itself (with
// the timer stopped), so that the numbers are the request-path cost of
// enqueueing and not the speed of the worker goroutine, which encodes and
// sends on another core.
func benchWorker(b *testing.B) *worker {
	cfg := workerConfig{Name: "bench", Type: "bench", QueueSize: 1 << 16, BatchSize: 500}
	cfg.setDefaults()
	return &worker{cfg: cfg, m: metricsFor(cfg.Name, cfg.Type), log: zap.NewNop(),
		q: make(chan *Event, cfg.QueueSize), wake: make(chan struct{}, 1), closing: make(chan struct{})}
}

func drainIfFull(b *testing.B, w *worker) {
	if len(w.q) < cap(w.q) {
		return
	}
	b.StopTimer()
	for len(w.q) > 0 {
		releaseEvent(<-w.q) // as the worker does
	}
	for len(w.wake) > 0 {
		<-w.wake
	}
	b.StartTimer()
}

// BenchmarkEnqueue is the request-path cost of handing an event to one
// sink.
func BenchmarkEnqueue(b *testing.B) {
	w := benchWorker(b)
	ev := testEvent(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		drainIfFull(b, w)
		w.Enqueue(ev)
	}
}

// BenchmarkRecord adds the Recent ring to Enqueue (App.Record, one sink).
func BenchmarkRecord(b *testing.B) {
	w := benchWorker(b)
	a := &App{workers: []*worker{w}}
	ev := testEvent(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		drainIfFull(b, w)
		a.Record(ev)
	}
}

// BenchmarkEnqueueDisk is the request-path cost of durability disk: the
// event is encoded and copied into the spool's mapped segment (the page
// cache) before Enqueue returns. The worker is not running; the spool
// just grows (new segments included).
func BenchmarkEnqueueDisk(b *testing.B) {
	cfg := workerConfig{Name: "bench-disk", Type: "bench", BatchSize: 500, Disk: true, SpoolDir: b.TempDir()}
	cfg.setDefaults()
	sp, err := OpenSpool(cfg.SpoolDir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	w := &worker{cfg: cfg, m: metricsFor(cfg.Name, cfg.Type), log: zap.NewNop(), spool: sp,
		q: make(chan *Event, 1), wake: make(chan struct{}, 1), closing: make(chan struct{})}
	w.spooling.Store(true)
	ev := testEvent(1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Enqueue(ev)
		}
	})
}

// BenchmarkRecordChained adds the tamper-evidence chain to Record: seq,
// canonical encoding and SHA-256 under the chain's lock.
func BenchmarkRecordChained(b *testing.B) {
	w := benchWorker(b)
	a := &App{workers: []*worker{w}, chain: &chain{id: "0123456789abcdef", prev: "00"}}
	ev := testEvent(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		drainIfFull(b, w)
		a.Record(ev)
	}
}

// BenchmarkHandler is the whole audit handler around a trivial next
// handler: recorder, event fields, request id, Record.
func BenchmarkHandler(b *testing.B) {
	w := benchWorker(b)
	h := &Handler{Route: "orders", app: &App{workers: []*worker{w}}}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(200)
		return nil
	})
	rec := httptest.NewRecorder()
	r := newRequest("GET", "http://api.test/orders/1")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		drainIfFull(b, w)
		_ = h.ServeHTTP(rec, r, next)
	}
}

// BenchmarkWorkerThroughput is the worker goroutine end to end (encode a
// batch, hand it to a sink that accepts it): the events/s one sink can
// absorb.
func BenchmarkWorkerThroughput(b *testing.B) {
	w, err := newWorker(workerConfig{Name: "bench-throughput", Type: "bench", QueueSize: 1 << 16, BatchSize: 500,
		FlushInterval: time.Millisecond, BlockTimeout: time.Minute}, nopSink{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ev := testEvent(1)
	start := w.m.sentN.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Enqueue(ev)
	}
	for w.m.sentN.Load()-start < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	w.stop()
}

// BenchmarkEncodeBatch measures the worker's encoding of a 500-event batch
// into the HTTP sink's JSON array.
func BenchmarkEncodeBatch(b *testing.B) {
	const n = 500
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = *testEvent(i)
		evs[i].Subject = "user-1234567890"
		evs[i].Roles = []string{"orders", "admin"}
		evs[i].RemoteIP = "203.0.113.9"
	}
	var arena []byte
	recs := make([]record, 0, n)
	var body bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		arena, recs = arena[:0], recs[:0]
		for j := range evs {
			start := len(arena)
			arena = evs[j].AppendJSON(arena)
			recs = append(recs, record{id: evs[j].RequestID, data: arena[start:]})
		}
		encodeBatch(&body, recs)
	}
	b.SetBytes(int64(body.Len()))
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
}
