package natsstore

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func runJetStream(t testing.TB) *server.Server {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	s := natstest.RunServer(&opts)
	t.Cleanup(s.Shutdown)
	return s
}

func newTestKV(t testing.TB, url string, cfg KVConfig) *KV {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bucket == "" {
		cfg.Bucket = "test_storage"
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.LockTTL == 0 {
		cfg.LockTTL = 30 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	kv := NewKV(js, cfg, nil)
	t.Cleanup(kv.Close)
	return kv
}

func TestKVStorage(t *testing.T) {
	s := runJetStream(t)
	st := newTestKV(t, s.ClientURL(), KVConfig{})
	ctx := context.Background()

	files := map[string]string{
		"certificates/local/example.com/example.com.crt":  "crt",
		"certificates/local/example.com/example.com.key":  "key",
		"certificates/local/*.example.com/wild.json":      "w",
		"acme/ca.example-directory/users/me@x.io/me.json": "user",
		"last_clean.json": "{}",
	}
	for k, v := range files {
		if err := st.Store(ctx, k, []byte(v)); err != nil {
			t.Fatalf("Store(%q): %v", k, err)
		}
	}

	t.Run("load", func(t *testing.T) {
		for k, v := range files {
			got, err := st.Load(ctx, k)
			if err != nil || string(got) != v {
				t.Fatalf("Load(%q) = %q, %v", k, got, err)
			}
		}
		if _, err := st.Load(ctx, "certificates/nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("missing key: %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("overwrite", func(t *testing.T) {
		if err := st.Store(ctx, "/last_clean.json/", []byte("v2")); err != nil {
			t.Fatal(err)
		}
		got, _ := st.Load(ctx, "last_clean.json")
		if string(got) != "v2" {
			t.Fatalf("got %q", got)
		}
	})

	t.Run("exists", func(t *testing.T) {
		for _, tc := range []struct {
			key  string
			want bool
		}{
			{"certificates/local/example.com/example.com.crt", true},
			{"certificates/local", true},
			{"certificates", true},
			{"", true},
			{"certificates/loc", false},
			{"nope", false},
		} {
			if got := st.Exists(ctx, tc.key); got != tc.want {
				t.Errorf("Exists(%q) = %v", tc.key, got)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			dir       string
			recursive bool
			want      []string
		}{
			{"certificates", false, []string{"certificates/local"}},
			{"certificates/local", false, []string{"certificates/local/*.example.com", "certificates/local/example.com"}},
			{"certificates/", true, []string{
				"certificates/local",
				"certificates/local/*.example.com",
				"certificates/local/*.example.com/wild.json",
				"certificates/local/example.com",
				"certificates/local/example.com/example.com.crt",
				"certificates/local/example.com/example.com.key",
			}},
			{"", false, []string{"acme", "certificates", "last_clean.json"}},
		} {
			got, err := st.List(ctx, tc.dir, tc.recursive)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("List(%q, %v) = %q, %v; want %q", tc.dir, tc.recursive, got, err, tc.want)
			}
		}
		// A bucket has no empty directories: nothing below is an empty
		// list, not an error (caddy-ratelimit logged its first read of a
		// new bucket as an ERROR).
		if got, err := st.List(ctx, "nope", true); err != nil || len(got) != 0 {
			t.Errorf("List of a missing dir = %q, %v; want nothing, no error", got, err)
		}
	})

	t.Run("stat", func(t *testing.T) {
		ki, err := st.Stat(ctx, "certificates/local/example.com/example.com.key")
		if err != nil || !ki.IsTerminal || ki.Size != 3 || time.Since(ki.Modified) > time.Minute {
			t.Fatalf("Stat file = %+v, %v", ki, err)
		}
		ki, err = st.Stat(ctx, "certificates/local")
		if err != nil || ki.IsTerminal {
			t.Fatalf("Stat dir = %+v, %v", ki, err)
		}
		if _, err := st.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Stat missing: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := st.Delete(ctx, "certificates/local/example.com/example.com.key"); err != nil {
			t.Fatal(err)
		}
		if st.Exists(ctx, "certificates/local/example.com/example.com.key") {
			t.Fatal("deleted key exists")
		}
		if err := st.Delete(ctx, "certificates/local/example.com/example.com.key"); err != nil {
			t.Fatalf("deleting twice: %v", err)
		}
		if err := st.Delete(ctx, "certificates"); err != nil { // a directory
			t.Fatal(err)
		}
		if st.Exists(ctx, "certificates") || st.Exists(ctx, "certificates/local/*.example.com/wild.json") {
			t.Fatal("directory still exists")
		}
		if !st.Exists(ctx, "acme/ca.example-directory/users/me@x.io/me.json") {
			t.Fatal("deleted too much")
		}
		// Store after delete works.
		if err := st.Store(ctx, "certificates/x", []byte("1")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("empty key", func(t *testing.T) {
		if err := st.Store(ctx, "//", []byte("x")); err == nil {
			t.Fatal("want error for an empty key")
		}
	})
}

func TestKVLocks(t *testing.T) {
	s := runJetStream(t)
	a := newTestKV(t, s.ClientURL(), KVConfig{LockTTL: time.Second})
	b := newTestKV(t, s.ClientURL(), KVConfig{LockTTL: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("mutual exclusion", func(t *testing.T) {
		var inside, maxInside atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			st := a
			if i%2 == 1 {
				st = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := st.Lock(ctx, "issue_cert_example.com"); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				time.Sleep(20 * time.Millisecond)
				inside.Add(-1)
				if err := st.Unlock(ctx, "issue_cert_example.com"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if maxInside.Load() != 1 {
			t.Fatalf("%d holders at once", maxInside.Load())
		}
	})

	t.Run("refresh keeps a held lock", func(t *testing.T) {
		if err := a.Lock(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		// Three TTLs later the lock is still a's.
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			ok, err := b.TryLock(ctx, "held")
			if err != nil || ok {
				t.Fatalf("TryLock of a held lock = %v, %v", ok, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := a.Unlock(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		ok, err := b.TryLock(ctx, "held")
		if err != nil || !ok {
			t.Fatalf("TryLock after Unlock = %v, %v", ok, err)
		}
		_ = b.Unlock(ctx, "held")
	})

	t.Run("dead holder's lock expires", func(t *testing.T) {
		dead := newTestKV(t, s.ClientURL(), KVConfig{LockTTL: time.Second})
		if err := dead.Lock(ctx, "orphan"); err != nil {
			t.Fatal(err)
		}
		dead.Close() // stops refreshing, never unlocks: a crashed replica
		start := time.Now()
		if err := b.Lock(ctx, "orphan"); err != nil {
			t.Fatal(err)
		}
		t.Logf("orphaned lock taken over after %v (ttl 1s)", time.Since(start).Round(time.Millisecond))
		_ = b.Unlock(ctx, "orphan")
	})

	t.Run("unlock of a lock not held", func(t *testing.T) {
		if err := a.Unlock(ctx, "never"); err == nil {
			t.Fatal("want error")
		}
	})

	t.Run("lock honors ctx", func(t *testing.T) {
		if err := a.Lock(ctx, "busy"); err != nil {
			t.Fatal(err)
		}
		defer a.Unlock(ctx, "busy")
		c2, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel2()
		if err := b.Lock(c2, "busy"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v, want deadline exceeded", err)
		}
	})
}

func TestKVNATSDown(t *testing.T) {
	// Made while NATS is unreachable: operations fail with an error, no hang
	// beyond the timeout, no panic.
	nc, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st := NewKV(js, KVConfig{Bucket: "x", Replicas: 1, LockTTL: time.Second, Timeout: 200 * time.Millisecond}, nil)
	defer st.Close()
	ctx := context.Background()
	if err := st.Store(ctx, "a", []byte("1")); err == nil {
		t.Fatal("Store without NATS succeeded")
	}
	if _, err := st.Load(ctx, "a"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load without NATS = %v; want an error that is not 'not exist'", err)
	}
	if st.Exists(ctx, "a") {
		t.Fatal("Exists without NATS")
	}
}

func BenchmarkKVLoad(b *testing.B) {
	s := runJetStream(b)
	st := newTestKV(b, s.ClientURL(), KVConfig{})
	ctx := context.Background()
	if err := st.Store(ctx, "rate_limit/instances/x.rlstate", make([]byte, 512)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := st.Load(ctx, "rate_limit/instances/x.rlstate"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeKey(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = encodeKey("certificates/local/api.example.com/api.example.com.crt")
	}
}

// TestKVReplicasOnOneServer: `replicas 3` (the reference config's) on a
// single NATS server creates the buckets with 1 replica and says so,
// instead of failing every write.
func TestKVReplicasOnOneServer(t *testing.T) {
	s := runJetStream(t)
	st := newTestKV(t, s.ClientURL(), KVConfig{Replicas: 3})
	ctx := context.Background()
	if err := st.Store(ctx, "a", []byte("1")); err != nil {
		t.Fatalf("Store with replicas 3 on one server: %v", err)
	}
	if ok, err := st.TryLock(ctx, "l"); err != nil || !ok {
		t.Fatalf("TryLock with replicas 3 on one server: %v, %v", ok, err)
	}
	_ = st.Unlock(ctx, "l")
}
