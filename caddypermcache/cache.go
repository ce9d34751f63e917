package caddypermcache

import (
	"strings"
	"time"
	"unsafe"

	"github.com/apigate/gateway/internal/shardcache"
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

// decision is one cached decision.
type decision struct {
	subject    string
	allow      bool
	expires    int64 // clock time until which the decision is fresh
	staleUntil int64 // clock time until which it may be served on errors
}

// state is what d is at time now.
func (d *decision) state(now int64) State {
	switch {
	case now < d.expires:
		return Fresh
	case now < d.staleUntil:
		return Stale
	}
	return Miss
}

// Cache is a bounded, sharded decision cache (internal/shardcache: CLOCK
// eviction, an exact capacity; a decision past its stale window is evicted
// first). Times are nanoseconds of a monotonic clock chosen by the caller
// (see Now).
type Cache struct {
	c *shardcache.Cache[string, decision]
}

// NewCache returns a cache that holds at most size entries (size >= 1).
func NewCache(size int) *Cache {
	return &Cache{c: shardcache.New[string, decision](size)}
}

var clockBase = time.Now()

// Now is the cache's clock: monotonic nanoseconds since the process started.
func Now() int64 { return int64(time.Since(clockBase)) }

// Size returns the capacity given to NewCache.
func (c *Cache) Size() int { return c.c.Size() }

// Shards returns the number of shards.
func (c *Cache) Shards() int { return c.c.Shards() }

// Get looks key up at time now, counting a fresh hit by decision. It does
// not allocate.
func (c *Cache) Get(key []byte, now int64) (allow bool, st State) {
	// a view of key: the cache does not keep it
	d, hits, ok := c.c.Get(unsafe.String(unsafe.SliceData(key), len(key)))
	if !ok {
		return false, Miss
	}
	switch st = d.state(now); st {
	case Miss:
		return false, Miss
	case Fresh:
		if d.allow {
			hits[1].Add(1)
		} else {
			hits[0].Add(1)
		}
	}
	return d.allow, st
}

// Peek is Get without counting a hit or marking the entry as used.
func (c *Cache) Peek(key string, now int64) (allow bool, st State) {
	d, ok := c.c.Peek(key)
	if !ok {
		return false, Miss
	}
	if st = d.state(now); st == Miss {
		return false, Miss
	}
	return d.allow, st
}

// Put stores a decision for ttl, servable on errors for stale more after
// that. A ttl <= 0 stores nothing and drops any entry the key had (the
// service said "do not cache").
func (c *Cache) Put(key, subject string, allow bool, ttl, stale time.Duration, now int64) {
	if ttl <= 0 {
		c.c.Delete(key)
		return
	}
	if stale < 0 {
		stale = 0
	}
	d := decision{
		subject:    subject,
		allow:      allow,
		expires:    now + int64(ttl),
		staleUntil: now + int64(ttl) + int64(stale),
	}
	if d.expires < now { // overflow of an absurd TTL
		d.expires, d.staleUntil = 1<<63-1, 1<<63-1
	} else if d.staleUntil < d.expires {
		d.staleUntil = 1<<63 - 1
	}
	c.c.Put(key, d, d.staleUntil, now)
}

// Hits returns how many lookups found a fresh allow and a fresh deny.
func (c *Cache) Hits() (allow, deny uint64) {
	deny, allow = c.c.Counts()
	return allow, deny
}

// Len returns the number of entries, expired ones included.
func (c *Cache) Len() int { return c.c.Len() }

// InvalidateFunc drops every entry for which drop(key, subject) is true and
// returns how many it dropped.
func (c *Cache) InvalidateFunc(drop func(key, subject string) bool) int {
	return c.c.DeleteFunc(func(k string, d decision) bool { return drop(k, d.subject) })
}

// InvalidateKey drops key's entry and returns how many it dropped (0 or 1).
func (c *Cache) InvalidateKey(key string) int {
	if c.c.Delete(key) {
		return 1
	}
	return 0
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
func (c *Cache) Purge() int { return c.c.Purge() }
