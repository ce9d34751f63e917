package caddyaudit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/deny"
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
	// Disk writes every event to the spool before Enqueue returns, and
	// the sink delivers from there (durability disk).
	Disk bool
	// SyncInterval is how often the spool is fsynced. Default: 200ms.
	SyncInterval time.Duration
	// SpoolMaxSize bounds the spool, in bytes; 0: until the disk is full.
	SpoolMaxSize int64
	// OnFull is what happens to an event the sink cannot take (queue
	// full without a spool, or spool full): "block" (default), "drop_oldest"
	// or "reject".
	OnFull string
	// AlertAfter is the backlog age that is logged. Default: 1m.
	AlertAfter time.Duration
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
	if c.SyncInterval <= 0 {
		c.SyncInterval = 200 * time.Millisecond
	}
	if c.OnFull == "" {
		c.OnFull = onFullBlock
	}
	if c.AlertAfter <= 0 {
		c.AlertAfter = time.Minute
	}
}

// on_full policies.
const (
	onFullBlock      = "block"
	onFullDropOldest = "drop_oldest"
	onFullReject     = "reject"
)

// worker owns one sink: its bounded queue, its spool and the goroutine that
// batches and delivers.
type worker struct {
	cfg  workerConfig
	sink Sink
	log  *zap.Logger
	m    *sinkMetrics

	// q holds pooled copies (eventPool): a channel of values would take
	// its full capacity (queue_size x the size of an Event, 28 MB at the
	// default) of memory once the ring has gone round.
	q        chan *Event
	wake     chan struct{}
	ready    <-chan struct{} // the sink's Ready (nil: none)
	pendingN atomic.Int64    // events the worker took from q but has not sent
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
	// failingSince is when deliveries began to fail (unix nanoseconds; 0:
	// they succeed): an outage logs once when it begins and once when it
	// ends, its retries only at debug level.
	failingSince atomic.Int64

	// Backlog: unix nanoseconds of the oldest event in q (0: empty or
	// unknown) and of the oldest event being delivered (0: none).
	qOldest, sendOldest atomic.Int64
	// spoolFailed holds, until when (unix nanoseconds), the spool counts
	// as full after a failed write (a full disk).
	spoolFailed atomic.Int64
	// requests rejected since the last log line, and when it was written
	rejected, rejectLogged atomic.Int64
}

type errorAt struct {
	msg string
	at  time.Time
}

var encPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// eventPool holds the Events of the memory queues.
var eventPool = sync.Pool{New: func() any { return new(Event) }}

// releaseEvent returns a queued Event to the pool, without keeping its
// strings alive.
func releaseEvent(e *Event) {
	*e = Event{}
	eventPool.Put(e)
}

// newWorker starts a worker. The sink is closed by stop.
func newWorker(cfg workerConfig, sink Sink, log *zap.Logger) (*worker, error) {
	cfg.setDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("sink", cfg.Name))
	w := &worker{
		cfg: cfg, sink: sink, log: log, m: metricsFor(cfg.Name, cfg.Type),
		q:       make(chan *Event, cfg.QueueSize),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.hard, w.cancel = context.WithCancel(context.Background())
	if rs, ok := sink.(readySink); ok {
		w.ready = rs.Ready()
	}
	if cfg.SpoolDir != "" {
		sp, err := acquireSpool(cfg.SpoolDir, cfg.SyncInterval, func(b BadRange) {
			w.m.corrupt.Add(float64(b.Length))
			w.log.Error("skipped corrupt bytes in audit spool",
				zap.String("file", b.File), zap.Int64("offset", b.Offset), zap.Int64("bytes", b.Length))
		}, func(err error) {
			w.log.Error("syncing audit spool", zap.Error(err))
			w.setErr(err)
		})
		if err != nil {
			w.cancel()
			return nil, err
		}
		w.spool = sp
		if cfg.SpoolMaxSize > 0 {
			sp.SetMaxSize(cfg.SpoolMaxSize)
		}
		if cfg.Disk {
			// Wake the worker per batch, not per event.
			sp.SetNotifyAt(cfg.BatchSize)
		}
		if sp.Pending() || cfg.Disk {
			w.spooling.Store(true)
		}
	}
	registerWorker(w)
	go w.run()
	go w.watch()
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
	if w.spool != nil && (w.cfg.Disk || w.spooling.Load()) {
		if !w.trySpool(ev) {
			w.full(ev)
		}
		return
	}
	if w.tryQueue(ev) {
		return
	}
	w.signal()
	if w.spool != nil {
		w.spooling.Store(true)
		if w.trySpool(ev) {
			return
		}
	}
	w.full(ev)
}

// tryQueue puts ev in the memory queue if it has room.
func (w *worker) tryQueue(ev *Event) bool {
	e := eventPool.Get().(*Event)
	*e = *ev
	select {
	case w.q <- e:
	default:
		releaseEvent(e)
		return false
	}
	if w.qOldest.Load() == 0 {
		w.qOldest.CompareAndSwap(0, ev.Time.UnixNano())
	}
	if len(w.q)+int(w.pendingN.Load()) >= w.cfg.BatchSize {
		w.signal()
	}
	return true
}

// trySpool writes ev to the spool unless the spool is full (max size, or
// a write failed within the last second).
func (w *worker) trySpool(ev *Event) bool {
	if w.spoolFull() {
		return false
	}
	bp := encPool.Get().(*[]byte)
	b := ev.AppendJSON((*bp)[:0])
	err := w.spool.Append(b)
	*bp = b
	encPool.Put(bp)
	if err != nil {
		if w.spoolFailed.Swap(time.Now().Add(time.Second).UnixNano()) < time.Now().UnixNano() {
			w.log.Error("writing audit spool failed; the sink counts as full for 1s", zap.Error(err))
		}
		w.setErr(err)
		return false
	}
	w.m.spooledN.Add(1)
	w.m.spooled.Inc()
	return true
}

func (w *worker) spoolFull() bool {
	return w.cfg.SpoolMaxSize > 0 && w.spool.Size() >= w.cfg.SpoolMaxSize ||
		w.spoolFailed.Load() > time.Now().UnixNano()
}

// isFull reports whether an event enqueued now would find no room (what
// on_full reject answers 503 for).
func (w *worker) isFull() bool {
	if w.spool != nil {
		return (w.cfg.Disk || w.spooling.Load() || len(w.q) >= cap(w.q)) && w.spoolFull()
	}
	return len(w.q) >= cap(w.q)
}

// full applies on_full to an event the sink has no room for.
func (w *worker) full(ev *Event) {
	if w.cfg.OnFull == onFullDropOldest && w.dropOldest() {
		if w.tryQueue(ev) || w.spool != nil && (w.cfg.Disk || w.spooling.Load()) && w.trySpool(ev) {
			return
		}
	}
	// block, reject (for requests already admitted), or drop_oldest with
	// nothing older to drop: wait for room up to block_timeout.
	t := time.NewTimer(w.cfg.BlockTimeout)
	defer t.Stop()
	var poll <-chan time.Time
	if w.spool != nil {
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		poll = tk.C
	}
	q := w.q
	if w.spool != nil && (w.cfg.Disk || w.spooling.Load()) {
		q = nil // the spool is what is full
	}
	e := eventPool.Get().(*Event)
	*e = *ev
	defer func() {
		if e != nil {
			releaseEvent(e)
		}
	}()
	for {
		select {
		case q <- e:
			e = nil
			w.m.full(actionBlocked)
			return
		case <-poll:
			if !w.spoolFull() && w.trySpool(ev) {
				w.m.full(actionBlocked)
				return
			}
		case <-t.C:
			w.drop(ev, "sink full for block_timeout ("+w.cfg.OnFull+")")
			return
		case <-w.closing:
			w.drop(ev, "sink stopping")
			return
		}
	}
}

// dropOldest makes room for one event by dropping the oldest queued event,
// or the oldest spool segment not being delivered. It reports whether it
// dropped anything.
func (w *worker) dropOldest() bool {
	if w.spool == nil || !(w.cfg.Disk || w.spooling.Load()) {
		select {
		case old := <-w.q:
			w.m.full(actionDroppedOldest)
			w.drop(old, "on_full drop_oldest: made room for a newer event")
			releaseEvent(old)
			return true
		default:
			return len(w.q) < cap(w.q) // the worker took some meanwhile
		}
	}
	n, first, last, err := w.spool.DropOldest()
	if err != nil {
		w.log.Error("dropping the oldest audit spool segment", zap.Error(err))
		return false
	}
	if n == 0 {
		return false
	}
	w.m.fullN(actionDroppedOldest, n)
	w.m.droppedN.Add(int64(n))
	w.m.dropped.Add(float64(n))
	w.log.Error("audit events dropped", zap.String("reason", "on_full drop_oldest: spool full, dropped its oldest segment"),
		zap.Int("count", n), zap.String("first_request_id", first), zap.String("last_request_id", last))
	return true
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
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
		pending = make([]*Event, 0, w.cfg.BatchSize)
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
			if len(w.q) == 0 {
				w.qOldest.Store(0)
			}
			if len(pending) > 0 {
				w.sendOldest.Store(pending[0].Time.UnixNano())
			}
			if len(pending) == 0 || (len(pending) < w.cfg.BatchSize && !timed) {
				break // a partial batch waits for the tick
			}
			if !w.deliver(encode()) {
				w.shutdown(pending)
				return
			}
			for i, e := range pending {
				releaseEvent(e)
				pending[i] = nil
			}
			pending = pending[:0]
			w.pendingN.Store(0)
			w.sendOldest.Store(0)
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
		if !w.cfg.Disk {
			w.spooling.Store(false)
		}
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
		if !w.cfg.Disk && !w.spool.Pending() {
			w.spooling.Store(false)
		}
		return true
	}
	recs := make([]record, len(b.Records))
	for i, r := range b.Records {
		recs[i] = record{data: r}
	}
	if t, ok := recordTime(b.Records[0]); ok {
		w.sendOldest.Store(t.UnixNano())
	}
	if !w.deliverSpooled(recs) {
		return false
	}
	w.spool.Commit(b)
	w.sendOldest.Store(0)
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
			if since := w.failingSince.Swap(0); since != 0 {
				w.log.Info("audit sink delivers again", zap.Duration("failed_for", time.Since(time.Unix(0, since)).Round(time.Millisecond)))
			}
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
		if w.failingSince.CompareAndSwap(0, start.UnixNano()) {
			w.log.Warn("audit sink does not deliver; events wait (queue, spool) and are retried until it does", zap.Error(err))
		}
		w.log.Debug("audit batch not delivered; retrying", zap.Int("events", len(recs)),
			zap.Int("attempt", attempt+1), zap.Duration("retry_in", d), zap.Error(err))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-w.ready:
			t.Stop() // the destination is back: retry now
		case <-w.hard.Done():
			t.Stop()
			return false
		}
	}
}

// readySink is a Sink that knows when its destination is reachable again
// (the NATS sink: its connection reconnected).
type readySink interface {
	Ready() <-chan struct{}
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
func (w *worker) shutdown(pending []*Event) {
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

// backlogAge is the age of the oldest event the sink has not delivered:
// the batch being delivered, or the memory queue's first event; 0 when
// there is none. Spooled events are counted from when the worker reads
// them, within a flush_interval of their arrival: events are spooled in
// arrival order behind the queued ones, and the worker reads the spool as
// soon as the queue is empty.
func (w *worker) backlogAge(now time.Time) time.Duration {
	oldest := w.sendOldest.Load()
	if q := w.qOldest.Load(); q != 0 && (oldest == 0 || q < oldest) {
		oldest = q
	}
	if oldest == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, oldest)))
}

func (w *worker) spoolBytes() int64 {
	if w.spool == nil {
		return 0
	}
	return w.spool.Size()
}

// watch logs when the backlog gets older than alert_after (again every
// alert_after while it stays so), and when it recovers.
func (w *worker) watch() {
	every := min(time.Second, w.cfg.AlertAfter/4)
	t := time.NewTicker(every)
	defer t.Stop()
	var alerted time.Time
	for {
		select {
		case <-w.closing:
			return
		case now := <-t.C:
			age := w.backlogAge(now)
			switch {
			case age > w.cfg.AlertAfter && now.Sub(alerted) >= w.cfg.AlertAfter:
				alerted = now
				fields := []zap.Field{zap.Duration("oldest_undelivered_age", age), zap.Duration("alert_after", w.cfg.AlertAfter),
					zap.Int("queue_depth", len(w.q)), zap.Int64("spool_bytes", w.spoolBytes())}
				if e := w.lastErr.Load(); e != nil {
					fields = append(fields, zap.String("last_error", e.msg))
				}
				w.log.Warn("audit backlog is older than alert_after", fields...)
			case !alerted.IsZero() && age <= w.cfg.AlertAfter:
				alerted = time.Time{}
				w.log.Info("audit backlog back under alert_after", zap.Duration("oldest_undelivered_age", age))
			}
		}
	}
}

func (w *worker) isClosed() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.closed
}

// reject answers a request 503 because the sink (on_full reject) cannot
// record its event. It logs once a second at most, with the count.
func (w *worker) reject(rw http.ResponseWriter, r *http.Request) error {
	w.m.full(actionRejected)
	n := w.rejected.Add(1)
	now := time.Now().UnixNano()
	if last := w.rejectLogged.Load(); now-last >= int64(time.Second) && w.rejectLogged.CompareAndSwap(last, now) {
		w.rejected.Add(-n)
		w.log.Error("requests rejected: audit sink full (on_full reject)", zap.Int64("rejected", n),
			zap.Int("queue_depth", len(w.q)), zap.Int64("spool_bytes", w.spoolBytes()),
			zap.String("method", r.Method), zap.String("path", r.URL.Path))
	}
	rw.Header().Set("Retry-After", "1")
	return deny.Respond(rw, r, http.StatusServiceUnavailable, "audit_unavailable",
		"audit sink "+w.cfg.Name+" cannot record events")
}
