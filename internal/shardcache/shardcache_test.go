package shardcache

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"unsafe"
)

func TestCapacityIsExact(t *testing.T) {
	for _, size := range []int{-1, 1, 3, 511, 1024, 1025, 100000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c := New[string, int](size)
			want := max(size, 1)
			total := 0
			for i := range c.shards {
				total += len(c.shards[i].ring)
			}
			if total != want || c.Size() != want {
				t.Fatalf("shards hold %d entries in all (Size %d), want %d", total, c.Size(), want)
			}
			for i := 0; i < want*2+10; i++ {
				c.Put("key"+strconv.Itoa(i), i, 1<<62, 0)
			}
			if n := c.Len(); n != want {
				t.Fatalf("Len = %d after overfilling, want %d", n, want)
			}
		})
	}
}

func TestShardCount(t *testing.T) {
	for _, tc := range []struct{ size, shards int }{
		{1, 1}, {1023, 1}, {1024, 2}, {10000, 16}, {100000, 128}, {1 << 24, maxShards},
	} {
		if n := New[int, int](tc.size).Shards(); n != tc.shards {
			t.Errorf("size %d: %d shards, want %d", tc.size, n, tc.shards)
		}
	}
}

func TestEvictionPrefersUnusedAndDead(t *testing.T) {
	c := New[string, string](3) // one shard
	c.Put("hot", "h", 100, 0)
	c.Put("cold", "c", 100, 0)
	c.Put("old", "o", 10, 0)
	c.Get("hot")
	c.Get("cold")
	c.Get("old")
	// "old" is dead at 20: it goes first, used or not, even though the
	// hand meets "hot" first
	c.Put("new1", "n", 100, 20)
	if _, ok := c.Peek("old"); ok {
		t.Fatal("a dead entry survived eviction")
	}
	// the hand cleared "hot" and "cold" passing them; "hot" is used
	// again, so "cold" goes
	c.Get("hot")
	c.Put("new2", "n", 100, 20)
	if _, ok := c.Peek("hot"); !ok {
		t.Fatal("a recently used entry was evicted")
	}
	if _, ok := c.Peek("cold"); ok {
		t.Fatal("an entry not used since the hand passed survived")
	}
	if c.Len() != 3 {
		t.Fatalf("Len = %d, want 3", c.Len())
	}
}

func TestPeekDoesNotMarkUsed(t *testing.T) {
	c := New[string, int](2)
	c.Put("a", 1, 100, 0)
	c.Put("b", 2, 100, 0)
	c.Get("b")
	c.Peek("a")
	c.Put("c", 3, 100, 0)
	if _, ok := c.Peek("a"); ok {
		t.Fatal("an entry only peeked at was kept over a used one")
	}
}

func TestReplaceAndDelete(t *testing.T) {
	c := New[string, int](2)
	for i := 0; i < 10; i++ {
		c.Put("k", i, 100, 0)
	}
	if v, ok := c.Peek("k"); !ok || v != 9 || c.Len() != 1 {
		t.Fatalf("after replacing: %d, %v, Len %d; want 9, true, 1", v, ok, c.Len())
	}
	if !c.Delete("k") || c.Delete("k") || c.Len() != 0 {
		t.Fatal("Delete: want true once, then false, and an empty cache")
	}
	for i := 0; i < 10; i++ {
		c.Put(fmt.Sprint(i), i, 100, 0)
	}
	if n := c.DeleteFunc(func(_ string, v int) bool { return v%2 == 1 }); n+c.Len() != 2 {
		t.Fatalf("DeleteFunc dropped %d of %d", n, n+c.Len())
	}
	if n := c.Purge(); n == 0 || c.Len() != 0 {
		t.Fatalf("Purge dropped %d, Len %d", n, c.Len())
	}
	// freed slots are reused
	for i := 0; i < 10; i++ {
		c.Put(fmt.Sprint(i), i, 100, 0)
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d after refill, want 2", c.Len())
	}
}

func TestCounters(t *testing.T) {
	c := New[int, int](5000)
	for i := 0; i < 100; i++ {
		c.Put(i, i, 100, 0)
		_, hits, _ := c.Get(i)
		hits[i%2].Add(1)
	}
	if a, b := c.Counts(); a != 50 || b != 50 {
		t.Fatalf("Counts = %d, %d; want 50, 50", a, b)
	}
}

// TestGetDoesNotAllocate: a string key viewing a byte slice (as
// caddypermcache looks up) costs no allocation.
func TestGetDoesNotAllocate(t *testing.T) {
	c := New[string, int](100)
	c.Put("user GET /a", 1, 100, 0)
	key := []byte("user GET /a")
	if n := testing.AllocsPerRun(100, func() {
		if _, _, ok := c.Get(unsafe.String(unsafe.SliceData(key), len(key))); !ok {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Fatalf("Get allocates %v times", n)
	}
}

// TestConcurrent runs every operation at once (run with -race): the bound
// holds and nothing panics.
func TestConcurrent(t *testing.T) {
	c := New[int, int](2048)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				k := (i*7 + g*1000) % 4000
				switch i % 5 {
				case 0, 1:
					c.Put(k, i, int64(i%100), int64(i%50))
				case 2:
					c.Get(k)
				case 3:
					c.Peek(k)
				case 4:
					if i%500 == 4 {
						c.DeleteFunc(func(k, _ int) bool { return k%3 == 0 })
					} else {
						c.Delete(k)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > c.Size() {
		t.Fatalf("Len = %d over the size %d", n, c.Size())
	}
}

func BenchmarkGetString(b *testing.B) {
	c := New[string, int](10000)
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("user-%d GET /orders/%d", i%1000, i))
		c.Put(string(keys[i]), i, 1<<62, 0)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		if _, _, ok := c.Get(unsafe.String(unsafe.SliceData(k), len(k))); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkGetArray(b *testing.B) {
	c := New[[32]byte, int](10000)
	keys := make([][32]byte, 10000)
	for i := range keys {
		copy(keys[i][:], fmt.Sprintf("%032d", i))
		c.Put(keys[i], i, 1<<62, 0)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, ok := c.Get(keys[i%len(keys)]); !ok {
			b.Fatal("miss")
		}
	}
}
