package natsstore

// The local copy: what makes a gateway run without NATS.
//
// Every value this gateway reads from or writes to NATS is also kept in a
// directory of its own (the local copy, files laid out as Caddy's file
// storage lays them out). While NATS answers, NATS is the truth: reads go
// there, and the copy follows. While it does not (not connected, or an
// operation failed; a probe every second finds out when it answers again):
//
//   - reads come from the copy, at once: a config load (the internal CA,
//     certificates, rate_limit state) never waits on NATS;
//   - writes go to the copy and to a journal of queued writes
//     (pending.json), synced to disk; each remembers the value NATS had
//     when it was queued (its base: the copy's value then);
//   - locks are taken in this process only (one replica alone cannot
//     tell whether another issues the same certificate meanwhile).
//
// When NATS answers again the queue is flushed, each write applied only if
// NATS still holds its base (a compare-and-set on the key's revision): a
// value another replica wrote meanwhile wins, and the copy takes it. So an
// internal CA created by a replica that started alone during an outage
// never replaces the fleet's.
//
// Writes of a config that has not started are held in memory, per config,
// and reach the copy and NATS only once that config runs: `caddy validate`
// (which provisions, so Caddy's pki app creates its CA if storage has
// none) writes nothing anywhere, and buckets are created by the first
// write of a running config, never by a read.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/atomicfile"
	"github.com/apigate/gateway/internal/natsconn"
)

// probeEvery is how often, while NATS does not answer, a read checks
// whether it does again.
var probeEvery = time.Second

// fallbackRead bounds a NATS read (or the storage's timeout, if
// shorter): a stalled NATS (a JetStream without a stream leader answers
// nothing until the operation's timeout) costs a config load at most this
// once, then the storage reads the copy until a probe succeeds.
const fallbackRead = time.Second

// readCtx bounds one NATS read.
func (l *local) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(l.timeout, fallbackRead))
}

// pendingOp is a write queued while NATS did not answer.
type pendingOp struct {
	// Delete is true for a delete (the value is in the copy otherwise).
	Delete bool `json:"delete,omitempty"`
	// Base is the SHA-256 of the value NATS held, as far as this gateway
	// knew, when the write was queued ("" = none): the write applies only
	// if NATS still holds it.
	Base string `json:"base"`
	// At is when it was last written.
	At time.Time `json:"at"`
}

// journal is the file of queued writes.
type journal struct {
	V       int                  `json:"v"`
	Bucket  string               `json:"bucket"`
	Pending map[string]pendingOp `json:"pending"`
}

// local is the local copy of one bucket, shared by every config (and
// every module) of the process that uses that bucket on those servers
// with that directory.
type local struct {
	remote  *KV
	conn    *natsconn.Conn
	release func()
	disk    *disk
	journal string
	bucket  string
	timeout time.Duration
	log     *zap.Logger

	mu      sync.Mutex // pending, and the copy's files of pending keys
	pending map[string]pendingOp

	lockMu     sync.Mutex
	localLocks map[string]bool
	warnedLock map[string]bool

	down    atomic.Bool // NATS did not answer; reset by a successful probe
	running atomic.Bool // a config using it has started: queued writes may go out
	kick    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	unhook  func()

	closeOnce sync.Once
}

// newLocal opens the copy in dir (creating it), reads its journal, and
// starts the goroutine that probes NATS and flushes the queue. remote is
// the NATS side on conn; release is called on close.
func newLocal(dir string, remote *KV, conn *natsconn.Conn, release func(), log *zap.Logger) (*local, error) {
	if log == nil {
		log = zap.NewNop()
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("local copy %s: %w", dir, err)
	}
	l := &local{
		remote: remote, conn: conn, release: release,
		disk: &disk{dir: data}, journal: filepath.Join(dir, "pending.json"),
		bucket: remote.cfg.Bucket, timeout: remote.cfg.Timeout,
		log:     log.With(zap.String("bucket", remote.cfg.Bucket), zap.String("local_copy", dir)),
		pending: map[string]pendingOp{}, localLocks: map[string]bool{}, warnedLock: map[string]bool{},
		kick: make(chan struct{}, 1),
	}
	b, err := os.ReadFile(l.journal)
	switch {
	case err == nil:
		var j journal
		if err := json.Unmarshal(b, &j); err != nil {
			return nil, fmt.Errorf("local copy %s: reading queued writes: %w", l.journal, err)
		}
		for k, op := range j.Pending {
			l.pending[k] = op
		}
		if n := len(l.pending); n > 0 {
			l.log.Info("storage nats: writes queued while NATS was unreachable wait to be applied", zap.Int("writes", n))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("local copy: %w", err)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if conn != nil {
		l.unhook = conn.OnReconnect(func() { signalCh(l.kick) })
	}
	l.wg.Add(1)
	go l.loop()
	open.Store(l, struct{}{})
	return l, nil
}

// Destruct stops the loop and releases NATS (the last config using the
// copy is gone). Queued writes stay in the journal for the next start.
func (l *local) Destruct() error {
	l.closeOnce.Do(func() {
		open.Delete(l)
		l.cancel()
		l.wg.Wait()
		if l.unhook != nil {
			l.unhook()
		}
		l.remote.Close()
		if l.release != nil {
			l.release()
		}
	})
	return nil
}

func signalCh(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// usable reports whether operations go to NATS: connected, and no
// operation has failed since the last successful probe.
func (l *local) usable() bool {
	if l.down.Load() {
		return false
	}
	if l.conn != nil && !l.conn.NATS().IsConnected() {
		l.markDown(errors.New("not connected to NATS"))
		return false
	}
	return true
}

// markDown switches to the copy until a probe succeeds.
func (l *local) markDown(err error) {
	if l.down.CompareAndSwap(false, true) {
		l.log.Warn("storage nats: NATS does not answer; reading the local copy and queueing writes until it does", zap.Error(err))
		signalCh(l.kick)
	}
}

// startRunning lets queued writes go out: a config using the copy runs.
func (l *local) startRunning() {
	if l.running.CompareAndSwap(false, true) {
		signalCh(l.kick)
	}
}

// loop probes NATS while it does not answer, and flushes the queue when
// it does, until Destruct.
func (l *local) loop() {
	defer l.wg.Done()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.kick:
		case <-tick.C:
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					l.log.Error("storage nats: local copy loop panicked", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				}
			}()
			if l.down.Load() && !l.probe() {
				return
			}
			if l.running.Load() && l.queued() > 0 {
				l.flush()
			}
		}()
	}
}

// probe checks whether NATS answers again (one read), and switches back.
func (l *local) probe() bool {
	if l.conn != nil && !l.conn.NATS().IsConnected() {
		return false
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	if _, _, err := l.remote.entry(ctx, "nats_storage_probe"); err != nil {
		return false
	}
	if l.down.CompareAndSwap(true, false) {
		l.log.Info("storage nats: NATS answers again; reading from it", zap.Int("queued_writes", l.queued()))
	}
	return true
}

func (l *local) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// Queued returns how many writes wait for NATS (for status pages).
func (l *local) Queued() int { return l.queued() }

// flush applies the queued writes whose base NATS still holds, and drops
// (taking NATS's value into the copy) those whose key changed meanwhile.
// A NATS failure stops it (the queue stays).
func (l *local) flush() {
	l.mu.Lock()
	keys := make([]string, 0, len(l.pending))
	for k := range l.pending {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	sort.Strings(keys)
	applied, kept := 0, 0
	for _, k := range keys {
		if l.ctx.Err() != nil || !l.usable() {
			return
		}
		l.mu.Lock()
		op, ok := l.pending[k]
		var val []byte
		var verr error
		if ok && !op.Delete {
			val, verr = l.disk.load(k)
		}
		l.mu.Unlock()
		if !ok {
			continue
		}
		cur, err := l.apply(k, op, val, verr)
		switch {
		case errors.Is(err, errChanged):
			// Another replica wrote the key meanwhile: its value wins.
			l.log.Warn("storage nats: a write queued while NATS was unreachable is dropped: the key changed in NATS meanwhile, and NATS's value is kept",
				zap.String("key", k), zap.Time("queued_at", op.At))
			kept++
			l.settle(k, op, cur, cur == nil)
		case err != nil:
			if l.ctx.Err() == nil {
				l.markDown(err)
			}
			return
		default:
			applied++
			l.settle(k, op, val, op.Delete)
		}
	}
	if applied+kept > 0 {
		l.log.Info("storage nats: applied the writes queued while NATS was unreachable",
			zap.Int("applied", applied), zap.Int("dropped_for_newer", kept), zap.Int("still_queued", l.queued()))
	}
}

// apply writes op (val: its value, or verr when the copy lost it) to NATS
// if NATS still holds op's base (compare-and-set on the key's revision).
// errChanged means NATS holds another value, cur (nil: none), which wins.
func (l *local) apply(k string, op pendingOp, val []byte, verr error) (cur []byte, err error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	cur, rev, err := l.remote.entry(ctx, k)
	if err != nil {
		return nil, err
	}
	switch {
	case (cur == nil && op.Base != "") || (cur != nil && valueHash(cur) != op.Base):
		return cur, errChanged
	case op.Delete:
		if rev != 0 {
			return cur, l.remote.deleteAt(ctx, k, rev)
		}
		return cur, nil
	case verr != nil:
		// the copy lost the value (deleted by hand): nothing to apply
		l.log.Warn("storage nats: a queued write's value is missing from the local copy; dropping it", zap.String("key", k), zap.Error(verr))
		return cur, nil
	default:
		return cur, l.remote.putAt(ctx, k, val, rev)
	}
}

// applyLoaded writes a write held while its config loaded to NATS, as
// apply does (so that of two replicas creating one key, say an internal
// CA, the first wins), while NATS answers; it reports false when it did
// not (NATS failed, or a write of the key is queued already): the caller
// queues it. This is the normal start: nothing is queued.
func (l *local) applyLoaded(k string, value []byte, del bool, base string) bool {
	if _, queued := l.pendingOf(k); queued || !l.usable() || l.ctx.Err() != nil {
		return false
	}
	cur, err := l.apply(k, pendingOp{Delete: del, Base: base}, value, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, errChanged):
		l.log.Info("storage nats: a write made while the config loaded gives way to the value another process wrote to NATS meanwhile",
			zap.String("key", k))
		value, del = cur, cur == nil
	case err != nil:
		if l.ctx.Err() == nil {
			l.markDown(err)
		}
		return false
	}
	if del {
		l.disk.delFile(k)
	} else if err := l.disk.put(k, value, false); err != nil && !errors.Is(err, errUnsafeKey) {
		l.log.Debug("storage nats: updating the local copy", zap.String("key", k), zap.Error(err))
	}
	return true
}

// settle ends key k's queued op now that NATS holds value (deleted: gone):
// the copy takes it, unless the key was written again meanwhile, in which
// case the new write waits with NATS's value as its base.
func (l *local) settle(k string, op pendingOp, value []byte, deleted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, ok := l.pending[k]
	if !ok {
		return
	}
	if !now.At.Equal(op.At) || now.Delete != op.Delete {
		now.Base = ""
		if !deleted {
			now.Base = valueHash(value)
		}
		l.pending[k] = now
	} else {
		delete(l.pending, k)
		if deleted {
			l.disk.delFile(k)
		} else {
			_ = l.disk.put(k, value, false)
		}
	}
	if err := l.saveJournal(); err != nil {
		l.log.Error("storage nats: writing the journal of queued writes", zap.Error(err))
	}
}

// saveJournal writes the queue (l.mu held).
func (l *local) saveJournal() error {
	if len(l.pending) == 0 {
		err := os.Remove(l.journal)
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		return err
	}
	b, err := json.Marshal(journal{V: 1, Bucket: l.bucket, Pending: l.pending})
	if err != nil {
		return err
	}
	return atomicfile.Write(l.journal, b, 0o600)
}

// queue writes (or deletes) k in the copy and queues it for NATS. base is
// the value NATS held as far as the caller knows; without one (haveBase
// false) the copy's current value is taken.
func (l *local) queue(k string, value []byte, del bool, base string, haveBase bool) error {
	if l.ctx.Err() != nil {
		return errClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	op, had := l.pending[k]
	if !had {
		if haveBase {
			op.Base = base
		} else {
			op.Base = l.disk.hash(k)
		}
	}
	changed := !had || op.Delete != del
	op.Delete, op.At = del, time.Now().UTC()
	prev, hadPrev := l.pending[k]
	l.pending[k] = op
	if changed {
		if err := l.saveJournal(); err != nil {
			if hadPrev {
				l.pending[k] = prev
			} else {
				delete(l.pending, k)
			}
			return fmt.Errorf("storage nats: NATS does not answer and the write could not be queued: %w", err)
		}
	}
	var err error
	if del {
		err = l.disk.del(k)
	} else {
		err = l.disk.put(k, value, true)
	}
	if err != nil {
		return fmt.Errorf("storage nats: NATS does not answer and the local copy failed: %w", err)
	}
	signalCh(l.kick)
	return nil
}

// errClosed is returned by writes after the last config using the copy
// ended (a certificate obtained in the background after a shutdown).
var errClosed = errors.New("storage nats: closed")

// pendingOf returns k's queued op.
func (l *local) pendingOf(k string) (pendingOp, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	op, ok := l.pending[k]
	return op, ok
}

// pendingBelow returns the queued puts and deletes strictly below dir.
func (l *local) pendingBelow(dir string) (puts, dels map[string]bool) {
	prefix := dir
	if prefix != "" {
		prefix += "/"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	puts, dels = map[string]bool{}, map[string]bool{}
	for k, op := range l.pending {
		if strings.HasPrefix(k, prefix) && k != dir {
			if op.Delete {
				dels[k] = true
			} else {
				puts[k] = true
			}
		}
	}
	return puts, dels
}

// refresh keeps NATS's value of k in the copy (not for a queued key).
func (l *local) refresh(k string, value []byte, deleted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[k]; ok {
		return
	}
	if deleted {
		l.disk.delFile(k)
		return
	}
	if err := l.disk.put(k, value, false); err != nil && !errors.Is(err, errUnsafeKey) {
		l.log.Debug("storage nats: updating the local copy", zap.String("key", k), zap.Error(err))
	}
}

// failed reports whether err from a NATS operation means NATS does not
// answer (and switches to the copy); false for the caller's own
// cancellation.
func (l *local) failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	l.markDown(err)
	return true
}

func (l *local) load(ctx context.Context, k string) ([]byte, error) {
	if op, ok := l.pendingOf(k); ok {
		if op.Delete {
			return nil, notExist(k)
		}
		return l.disk.load(k)
	}
	if l.usable() {
		rctx, cancel := l.readCtx(ctx)
		defer cancel()
		v, err := l.remote.Load(rctx, k)
		switch {
		case err == nil:
			l.refresh(k, v, false)
			return v, nil
		case errors.Is(err, fs.ErrNotExist):
			l.refresh(k, nil, true)
			return nil, err
		case !l.failed(ctx, err):
			return nil, err
		}
	}
	return l.disk.load(k)
}

func (l *local) store(ctx context.Context, k string, value []byte) error {
	if _, queued := l.pendingOf(k); !queued && l.usable() {
		err := l.remote.Store(ctx, k, value)
		if err == nil {
			l.refresh(k, value, false)
			return nil
		}
		if !l.failed(ctx, err) {
			return err
		}
	}
	return l.queue(k, value, false, "", false)
}

// below returns every key strictly below dir: NATS's (or the copy's),
// with the queued writes applied.
func (l *local) below(ctx context.Context, dir string) ([]string, error) {
	var sub []string
	var err error
	fromNATS := false
	if l.usable() {
		rctx, cancel := l.readCtx(ctx)
		sub, err = l.remote.below(rctx, dir)
		cancel()
		if err == nil {
			fromNATS = true
		} else if !l.failed(ctx, err) {
			return nil, err
		}
	}
	if !fromNATS {
		if sub, err = l.disk.below(ctx, dir); err != nil {
			return nil, err
		}
	}
	puts, dels := l.pendingBelow(dir)
	if len(puts)+len(dels) == 0 {
		return sub, nil
	}
	set := map[string]bool{}
	for _, p := range sub {
		if !dels[p] {
			set[p] = true
		}
	}
	for p := range puts {
		set[p] = true
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

func (l *local) exists(ctx context.Context, k string) (bool, error) {
	if op, ok := l.pendingOf(k); ok {
		return !op.Delete, nil
	}
	if l.usable() {
		rctx, cancel := l.readCtx(ctx)
		ok, err := l.remote.exists(rctx, k)
		cancel()
		if err == nil {
			if ok {
				return true, nil
			}
			puts, _ := l.pendingBelow(k)
			return len(puts) > 0, nil
		}
		if !l.failed(ctx, err) {
			return false, err
		}
	}
	if _, err := l.disk.load(k); err == nil {
		return true, nil
	}
	sub, err := l.below(ctx, k)
	return len(sub) > 0, err
}

func (l *local) stat(ctx context.Context, k string) (certmagic.KeyInfo, error) {
	if op, ok := l.pendingOf(k); ok {
		if op.Delete {
			return certmagic.KeyInfo{}, notExist(k)
		}
		return l.disk.stat(k)
	}
	if l.usable() {
		rctx, cancel := l.readCtx(ctx)
		ki, err := l.remote.Stat(rctx, k)
		cancel()
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				if sub, _ := l.below(ctx, k); len(sub) > 0 {
					return certmagic.KeyInfo{Key: k}, nil
				}
			}
			return ki, err
		}
		if !l.failed(ctx, err) {
			return ki, err
		}
	}
	return l.disk.stat(k)
}

// del deletes k and everything below it.
func (l *local) del(ctx context.Context, k string) error {
	puts, dels := l.pendingBelow(k)
	_, queued := l.pendingOf(k)
	if !queued && len(puts)+len(dels) == 0 && l.usable() {
		err := l.remote.Delete(ctx, k)
		if err == nil {
			l.mu.Lock()
			_ = l.disk.del(k)
			l.mu.Unlock()
			return nil
		}
		if !l.failed(ctx, err) {
			return err
		}
	}
	// Queue a delete of every key the copy knows there; keys only NATS
	// has stay (a later cleanup deletes them).
	keys, err := l.disk.below(ctx, k)
	if err != nil {
		return err
	}
	if _, err := l.disk.load(k); err == nil || queued {
		keys = append(keys, k)
	}
	for p := range puts {
		keys = append(keys, p)
	}
	for _, p := range keys {
		if err := l.queue(p, nil, true, "", false); err != nil {
			return err
		}
	}
	return nil
}

// tryLock takes the lock in NATS, or, while NATS does not answer, in this
// process.
func (l *local) tryLock(ctx context.Context, name string) (bool, error) {
	if l.usable() {
		ok, err := l.remote.TryLock(ctx, name)
		if err == nil {
			return ok, nil
		}
		if !l.failed(ctx, err) {
			return false, err
		}
	}
	l.lockMu.Lock()
	defer l.lockMu.Unlock()
	if l.localLocks[name] {
		return false, nil
	}
	l.localLocks[name] = true
	if !l.warnedLock[name] {
		l.warnedLock[name] = true
		l.log.Warn("storage nats: lock taken in this process only, NATS does not answer: another replica may do the same work meanwhile", zap.String("lock", name))
	}
	return true, nil
}

func (l *local) lock(ctx context.Context, name string) error {
	return lockLoop(ctx, name, l.tryLock, l.log)
}

func (l *local) unlock(ctx context.Context, name string) error {
	l.lockMu.Lock()
	if l.localLocks[name] {
		delete(l.localLocks, name)
		l.lockMu.Unlock()
		return nil
	}
	l.lockMu.Unlock()
	return l.remote.Unlock(ctx, name)
}
