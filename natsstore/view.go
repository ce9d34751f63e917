package natsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// configStorage is the certmagic.Storage one config gets: the shared
// local copy (local.go), and the writes this config made before it
// started, held here until it runs (see local.go). Its methods never wait
// on NATS longer than one operation's timeout, and not at all while NATS
// is known not to answer.
type configStorage struct {
	l        *local
	natsOpts natsconn.Options
	// running reports whether this config is the one Caddy runs.
	running func() bool
	// done ends with the config: held writes of a config that never ran
	// (caddy validate, a load that failed) are dropped then.
	done <-chan struct{}
	log  *zap.Logger

	started atomic.Bool
	mu      sync.Mutex
	held    map[string]heldOp
}

// heldOp is a write of a config that has not started yet.
type heldOp struct {
	value []byte
	del   bool
	base  string // what NATS held before it, as its queued write's base
}

func newConfigStorage(l *local, opts natsconn.Options, running func() bool, done <-chan struct{}, log *zap.Logger) *configStorage {
	if log == nil {
		log = zap.NewNop()
	}
	s := &configStorage{l: l, natsOpts: opts, running: running, done: done, log: log, held: map[string]heldOp{}}
	// Until the config runs, its reads use the copy as any config's do,
	// but the journal of an earlier run is flushed only once one does.
	go s.waitRunning()
	return s
}

// isRunning reports whether the config runs, moving its held writes to
// the copy's queue the first time it does.
func (s *configStorage) isRunning() bool {
	if s.started.Load() {
		return true
	}
	if !s.running() {
		return false
	}
	s.promote()
	return true
}

func (s *configStorage) promote() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started.Load() {
		return
	}
	keys := make([]string, 0, len(s.held))
	for k := range s.held {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		op := s.held[k]
		if s.l.applyLoaded(k, op.value, op.del, op.base) {
			continue
		}
		if err := s.l.queue(k, op.value, op.del, op.base, true); err != nil {
			s.log.Error("storage nats: a write made while the config loaded is lost", zap.String("key", k), zap.Error(err))
		}
	}
	s.held = nil
	s.started.Store(true)
	s.l.startRunning()
}

// hold keeps a write of a config that has not started, and makes sure it
// is applied once the config runs (or dropped if it never does).
func (s *configStorage) hold(ctx context.Context, k string, value []byte, del bool) {
	base := s.baseOf(ctx, k)
	s.mu.Lock()
	if s.started.Load() {
		s.mu.Unlock()
		s.write(ctx, k, value, del)
		return
	}
	if op, ok := s.held[k]; ok {
		base = op.base
	}
	s.held[k] = heldOp{value: append([]byte(nil), value...), del: del, base: base}
	s.mu.Unlock()
}

func (s *configStorage) write(ctx context.Context, k string, value []byte, del bool) {
	var err error
	if del {
		err = s.l.del(ctx, k)
	} else {
		err = s.l.store(ctx, k, value)
	}
	if err != nil {
		s.log.Error("storage nats: writing", zap.String("key", k), zap.Error(err))
	}
}

// waitRunning applies the held writes once the config runs (and lets the
// copy flush its queue), or drops them when the config ends first.
func (s *configStorage) waitRunning() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			n := len(s.held)
			s.held = map[string]heldOp{}
			s.mu.Unlock()
			if n > 0 && !s.started.Load() {
				s.log.Debug("storage nats: writes of a config that never ran are dropped (caddy validate, or a failed load)", zap.Int("writes", n))
			}
			return
		case <-t.C:
			if s.isRunning() {
				return
			}
		}
	}
}

// baseOf returns the hash of what NATS holds at k ("" for nothing), from
// NATS when it answers, else from the copy.
func (s *configStorage) baseOf(ctx context.Context, k string) string {
	if _, queued := s.l.pendingOf(k); queued {
		// this process's own queued write comes first: it is the value
		// NATS will hold (the copy's), not the value NATS holds now
		return s.l.disk.hash(k)
	}
	if s.l.usable() {
		v, _, err := s.l.remote.entry(ctx, k)
		if err == nil {
			if v == nil {
				return ""
			}
			return valueHash(v)
		}
		s.l.failed(ctx, err)
	}
	return s.l.disk.hash(k)
}

// heldOf returns k's held write.
func (s *configStorage) heldOf(k string) (heldOp, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, ok := s.held[k]
	return op, ok
}

// heldBelow returns the held puts and deletes strictly below dir.
func (s *configStorage) heldBelow(dir string) (puts, dels []string) {
	prefix := dir
	if prefix != "" {
		prefix += "/"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, op := range s.held {
		if strings.HasPrefix(k, prefix) && k != dir {
			if op.del {
				dels = append(dels, k)
			} else {
				puts = append(puts, k)
			}
		}
	}
	return puts, dels
}

// opCtx is the context of one storage operation: the caller's values
// without its cancellation. As with Caddy's file storage, an operation
// runs to its end (each NATS call bounded by the storage's timeout) when
// the caller's context ends meanwhile: a config replaced by a reload (the
// docker app's first route set, right after a start) cancels its context
// while its certificate jobs still read, write and unlock, and those must
// not fail half-way (certmagic logged a certificate the next config
// obtained as "obtaining certificate: ... context canceled"). Only Lock's
// wait for a lock another holder has ends with the caller's context.
func opCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// Store puts value at key.
func (s *configStorage) Store(ctx context.Context, key string, value []byte) error {
	ctx = opCtx(ctx)
	k := normalizePath(key)
	if k == "" {
		return fmt.Errorf("invalid storage key %q: empty", key)
	}
	if !s.isRunning() {
		s.hold(ctx, k, value, false)
		return nil
	}
	return s.l.store(ctx, k, value)
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *configStorage) Load(ctx context.Context, key string) ([]byte, error) {
	ctx = opCtx(ctx)
	k := normalizePath(key)
	if k == "" {
		return nil, notExist(key)
	}
	if op, ok := s.heldOf(k); ok {
		if op.del {
			return nil, notExist(key)
		}
		return append([]byte(nil), op.value...), nil
	}
	v, err := s.l.load(ctx, k)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return nil, notExist(key)
	}
	return v, err
}

// Delete deletes key and, if it is a directory, every key below it. A key
// that does not exist is not an error.
func (s *configStorage) Delete(ctx context.Context, key string) error {
	ctx = opCtx(ctx)
	k := normalizePath(key)
	if s.isRunning() {
		return s.l.del(ctx, k)
	}
	keys, err := s.l.below(ctx, k)
	if err != nil {
		return err
	}
	puts, _ := s.heldBelow(k)
	keys = append(keys, puts...)
	if k != "" {
		keys = append(keys, k)
	}
	for _, p := range keys {
		s.hold(ctx, p, nil, true)
	}
	return nil
}

// Exists reports whether key is a stored value or a directory.
func (s *configStorage) Exists(ctx context.Context, key string) bool {
	ctx = opCtx(ctx)
	k := normalizePath(key)
	if op, ok := s.heldOf(k); ok {
		return !op.del
	}
	if puts, _ := s.heldBelow(k); len(puts) > 0 {
		return true
	}
	ok, err := s.l.exists(ctx, k)
	return err == nil && ok
}

// List returns the keys below dir (see KV.List).
func (s *configStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	ctx = opCtx(ctx)
	d := normalizePath(dir)
	sub, err := s.l.below(ctx, d)
	if err != nil {
		return nil, err
	}
	puts, dels := s.heldBelow(d)
	if len(puts)+len(dels) > 0 {
		gone := map[string]bool{}
		for _, p := range dels {
			gone[p] = true
		}
		kept := sub[:0:0]
		for _, p := range sub {
			if !gone[p] {
				kept = append(kept, p)
			}
		}
		sub = append(kept, puts...)
	}
	return listOf(d, sub, recursive), nil
}

// Stat describes key: a stored value (terminal) or a directory.
func (s *configStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	ctx = opCtx(ctx)
	k := normalizePath(key)
	if op, ok := s.heldOf(k); ok {
		if op.del {
			return certmagic.KeyInfo{}, notExist(key)
		}
		return certmagic.KeyInfo{Key: key, Modified: time.Now(), Size: int64(len(op.value)), IsTerminal: true}, nil
	}
	if puts, _ := s.heldBelow(k); len(puts) > 0 {
		return certmagic.KeyInfo{Key: key}, nil
	}
	ki, err := s.l.stat(ctx, k)
	if err == nil {
		ki.Key = key
	}
	return ki, err
}

// Lock takes the named lock (in NATS, or in this process while NATS does
// not answer), waiting until ctx ends.
func (s *configStorage) Lock(ctx context.Context, name string) error {
	if encodeKey(name) == "" {
		return fmt.Errorf("invalid lock name %q: empty", name)
	}
	return s.l.lock(ctx, name)
}

// TryLock takes the named lock if it is free.
func (s *configStorage) TryLock(ctx context.Context, name string) (bool, error) {
	ctx = opCtx(ctx)
	if encodeKey(name) == "" {
		return false, fmt.Errorf("invalid lock name %q: empty", name)
	}
	return s.l.tryLock(ctx, name)
}

// Unlock releases a lock taken by this storage.
func (s *configStorage) Unlock(ctx context.Context, name string) error {
	ctx = opCtx(ctx)
	return s.l.unlock(ctx, name)
}

// String names the storage in logs.
func (s *configStorage) String() string { return "nats:" + s.l.bucket }

// NATSOptions returns the options of the storage's NATS connection
// (natsconn.OptionsProvider), for the modules of the same config that use
// its cluster.
func (s *configStorage) NATSOptions() natsconn.Options {
	o := s.natsOpts
	o.Servers = append([]string(nil), o.Servers...)
	return o
}

// Interface guards
var (
	_ certmagic.Storage        = (*configStorage)(nil)
	_ certmagic.TryLocker      = (*configStorage)(nil)
	_ natsconn.OptionsProvider = (*configStorage)(nil)
)
