package natsstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// KVConfig configures a KV storage.
type KVConfig struct {
	// Bucket holds the data; Bucket+"_locks" holds the locks.
	Bucket string
	// Replicas of both buckets when this storage creates them.
	Replicas int
	// LockTTL is the lock bucket's max age: a lock that is not refreshed
	// for this long disappears. Held locks are refreshed every LockTTL/3.
	LockTTL time.Duration
	// Timeout bounds each NATS operation.
	Timeout time.Duration
}

// KV is a certmagic.Storage on two NATS JetStream key-value buckets. It
// binds the buckets lazily (creating them when missing), so it can be made
// while NATS is unreachable; operations fail until NATS is back.
type KV struct {
	js       jetstream.JetStream
	cfg      KVConfig
	logger   *zap.Logger
	owner    string
	natsOpts natsconn.Options // the connection's, for NATSOptions

	bindMu sync.Mutex
	data   jetstream.KeyValue
	locks  jetstream.KeyValue
	ttl    time.Duration // the lock bucket's actual TTL

	heldMu sync.Mutex
	held   map[string]*heldLock

	wg sync.WaitGroup
}

type heldLock struct {
	key    string
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	rev    uint64
}

// NewKV makes a storage on js. logger may be nil.
func NewKV(js jetstream.JetStream, cfg KVConfig, logger *zap.Logger) *KV {
	if logger == nil {
		logger = zap.NewNop()
	}
	host, _ := os.Hostname()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return &KV{
		js:     js,
		cfg:    cfg,
		logger: logger,
		owner:  fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(rnd[:])),
		held:   map[string]*heldLock{},
	}
}

func (s *KV) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// errNoBucket is returned by read operations on a data bucket that does
// not exist yet: reads never create buckets (so that `caddy validate` and a
// config load write nothing to NATS), and an absent bucket holds nothing.
var errNoBucket = errors.New("bucket does not exist yet")

// dataBucket binds the data bucket; with create it creates a missing one.
func (s *KV) dataBucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if s.data != nil {
		return s.data, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kv, err := s.bind(ctx, create, jetstream.KeyValueConfig{
		Bucket:      s.cfg.Bucket,
		Description: "Caddy storage (certificates, rate limit state) of the apigate fleet",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	s.data = kv
	return kv, nil
}

// lockBucket binds (or creates) the lock bucket.
func (s *KV) lockBucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if s.locks != nil {
		return s.locks, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kv, err := s.bind(ctx, true, jetstream.KeyValueConfig{
		Bucket:      s.cfg.Bucket + "_locks",
		Description: "Caddy storage locks of the apigate fleet (entries expire unless refreshed)",
		History:     1,
		TTL:         s.cfg.LockTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading lock bucket status: %w", err)
	}
	s.ttl = st.TTL()
	if s.ttl <= 0 {
		return nil, fmt.Errorf("lock bucket %q has no TTL: locks of a dead holder would never expire; delete it or give it a max age", s.cfg.Bucket+"_locks")
	}
	if s.ttl != s.cfg.LockTTL {
		s.logger.Warn("lock bucket exists with another TTL; using it",
			zap.Duration("bucket_ttl", s.ttl), zap.Duration("lock_ttl", s.cfg.LockTTL))
	}
	s.locks = kv
	return kv, nil
}

// bind binds the bucket cfg.Bucket as it exists; with create, a missing
// one is created (natsconn.BindKV: 1 replica where the servers cannot
// place more), else a read finds errNoBucket.
func (s *KV) bind(ctx context.Context, create bool, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if create {
		return natsconn.BindKV(ctx, s.js, cfg, s.logger)
	}
	kv, err := s.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, errNoBucket
	}
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q: %w", cfg.Bucket, err)
	}
	return kv, nil
}

func notExist(key string) error {
	return fmt.Errorf("%q: %w", key, fs.ErrNotExist)
}

// Store puts value at key.
func (s *KV) Store(ctx context.Context, key string, value []byte) error {
	k := encodeKey(key)
	if k == "" {
		return fmt.Errorf("invalid storage key %q: empty", key)
	}
	data, err := s.dataBucket(ctx, true)
	if err != nil {
		return err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := data.Put(ctx, k, value); err != nil {
		return fmt.Errorf("storing %q: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *KV) Load(ctx context.Context, key string) ([]byte, error) {
	e, err := s.get(ctx, key)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

func (s *KV) get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	k := encodeKey(key)
	if k == "" {
		return nil, notExist(key)
	}
	data, err := s.dataBucket(ctx, false)
	if errors.Is(err, errNoBucket) {
		return nil, notExist(key)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	e, err := data.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, notExist(key)
	}
	if err != nil {
		return nil, fmt.Errorf("loading %q: %w", key, err)
	}
	return e, nil
}

// below returns the decoded paths of every key strictly below dir.
func (s *KV) below(ctx context.Context, dir string) ([]string, error) {
	data, err := s.dataBucket(ctx, false)
	if errors.Is(err, errNoBucket) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	kl, err := data.ListKeysFiltered(ctx, subtreeFilter(encodeKey(dir)))
	if err != nil {
		return nil, fmt.Errorf("listing %q: %w", dir, err)
	}
	defer func() { _ = kl.Stop() }()
	var out []string
	for {
		select {
		case k, ok := <-kl.Keys():
			if !ok {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("listing %q: %w", dir, ctx.Err())
				}
				return out, nil
			}
			p, err := decodeKey(k)
			if err != nil {
				continue // not ours
			}
			out = append(out, p)
		case <-ctx.Done():
			return nil, fmt.Errorf("listing %q: %w", dir, ctx.Err())
		}
	}
}

// Delete deletes key and, if it is a directory, every key below it. A key
// that does not exist is not an error.
func (s *KV) Delete(ctx context.Context, key string) error {
	data, err := s.dataBucket(ctx, false)
	if errors.Is(err, errNoBucket) {
		return nil // nothing to delete
	}
	if err != nil {
		return err
	}
	var keys []string
	if k := encodeKey(key); k != "" {
		keys = append(keys, k)
	}
	sub, err := s.below(ctx, key)
	if err != nil {
		return err
	}
	for _, p := range sub {
		keys = append(keys, encodeKey(p))
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	for _, k := range keys {
		if err := data.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("deleting %q: %w", key, err)
		}
	}
	return nil
}

// Exists reports whether key is a stored value or a directory.
func (s *KV) Exists(ctx context.Context, key string) bool {
	ok, err := s.exists(ctx, key)
	return err == nil && ok
}

// exists is Exists with the error of a failed NATS operation.
func (s *KV) exists(ctx context.Context, key string) (bool, error) {
	_, err := s.get(ctx, key)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	sub, err := s.below(ctx, key)
	return len(sub) > 0, err
}

// entry returns key's value and revision; a missing key gives (nil, 0,
// nil): revision 0 is what Create expects.
func (s *KV) entry(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.get(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// errChanged is returned by the conditional writes when the key is no
// longer at the revision the caller read.
var errChanged = errors.New("changed meanwhile")

// putAt stores value at key if the key is still at revision rev (0: if
// it does not exist), creating the bucket if needed.
func (s *KV) putAt(ctx context.Context, key string, value []byte, rev uint64) error {
	data, err := s.dataBucket(ctx, true)
	if err != nil {
		return err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	k := encodeKey(key)
	if rev == 0 {
		_, err = data.Create(ctx, k, value)
	} else {
		_, err = data.Update(ctx, k, value, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return errChanged
	}
	if err != nil {
		return fmt.Errorf("storing %q: %w", key, err)
	}
	return nil
}

// deleteAt deletes key if it is still at revision rev.
func (s *KV) deleteAt(ctx context.Context, key string, rev uint64) error {
	data, err := s.dataBucket(ctx, false)
	if errors.Is(err, errNoBucket) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	err = data.Delete(ctx, encodeKey(key), jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return errChanged
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deleting %q: %w", key, err)
	}
	return nil
}

// List returns the keys below dir: with recursive, every key and
// directory at any depth; without, the keys and directories directly in
// dir. A directory with nothing below it gives an empty list and no
// error: a key-value bucket has no empty directories to tell from missing
// ones, and callers (caddy-ratelimit's first read of an empty bucket)
// would log a missing one as an error.
func (s *KV) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	sub, err := s.below(ctx, dir)
	if err != nil {
		return nil, err
	}
	return listOf(dir, sub, recursive), nil
}

// listOf turns the paths below dir into List's answer.
func listOf(dir string, sub []string, recursive bool) []string {
	if len(sub) == 0 {
		return nil
	}
	base := normalizePath(dir)
	prefix := base
	if prefix != "" {
		prefix += "/"
	}
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range sub {
		rest := strings.TrimPrefix(p, prefix)
		segs := strings.Split(rest, "/")
		if !recursive {
			add(prefix + segs[0])
			continue
		}
		for i := 1; i <= len(segs); i++ {
			add(prefix + strings.Join(segs[:i], "/"))
		}
	}
	sort.Strings(out)
	return out
}

// Stat describes key: a stored value (terminal) or a directory.
func (s *KV) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	e, err := s.get(ctx, key)
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: e.Created(), Size: int64(len(e.Value())), IsTerminal: true}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, err
	}
	sub, lerr := s.below(ctx, key)
	if lerr != nil {
		return certmagic.KeyInfo{}, lerr
	}
	if len(sub) == 0 {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// lockValue is what a lock entry holds, for operators inspecting the bucket.
type lockValue struct {
	Owner   string    `json:"owner"`
	Created time.Time `json:"created"`
}

// TryLock takes the named lock if it is free.
func (s *KV) TryLock(ctx context.Context, name string) (bool, error) {
	k := encodeKey(name)
	if k == "" {
		return false, fmt.Errorf("invalid lock name %q: empty", name)
	}
	locks, err := s.lockBucket(ctx)
	if err != nil {
		return false, err
	}
	val, _ := json.Marshal(lockValue{Owner: s.owner, Created: time.Now().UTC()})
	octx, cancel := s.opCtx(ctx)
	rev, err := locks.Create(octx, k, val)
	cancel()
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("taking lock %q: %w", name, err)
	}
	s.startRefresh(name, k, rev, locks)
	return true, nil
}

// Lock blocks until it holds the named lock or ctx is done. A lock whose
// holder died expires after the lock bucket's TTL.
func (s *KV) Lock(ctx context.Context, name string) error {
	return lockLoop(ctx, name, s.TryLock, s.logger)
}

// lockLoop calls try until it takes the lock or ctx ends, backing off
// from 20ms to 1s and logging failed attempts.
func lockLoop(ctx context.Context, name string, try func(context.Context, string) (bool, error), log *zap.Logger) error {
	wait := 20 * time.Millisecond
	for {
		ok, err := try(opCtx(ctx), name) // an attempt runs to its end (opCtx)
		if ok {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("lock attempt failed; retrying", zap.String("lock", name), zap.Error(err))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for lock %q: %w", name, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, time.Second)
	}
}

func (s *KV) startRefresh(name, k string, rev uint64, locks jetstream.KeyValue) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heldLock{key: k, cancel: cancel, done: make(chan struct{}), rev: rev}
	s.heldMu.Lock()
	if old := s.held[name]; old != nil {
		// Lost and taken again without Unlock: stop the old refresher.
		old.cancel()
	}
	s.held[name] = h
	s.heldMu.Unlock()

	period := s.ttl / 3
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(h.done)
		defer func() {
			if r := recover(); r != nil {
				s.logger.Error("lock refresher panicked", zap.Any("panic", r), zap.Stack("stack"))
			}
		}()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			val, _ := json.Marshal(lockValue{Owner: s.owner, Created: time.Now().UTC()})
			h.mu.Lock()
			octx, ocancel := s.opCtx(ctx)
			nrev, err := locks.Update(octx, k, val, h.rev)
			ocancel()
			if err == nil {
				h.rev = nrev
			}
			h.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				s.logger.Error("refreshing lock", zap.String("lock", name), zap.Error(err))
				if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound) {
					return // expired and maybe taken by another holder: nothing to refresh
				}
			}
		}
	}()
}

// Unlock releases a lock taken by this storage.
func (s *KV) Unlock(ctx context.Context, name string) error {
	s.heldMu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.heldMu.Unlock()
	if h == nil {
		return fmt.Errorf("unlocking %q: not held by this storage", name)
	}
	h.cancel()
	<-h.done
	locks, err := s.lockBucket(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	// Delete only our own revision: if the lock expired and another
	// holder took it, it is theirs now.
	err = locks.Delete(ctx, h.key, jetstream.LastRevision(h.rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("unlocking %q: %w", name, err)
	}
	return nil
}

// Close stops the refreshers of held locks (they then expire) and waits
// for them.
func (s *KV) Close() {
	s.heldMu.Lock()
	for _, h := range s.held {
		h.cancel()
	}
	s.heldMu.Unlock()
	s.wg.Wait()
}

// String names the storage in logs.
func (s *KV) String() string { return "nats:" + s.cfg.Bucket }

// Interface guards
var (
	_ certmagic.Storage   = (*KV)(nil)
	_ certmagic.TryLocker = (*KV)(nil)
)

// NATSOptions returns the options of the storage's NATS connection
// (natsconn.OptionsProvider), for the modules of the same config that use
// its cluster.
func (kv *KV) NATSOptions() natsconn.Options {
	o := kv.natsOpts
	o.Servers = append([]string(nil), o.Servers...)
	return o
}

var _ natsconn.OptionsProvider = (*KV)(nil)
