package caddyjwt

import (
	"crypto/sha256"
	"unsafe"

	"github.com/apigate/gateway/internal/shardcache"
)

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

// Cache is a bounded, sharded cache of verified tokens keyed by the SHA-256
// of the token (internal/shardcache: CLOCK eviction, an exact capacity,
// dead entries evicted first). Entries carry their own deadline (no later
// than the token's exp) and the key-set generation they were verified
// against, so a key rotation invalidates them. Only successful
// verifications are stored.
type Cache struct {
	c *shardcache.Cache[tokenKey, cacheEntry]
}

// NewCache returns a cache that holds at most size entries (size < 1: 1).
func NewCache(size int) *Cache {
	return &Cache{c: shardcache.New[tokenKey, cacheEntry](size)}
}

// get returns the identity of a live entry of generation gen.
func (c *Cache) get(k *tokenKey, now int64, gen uint64) (*Identity, bool) {
	e, _, ok := c.c.Get(*k)
	if !ok || now >= e.expires || e.gen != gen {
		return nil, false
	}
	return e.id, true
}

// put stores an entry; when the cache is full it evicts one first, a dead
// one (expired) before one not used lately.
func (c *Cache) put(k *tokenKey, e cacheEntry, now int64) {
	c.c.Put(*k, e, e.expires, now)
}

// Len returns the number of entries, live or not yet evicted.
func (c *Cache) Len() int { return c.c.Len() }

// Purge drops every entry.
func (c *Cache) Purge() { c.c.Purge() }
