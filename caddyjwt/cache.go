package caddyjwt

import (
	"crypto/sha256"
	"sync"
	"unsafe"
)

// cacheShards is the number of independently locked parts of the cache, so
// that parallel hits on different tokens rarely share a lock.
const cacheShards = 32

// tokenKey is the SHA-256 of a token: the cache never holds the token.
type tokenKey [sha256.Size]byte

func hashToken(token string) tokenKey {
	// no copy: sha256 only reads its input
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

type cacheEntry struct {
	id      *Identity
	expires int64  // unix nanoseconds; the entry is dead from then on
	gen     uint64 // key-set generation the token was verified against
}

type cacheShard struct {
	mu  sync.RWMutex
	m   map[tokenKey]cacheEntry
	max int
	_   [40]byte // keep shards on separate cache lines
}

// Cache is a bounded, sharded cache of verified tokens keyed by the SHA-256
// of the token. Entries carry their own deadline (no later than the token's
// exp) and the key-set generation they were verified against, so a key
// rotation invalidates them. Only successful verifications are stored.
type Cache struct {
	shards [cacheShards]cacheShard
}

// NewCache returns a cache that holds at most size entries (size < 1: 1).
func NewCache(size int) *Cache {
	per := size / cacheShards
	if size%cacheShards != 0 {
		per++
	}
	if per < 1 {
		per = 1
	}
	c := &Cache{}
	for i := range c.shards {
		c.shards[i].m = make(map[tokenKey]cacheEntry)
		c.shards[i].max = per
	}
	return c
}

func (c *Cache) shard(k *tokenKey) *cacheShard { return &c.shards[k[0]%cacheShards] }

// get returns the identity of a live entry of generation gen.
func (c *Cache) get(k *tokenKey, now int64, gen uint64) (*Identity, bool) {
	s := c.shard(k)
	s.mu.RLock()
	e, ok := s.m[*k]
	s.mu.RUnlock()
	if !ok || now >= e.expires || e.gen != gen {
		return nil, false
	}
	return e.id, true
}

// put stores an entry, evicting dead entries first and then arbitrary ones
// when the shard is full.
func (c *Cache) put(k *tokenKey, e cacheEntry, now int64) {
	s := c.shard(k)
	s.mu.Lock()
	if _, ok := s.m[*k]; !ok && len(s.m) >= s.max {
		evicted := 0
		for key, old := range s.m {
			if now >= old.expires || old.gen != e.gen {
				delete(s.m, key)
				evicted++
			}
		}
		if evicted == 0 {
			// map iteration starts at a random place: a random eviction
			for key := range s.m {
				delete(s.m, key)
				break
			}
		}
	}
	s.m[*k] = e
	s.mu.Unlock()
}

// Len returns the number of entries, live or not yet evicted.
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

// Purge drops every entry.
func (c *Cache) Purge() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}
