// Package shardcache is the one bounded, sharded cache of the gateway:
// caddyjwt keeps verified tokens in it and caddypermcache permission
// decisions.
//
// The cache is split into shards, each with its own lock, so that parallel
// lookups of different keys rarely share one. Each shard holds a map for
// lookups and a ring of the same entries for CLOCK eviction, an
// approximation of LRU whose hits only set a bit (under the read lock).
// The capacity is exact: the shards' capacities add up to the size asked
// for. An entry carries a deadline of the caller's clock from which it is
// dead: eviction takes dead entries whether they were used or not. What
// "fresh" means (a token's exp, a decision's TTL and stale window, a key
// set's generation) stays with the caller, in the value.
package shardcache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// entry is one cached value. Every field but ref is immutable once the
// entry is published in a shard, so readers need only the read lock.
type entry[K comparable, V any] struct {
	key  K
	val  V
	dead int64         // from then on the entry is evicted first
	slot int32         // index in the shard's ring
	ref  atomic.Uint32 // CLOCK reference bit, set on every Get
}

// Counters are two counters per shard that the caller counts its hits in
// (Get returns the shard's): they sit on the cache line of the shard's
// lock, which every lookup writes anyway, so counting costs no extra
// cache-line traffic between cores.
type Counters [2]atomic.Uint64

// shard is one lock's worth of the cache.
type shard[K comparable, V any] struct {
	mu   sync.RWMutex
	hits Counters
	m    map[K]*entry[K, V]
	ring []*entry[K, V] // len(ring) is the shard's capacity; nil = free slot
	free []int32        // free ring slots
	hand int
	_    [64]byte // keep shards' locks on separate cache lines
}

// Cache is a bounded, sharded cache of values V by keys K. It is safe for
// concurrent use.
type Cache[K comparable, V any] struct {
	shards []shard[K, V]
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

// New returns a cache that holds at most size entries (size < 1: 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	if size < 1 {
		size = 1
	}
	n := 1
	for n < maxShards && size/(n*2) >= minPerShard {
		n *= 2
	}
	c := &Cache[K, V]{shards: make([]shard[K, V], n), mask: uint64(n - 1), seed: maphash.MakeSeed(), size: size}
	for i := range c.shards {
		capacity := size / n
		if i < size%n {
			capacity++
		}
		s := &c.shards[i]
		s.m = make(map[K]*entry[K, V])
		s.ring = make([]*entry[K, V], capacity)
		s.free = make([]int32, capacity)
		for j := range s.free {
			s.free[j] = int32(capacity - 1 - j)
		}
	}
	return c
}

// Size returns the capacity given to New.
func (c *Cache[K, V]) Size() int { return c.size }

// Shards returns the number of shards.
func (c *Cache[K, V]) Shards() int { return len(c.shards) }

func (c *Cache[K, V]) shard(k K) *shard[K, V] {
	return &c.shards[maphash.Comparable(c.seed, k)&c.mask]
}

// Get returns k's value, marks it used, and returns the counters of its
// shard (for the caller's hit statistics). It does not allocate. A string
// key may be a view of a byte slice (unsafe.String): Get does not keep it.
func (c *Cache[K, V]) Get(k K) (v V, hits *Counters, ok bool) {
	s := c.shard(k)
	s.mu.RLock()
	e := s.m[k]
	s.mu.RUnlock()
	if e == nil {
		return v, &s.hits, false
	}
	if e.ref.Load() == 0 {
		e.ref.Store(1)
	}
	return e.val, &s.hits, true
}

// Peek is Get without marking the entry used.
func (c *Cache[K, V]) Peek(k K) (v V, ok bool) {
	s := c.shard(k)
	s.mu.RLock()
	e := s.m[k]
	s.mu.RUnlock()
	if e == nil {
		return v, false
	}
	return e.val, true
}

// Put stores v for k, dead from dead on (in the caller's clock). When k's
// shard is full it first evicts one entry (see evict), at time now.
func (c *Cache[K, V]) Put(k K, v V, dead, now int64) {
	e := &entry[K, V]{key: k, val: v, dead: dead}
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[k]; old != nil {
		e.slot = old.slot
		s.ring[e.slot] = e
		s.m[k] = e
		return
	}
	if len(s.free) == 0 {
		s.evict(now)
	}
	e.slot = s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.ring[e.slot] = e
	s.m[k] = e
}

// evict frees one slot with the CLOCK algorithm: the hand skips (and
// clears) entries used since it last passed, and evicts the first entry
// that was not used or is dead. Called with s.mu held.
func (s *shard[K, V]) evict(now int64) {
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
		if now < e.dead && e.ref.Load() != 0 {
			e.ref.Store(0)
			continue
		}
		s.remove(e)
		return
	}
}

// remove drops e from the shard. Called with s.mu held.
func (s *shard[K, V]) remove(e *entry[K, V]) {
	delete(s.m, e.key)
	s.ring[e.slot] = nil
	s.free = append(s.free, e.slot)
}

// Delete drops k's entry and reports whether there was one.
func (c *Cache[K, V]) Delete(k K) bool {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[k]
	if e != nil {
		s.remove(e)
	}
	return e != nil
}

// DeleteFunc drops every entry for which drop is true and returns how many
// it dropped. It holds one shard's lock at a time.
func (c *Cache[K, V]) DeleteFunc(drop func(K, V) bool) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if drop(k, e.val) {
				s.remove(e)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Purge drops every entry and returns how many it dropped.
func (c *Cache[K, V]) Purge() int {
	return c.DeleteFunc(func(K, V) bool { return true })
}

// Len returns the number of entries, dead ones included.
func (c *Cache[K, V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// Counts returns the sums of the shards' Counters.
func (c *Cache[K, V]) Counts() (first, second uint64) {
	for i := range c.shards {
		first += c.shards[i].hits[0].Load()
		second += c.shards[i].hits[1].Load()
	}
	return first, second
}
