package caddypermcache

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// State is what a cache lookup found.
type State uint8

const (
	// Miss: no entry, or one past its stale window.
	Miss State = iota
	// Fresh: an entry within its TTL.
	Fresh
	// Stale: an entry past its TTL but within its stale window; it may be
	// served only when the permission service fails.
	Stale
)

func (s State) String() string {
	switch s {
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	default:
		return "miss"
	}
}

// entry is one cached decision. Every field but ref is immutable once the
// entry is published in a shard, so readers need only the shard's read lock.
type entry struct {
	key        string
	subject    string
	allow      bool
	slot       int32         // index in the shard's ring
	expires    int64         // clock time until which the decision is fresh
	staleUntil int64         // clock time until which it may be served on errors
	ref        atomic.Uint32 // CLOCK reference bit, set on every hit
}

// shard is one lock's worth of the cache: a map for lookups and a ring of
// the same entries for CLOCK eviction (an approximation of LRU whose hits
// only set a bit, so they need no write lock).
type shard struct {
	mu sync.RWMutex
	// fresh hits by decision (0 deny, 1 allow); on the same cache line as
	// mu, which every lookup writes anyway, so counting costs no extra
	// cache-line traffic between cores
	hits [2]atomic.Uint64
	m    map[string]*entry
	ring []*entry // len(ring) is the shard's capacity; nil = free slot
	free []int32  // free ring slots
	hand int
	_    [64]byte // keep shards' locks on separate cache lines
}

// Cache is a bounded, sharded decision cache. Its capacity is exact: the
// sum of the shards' capacities is the size it was created with. Times are
// nanoseconds of a monotonic clock chosen by the caller (see Now).
type Cache struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	size   int
}

// minPerShard keeps small caches in few shards so that eviction stays close
// to LRU; maxShards bounds the shard count of big caches.
const (
	minPerShard = 512
	maxShards   = 256
)

// NewCache returns a cache that holds at most size entries (size >= 1).
func NewCache(size int) *Cache {
	if size < 1 {
		size = 1
	}
	n := 1
	for n < maxShards && size/(n*2) >= minPerShard {
		n *= 2
	}
	c := &Cache{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), size: size}
	for i := range c.shards {
		capacity := size / n
		if i < size%n {
			capacity++
		}
		s := &c.shards[i]
		s.m = make(map[string]*entry)
		s.ring = make([]*entry, capacity)
		s.free = make([]int32, capacity)
		for j := range s.free {
			s.free[j] = int32(capacity - 1 - j)
		}
	}
	return c
}

var clockBase = time.Now()

// Now is the cache's clock: monotonic nanoseconds since the process started.
func Now() int64 { return int64(time.Since(clockBase)) }

// Size returns the capacity given to NewCache.
func (c *Cache) Size() int { return c.size }

// Shards returns the number of shards.
func (c *Cache) Shards() int { return len(c.shards) }

func (c *Cache) shardFor(key []byte) *shard {
	return &c.shards[maphash.Bytes(c.seed, key)&c.mask]
}

func (c *Cache) shardForString(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// Get looks key up at time now. It does not allocate.
func (c *Cache) Get(key []byte, now int64) (allow bool, st State) {
	s := c.shardFor(key)
	s.mu.RLock()
	e := s.m[string(key)]
	s.mu.RUnlock()
	if e == nil {
		return false, Miss
	}
	switch {
	case now < e.expires:
		st = Fresh
	case now < e.staleUntil:
		st = Stale
	default:
		return false, Miss
	}
	if e.ref.Load() == 0 {
		e.ref.Store(1)
	}
	if st == Fresh {
		if e.allow {
			s.hits[1].Add(1)
		} else {
			s.hits[0].Add(1)
		}
	}
	return e.allow, st
}

// Peek is Get without counting a hit or marking the entry as used.
func (c *Cache) Peek(key string, now int64) (allow bool, st State) {
	s := c.shardForString(key)
	s.mu.RLock()
	e := s.m[key]
	s.mu.RUnlock()
	switch {
	case e == nil:
		return false, Miss
	case now < e.expires:
		return e.allow, Fresh
	case now < e.staleUntil:
		return e.allow, Stale
	}
	return false, Miss
}

// Put stores a decision for ttl, servable on errors for stale more after
// that. A ttl <= 0 stores nothing and drops any entry the key had (the
// service said "do not cache").
func (c *Cache) Put(key, subject string, allow bool, ttl, stale time.Duration, now int64) {
	s := c.shardForString(key)
	if ttl <= 0 {
		s.mu.Lock()
		if old := s.m[key]; old != nil {
			s.remove(old)
		}
		s.mu.Unlock()
		return
	}
	if stale < 0 {
		stale = 0
	}
	e := &entry{
		key:        key,
		subject:    subject,
		allow:      allow,
		expires:    now + int64(ttl),
		staleUntil: now + int64(ttl) + int64(stale),
	}
	if e.expires < now { // overflow of an absurd TTL
		e.expires, e.staleUntil = 1<<63-1, 1<<63-1
	} else if e.staleUntil < e.expires {
		e.staleUntil = 1<<63 - 1
	}
	s.mu.Lock()
	if old := s.m[key]; old != nil {
		e.slot = old.slot
		s.ring[e.slot] = e
		s.m[key] = e
		s.mu.Unlock()
		return
	}
	if len(s.free) == 0 {
		s.evict(now)
	}
	e.slot = s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.ring[e.slot] = e
	s.m[key] = e
	s.mu.Unlock()
}

// evict frees one slot with the CLOCK algorithm: the hand skips (and
// clears) entries hit since it last passed, and evicts the first entry that
// was not hit or is past its stale window. Called with s.mu held.
func (s *shard) evict(now int64) {
	n := len(s.ring)
	for i := 0; i < 2*n+1; i++ {
		e := s.ring[s.hand]
		s.hand++
		if s.hand == n {
			s.hand = 0
		}
		if e == nil {
			continue
		}
		if now < e.staleUntil && e.ref.Load() != 0 {
			e.ref.Store(0)
			continue
		}
		s.remove(e)
		return
	}
}

// remove drops e from the shard. Called with s.mu held.
func (s *shard) remove(e *entry) {
	delete(s.m, e.key)
	s.ring[e.slot] = nil
	s.free = append(s.free, e.slot)
}

// Hits returns how many lookups found a fresh allow and a fresh deny.
func (c *Cache) Hits() (allow, deny uint64) {
	for i := range c.shards {
		allow += c.shards[i].hits[1].Load()
		deny += c.shards[i].hits[0].Load()
	}
	return allow, deny
}

// Len returns the number of entries, expired ones included.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// InvalidateFunc drops every entry for which drop(key, subject) is true and
// returns how many it dropped.
func (c *Cache) InvalidateFunc(drop func(key, subject string) bool) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if drop(k, e.subject) {
				s.remove(e)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// InvalidateSubject drops every decision cached for subject (the identity's
// subject when the decision was fetched, whatever the key template is).
func (c *Cache) InvalidateSubject(subject string) int {
	return c.InvalidateFunc(func(_, sub string) bool { return sub == subject })
}

// InvalidatePrefix drops every entry whose encoded key starts with prefix
// (see KeyTemplate for the encoding; KeyTemplate.Prefix builds one).
func (c *Cache) InvalidatePrefix(prefix string) int {
	return c.InvalidateFunc(func(key, _ string) bool { return strings.HasPrefix(key, prefix) })
}

// Purge drops every entry.
func (c *Cache) Purge() int {
	return c.InvalidateFunc(func(string, string) bool { return true })
}
