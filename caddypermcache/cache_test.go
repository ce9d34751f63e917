package caddypermcache

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestCacheStates(t *testing.T) {
	c := NewCache(10)
	c.Put("k", "alice", true, time.Second, time.Minute, 0)
	c.Put("d", "bob", false, time.Second, 0, 0)
	tests := []struct {
		name  string
		key   string
		now   time.Duration
		allow bool
		st    State
	}{
		{"fresh allow", "k", 0, true, Fresh},
		{"fresh just before expiry", "k", time.Second - 1, true, Fresh},
		{"stale at expiry", "k", time.Second, true, Stale},
		{"stale within window", "k", time.Minute, true, Stale},
		{"miss after window", "k", time.Minute + time.Second, false, Miss},
		{"fresh deny", "d", 0, false, Fresh},
		{"deny without stale window", "d", time.Second, false, Miss},
		{"unknown", "x", 0, false, Miss},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			allow, st := c.Get([]byte(tc.key), int64(tc.now))
			if allow != tc.allow || st != tc.st {
				t.Fatalf("Get(%q, %v) = %v, %v; want %v, %v", tc.key, tc.now, allow, st, tc.allow, tc.st)
			}
			allow, st = c.Peek(tc.key, int64(tc.now))
			if allow != tc.allow || st != tc.st {
				t.Fatalf("Peek(%q, %v) = %v, %v; want %v, %v", tc.key, tc.now, allow, st, tc.allow, tc.st)
			}
		})
	}
}

func TestCachePutZeroTTLDropsEntry(t *testing.T) {
	c := NewCache(10)
	c.Put("k", "", true, time.Second, 0, 0)
	c.Put("k", "", true, 0, 0, 0)
	if _, st := c.Get([]byte("k"), 0); st != Miss {
		t.Fatalf("after a no-store answer the old decision is still %v", st)
	}
	if c.Len() != 0 {
		t.Fatalf("Len = %d, want 0", c.Len())
	}
}

func TestCacheReplaceKeepsSize(t *testing.T) {
	c := NewCache(2)
	for i := 0; i < 10; i++ {
		c.Put("k", "", i%2 == 0, time.Second, 0, 0)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1", c.Len())
	}
	if allow, _ := c.Get([]byte("k"), 0); allow {
		t.Fatal("replaced entry has the old decision")
	}
}

// TestCacheBoundIsExact: overfilled, the cache holds exactly its size
// (the shards' capacities are internal/shardcache's, tested there).
func TestCacheBoundIsExact(t *testing.T) {
	for _, size := range []int{1, 3, 511, 1024, 1025, 100000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c := NewCache(size)
			for i := 0; i < size*2+10; i++ {
				c.Put("key"+strconv.Itoa(i), "", true, time.Hour, 0, 0)
			}
			if n := c.Len(); n != size || c.Size() != size {
				t.Fatalf("Len = %d, Size = %d after overfilling, want %d", n, c.Size(), size)
			}
		})
	}
}

func TestCacheEvictionPrefersUnusedAndExpired(t *testing.T) {
	c := NewCache(3) // one shard
	c.Put("hot", "", true, time.Hour, 0, 0)
	c.Put("cold", "", true, time.Hour, 0, 0)
	c.Put("old", "", true, time.Second, 0, 0)
	c.Get([]byte("hot"), 0)
	c.Get([]byte("cold"), 0)
	// "old" expired: it goes first even though the hand meets "hot" first
	c.Put("new1", "", true, time.Hour, 0, int64(2*time.Second))
	if _, st := c.Get([]byte("old"), 0); st != Miss {
		t.Fatal("expired entry survived eviction")
	}
	c.Get([]byte("hot"), 0)
	c.Put("new2", "", true, time.Hour, 0, int64(2*time.Second))
	if _, st := c.Get([]byte("hot"), 0); st != Fresh {
		t.Fatal("recently used entry was evicted")
	}
	if c.Len() != 3 {
		t.Fatalf("Len = %d, want 3", c.Len())
	}
}

func TestCacheInvalidate(t *testing.T) {
	tmpl, err := ParseKeyTemplate(DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	fill := func() *Cache {
		c := NewCache(100)
		for _, sub := range []string{"alice", "bob", "alice2"} {
			for _, p := range []string{"/a", "/b"} {
				c.Put(tmpl.Render(sub, "GET", p), sub, true, time.Hour, 0, 0)
			}
		}
		return c
	}
	tests := []struct {
		name    string
		drop    func(c *Cache) int
		dropped int
	}{
		{"subject", func(c *Cache) int { return c.InvalidateSubject("alice") }, 2},
		{"prefix of a subject", func(c *Cache) int { return c.InvalidatePrefix(tmpl.Prefix("alice")) }, 2},
		{"prefix of a subject and method", func(c *Cache) int { return c.InvalidatePrefix(tmpl.Prefix("bob", "GET")) }, 2},
		{"one key", func(c *Cache) int { return c.InvalidatePrefix(tmpl.Render("bob", "GET", "/a")) }, 1},
		{"unknown subject", func(c *Cache) int { return c.InvalidateSubject("carol") }, 0},
		{"purge", func(c *Cache) int { return c.Purge() }, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fill()
			if n := tc.drop(c); n != tc.dropped {
				t.Fatalf("dropped %d, want %d", n, tc.dropped)
			}
			if c.Len() != 6-tc.dropped {
				t.Fatalf("Len = %d, want %d", c.Len(), 6-tc.dropped)
			}
			// freed slots are reused
			for i := 0; i < 200; i++ {
				c.Put(fmt.Sprint("x", i), "", true, time.Hour, 0, 0)
			}
			if c.Len() != 100 {
				t.Fatalf("Len = %d after refill, want 100", c.Len())
			}
		})
	}
}

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("user-%d GET /orders/%d", i%1000, i))
	}
	return keys
}

func BenchmarkCacheGet(b *testing.B) {
	c := NewCache(DefaultCacheSize)
	keys := benchKeys(10000)
	for _, k := range keys {
		c.Put(string(k), "", true, time.Hour, 0, 0)
	}
	now := Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, st := c.Get(keys[i%len(keys)], now); st != Fresh {
			b.Fatal("miss")
		}
	}
}

func BenchmarkCacheGetParallel(b *testing.B) {
	c := NewCache(DefaultCacheSize)
	keys := benchKeys(10000)
	for _, k := range keys {
		c.Put(string(k), "", true, time.Hour, 0, 0)
	}
	now := Now()
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// each goroutine walks the keys from its own place, so they do not
		// meet on one shard in lockstep
		i := int(seq.Add(1)) * 4099
		for pb.Next() {
			if _, st := c.Get(keys[i%len(keys)], now); st != Fresh {
				b.Fatal("miss")
			}
			i += 7
		}
	})
}

func BenchmarkCachePut(b *testing.B) {
	c := NewCache(10000)
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d GET /orders/%d", i%1000, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Put(keys[i%len(keys)], "", true, time.Hour, 0, int64(i))
	}
}
