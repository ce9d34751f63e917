package caddyaudit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// record is one encoded event on its way to a sink.
type record struct {
	// id is the request id, when known (events read back from the spool
	// carry it only inside data).
	id   string
	data []byte
}

// Sink delivers batches of encoded events. Send is called by one goroutine
// at a time; it returns nil only when the whole batch was accepted.
type Sink interface {
	Send(ctx context.Context, batch []record) error
	Close() error
}

// PermanentError is returned by a sink that refused a batch for good (a
// "poison" batch): retrying it would fail again.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// workerConfig tunes one sink's queue and delivery.
type workerConfig struct {
	Name            string
	Type            string
	QueueSize       int
	BatchSize       int
	FlushInterval   time.Duration
	BlockTimeout    time.Duration
	MaxRetries      int // 0: until delivered (or shutdown)
	RetryBase       time.Duration
	RetryMax        time.Duration
	ShutdownTimeout time.Duration
	// SpoolDir is this sink's own spool directory; empty: no spool.
	SpoolDir string
}

func (c *workerConfig) setDefaults() {
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = time.Second
	}
	if c.RetryBase <= 0 {
		c.RetryBase = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
}

// worker owns one sink: its bounded queue, its spool and the goroutine that
// batches and delivers.
type worker struct {
	cfg  workerConfig
	sink Sink
	log  *zap.Logger
	m    *sinkMetrics

	q        chan Event
	wake     chan struct{}
	pendingN atomic.Int64 // events the worker took from q but has not sent
	spool    *Spool
	spooling atomic.Bool

	// mu guards closed against enqueues racing with the final drain.
	mu      sync.RWMutex
	closed  bool
	closing chan struct{}
	hard    context.Context // canceled when the shutdown deadline passes
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once

	lastErr atomic.Pointer[errorAt]
}

type errorAt struct {
	msg string
	at  time.Time
}

var encPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// newWorker starts a worker. The sink is closed by stop.
func newWorker(cfg workerConfig, sink Sink, log *zap.Logger) (*worker, error) {
	cfg.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("sink", cfg.Name))
	w := &worker{
		cfg: cfg, sink: sink, log: log, m: metricsFor(cfg.Name, cfg.Type),
		q:       make(chan Event, cfg.QueueSize),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.hard, w.cancel = context.WithCancel(context.Background())
	if cfg.SpoolDir != "" {
		sp, err := acquireSpool(cfg.SpoolDir, func(b BadRange) {
			w.m.corrupt.Add(float64(b.Length))
			w.log.Error("skipped corrupt bytes in audit spool",
				zap.String("file", b.File), zap.Int64("offset", b.Offset), zap.Int64("bytes", b.Length))
		})
		if err != nil {
			w.cancel()
			return nil, err
		}
		w.spool = sp
		if sp.Pending() {
			w.spooling.Store(true)
		}
	}
	registerWorker(w)
	go w.run()
	return w, nil
}

// Enqueue hands an event to the sink. It never blocks longer than
// BlockTimeout, and an event it cannot keep is counted and logged.
func (w *worker) Enqueue(ev *Event) {
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		// A request that outlived its config (a WebSocket kept open
		// across a reload by stream_close_delay, a slow upload) ends
		// after this worker stopped: hand its event to the sink of the
		// same name that the current config runs.
		if s := successor(w); s != nil {
			s.Enqueue(ev)
			return
		}
		w.drop(ev, "sink stopped")
		return
	}
	defer w.mu.RUnlock()
	w.m.enqueuedN.Add(1)
	w.m.enqueued.Inc()
	if w.spool != nil && w.spooling.Load() {
		w.spoolEvent(ev)
		return
	}
	select {
	case w.q <- *ev:
		if len(w.q)+int(w.pendingN.Load()) >= w.cfg.BatchSize {
			w.signal()
		}
		return
	default:
	}
	w.signal()
	if w.spool != nil {
		w.spooling.Store(true)
		w.spoolEvent(ev)
		return
	}
	t := time.NewTimer(w.cfg.BlockTimeout)
	defer t.Stop()
	select {
	case w.q <- *ev:
	case <-t.C:
		w.drop(ev, "queue full")
	case <-w.closing:
		w.drop(ev, "sink stopping")
	}
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) spoolEvent(ev *Event) {
	bp := encPool.Get().(*[]byte)
	b := ev.AppendJSON((*bp)[:0])
	err := w.spool.Append(b)
	*bp = b
	encPool.Put(bp)
	if err != nil {
		w.drop(ev, "spool write failed: "+err.Error())
		return
	}
	w.m.spooledN.Add(1)
	w.m.spooled.Inc()
}

func (w *worker) drop(ev *Event, why string) {
	w.m.droppedN.Add(1)
	w.m.dropped.Inc()
	w.log.Error("audit event dropped", zap.String("reason", why), zap.String("request_id", ev.RequestID),
		zap.String("method", ev.Method), zap.String("path", ev.Path), zap.Int("status", ev.Status))
}

func (w *worker) dropRecords(recs []record, why string) {
	if len(recs) == 0 {
		return
	}
	w.m.droppedN.Add(int64(len(recs)))
	w.m.dropped.Add(float64(len(recs)))
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, recordID(r))
	}
	w.log.Error("audit events dropped", zap.String("reason", why), zap.Int("count", len(recs)), zap.Strings("request_ids", ids))
}

func (w *worker) setErr(err error) {
	w.lastErr.Store(&errorAt{msg: err.Error(), at: time.Now()})
}

// stop stops accepting events, delivers what is queued within
// ShutdownTimeout, spools (or counts as dropped) the rest, and closes the
// sink.
func (w *worker) stop() {
	w.stopped.Do(func() {
		w.mu.Lock()
		w.closed = true
		close(w.closing)
		w.mu.Unlock()
		t := time.AfterFunc(w.cfg.ShutdownTimeout, w.cancel)
		<-w.done
		t.Stop()
		w.cancel()
		if err := w.sink.Close(); err != nil {
			w.log.Warn("closing audit sink", zap.Error(err))
		}
		if w.spool != nil {
			if err := releaseSpool(w.spool); err != nil {
				w.log.Error("closing audit spool", zap.Error(err))
			}
		}
		unregisterWorker(w)
	})
}

func (w *worker) run() {
	defer close(w.done)
	defer func() {
		if v := recover(); v != nil {
			w.log.Error("audit worker panicked", zap.Any("panic", v), zap.ByteString("stack", debug.Stack()))
		}
	}()
	var (
		pending = make([]Event, 0, w.cfg.BatchSize)
		recs    = make([]record, 0, w.cfg.BatchSize)
		arena   []byte
		tick    = time.NewTicker(w.cfg.FlushInterval)
	)
	defer tick.Stop()
	var spoolNotify <-chan struct{}
	if w.spool != nil {
		spoolNotify = w.spool.Notify()
	}
	encode := func() []record {
		recs, arena = recs[:0], arena[:0]
		for i := range pending {
			start := len(arena)
			arena = pending[i].AppendJSON(arena)
			recs = append(recs, record{id: pending[i].RequestID, data: arena[start:len(arena):len(arena)]})
		}
		return recs
	}
	for {
		// The worker does not wait on the queue itself: a receive that
		// wakes a parked goroutine for every event would make enqueueing
		// cost a context switch. It wakes up when a batch is full (wake),
		// every flush_interval (so no event waits much longer), and when
		// the spool is appended to.
		timed := false
		select {
		case <-w.wake:
		case <-tick.C:
			timed = true
			if w.spool != nil {
				if err := w.spool.Sync(); err != nil {
					w.log.Error("syncing audit spool", zap.Error(err))
				}
			}
		case <-spoolNotify:
		case <-w.closing:
			w.shutdown(pending)
			return
		}
		for {
		fill:
			for len(pending) < w.cfg.BatchSize {
				select {
				case ev := <-w.q:
					pending = append(pending, ev)
				default:
					break fill
				}
			}
			w.pendingN.Store(int64(len(pending)))
			if len(pending) == 0 || (len(pending) < w.cfg.BatchSize && !timed) {
				break // a partial batch waits for the tick
			}
			if !w.deliver(encode()) {
				w.shutdown(pending)
				return
			}
			pending = pending[:0]
			w.pendingN.Store(0)
		}
		if w.spool != nil && len(w.q) == 0 && len(pending) == 0 {
			if !w.drainSpoolOnce() {
				w.shutdown(nil)
				return
			}
		}
	}
}

// drainSpoolOnce delivers one batch from the spool. It returns false when
// the shutdown deadline passed.
func (w *worker) drainSpoolOnce() bool {
	if !w.spool.Pending() {
		w.spooling.Store(false)
		return true
	}
	if !w.spool.Lease(w.hard.Done()) {
		return false
	}
	defer w.spool.Unlease()
	b, err := w.spool.Read(w.cfg.BatchSize)
	if err != nil {
		w.log.Error("reading audit spool", zap.Error(err))
		w.setErr(err)
		select {
		case <-time.After(w.cfg.RetryBase):
		case <-w.hard.Done():
		}
		return w.hard.Err() == nil
	}
	if len(b.Records) == 0 {
		w.spooling.Store(false)
		return true
	}
	recs := make([]record, len(b.Records))
	for i, r := range b.Records {
		recs[i] = record{data: r}
	}
	if !w.deliverSpooled(recs) {
		return false
	}
	w.spool.Commit(b)
	// Keep draining without waiting for a tick.
	select {
	case w.spool.notify <- struct{}{}:
	default:
	}
	return true
}

// deliver sends a batch until it is accepted, refused for good, or retries
// run out. It returns false only when the shutdown deadline passed first
// (the batch is then still the caller's).
func (w *worker) deliver(recs []record) bool {
	return w.send(recs, false)
}

func (w *worker) deliverSpooled(recs []record) bool {
	return w.send(recs, true)
}

func (w *worker) send(recs []record, fromSpool bool) bool {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := w.sink.Send(w.hard, recs)
		w.m.latency.Observe(time.Since(start).Seconds())
		if err == nil {
			w.m.sentN.Add(int64(len(recs)))
			w.m.sent.Add(float64(len(recs)))
			return true
		}
		w.setErr(err)
		var perm *PermanentError
		if errors.As(err, &perm) {
			w.poison(recs, err)
			return true
		}
		if w.hard.Err() != nil {
			return false
		}
		if w.cfg.MaxRetries > 0 && attempt >= w.cfg.MaxRetries {
			w.giveUp(recs, err, fromSpool)
			return true
		}
		w.m.retriedN.Add(int64(len(recs)))
		w.m.retried.Add(float64(len(recs)))
		d := backoff(w.cfg.RetryBase, w.cfg.RetryMax, attempt)
		w.log.Warn("audit batch not delivered; retrying", zap.Int("events", len(recs)),
			zap.Int("attempt", attempt+1), zap.Duration("retry_in", d), zap.Error(err))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-w.hard.Done():
			t.Stop()
			return false
		}
	}
}

// backoff is exponential with full jitter in [d/2, d].
func backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// poison handles a batch the sink refused for good: it is logged and
// counted, and kept in the spool directory's dead-letter file when a spool
// is configured.
func (w *worker) poison(recs []record, err error) {
	w.m.poisonedN.Add(int64(len(recs)))
	w.m.poisoned.Add(float64(len(recs)))
	if w.spool != nil {
		path := filepath.Join(w.spool.Dir(), "poison.jsonl")
		if werr := appendLines(path, recs); werr == nil {
			w.log.Error("audit batch refused by sink; kept in dead-letter file",
				zap.Int("events", len(recs)), zap.String("file", path), zap.Error(err))
			return
		} else {
			err = errors.Join(err, werr)
		}
	}
	w.dropRecords(recs, "refused by sink: "+err.Error())
}

func (w *worker) giveUp(recs []record, err error, fromSpool bool) {
	if w.spool != nil {
		if fromSpool {
			// Still in the spool (not committed): it will be read again.
			return
		}
		payloads := make([][]byte, len(recs))
		for i := range recs {
			payloads[i] = recs[i].data
		}
		if serr := w.spool.Append(payloads...); serr == nil {
			w.spooling.Store(true)
			w.m.spooledN.Add(int64(len(recs)))
			w.m.spooled.Add(float64(len(recs)))
			w.log.Warn("audit batch spooled after max_retries", zap.Int("events", len(recs)), zap.Error(err))
			return
		} else {
			err = errors.Join(err, serr)
		}
	}
	w.dropRecords(recs, fmt.Sprintf("not delivered after %d retries: %v", w.cfg.MaxRetries, err))
}

// shutdown runs after closing: deliver what is queued until the deadline,
// then keep the rest in the spool, or count it as dropped.
func (w *worker) shutdown(pending []Event) {
	rest := pending
	for {
		select {
		case ev := <-w.q:
			rest = append(rest, ev)
			continue
		default:
		}
		break
	}
	var left []record
	for len(rest) > 0 {
		n := min(len(rest), w.cfg.BatchSize)
		recs := make([]record, 0, n)
		for i := range rest[:n] {
			recs = append(recs, record{id: rest[i].RequestID, data: rest[i].AppendJSON(nil)})
		}
		rest = rest[n:]
		if w.hard.Err() != nil || !w.deliver(recs) {
			left = append(left, recs...)
		}
	}
	if len(left) == 0 {
		return
	}
	if w.spool != nil {
		payloads := make([][]byte, len(left))
		for i := range left {
			payloads[i] = left[i].data
		}
		if err := w.spool.Prepend(payloads); err == nil {
			w.m.spooledN.Add(int64(len(left)))
			w.m.spooled.Add(float64(len(left)))
			w.log.Warn("audit events kept in spool at shutdown", zap.Int("events", len(left)))
			return
		} else {
			w.log.Error("spooling audit events at shutdown", zap.Error(err))
		}
	}
	w.dropRecords(left, "not delivered before shutdown_timeout")
}

// recordID returns a record's request id, decoding it from the JSON when
// it was not kept beside it.
func recordID(r record) string {
	if r.id != "" {
		return r.id
	}
	return extractRequestID(r.data)
}

func appendLines(path string, recs []record) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var buf []byte
	for _, r := range recs {
		buf = append(buf, r.data...)
		buf = append(buf, '\n')
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func (w *worker) isClosed() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.closed
}
