package natsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/apigate/gateway/internal/metrics"
	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// openCopy opens a local copy of bucket "copy" in dir on the servers at
// url, as the module does, for a config that runs.
func openCopy(t *testing.T, url, dir string) (*local, *configStorage) {
	t.Helper()
	opts := natsconn.Options{Servers: []string{url}, ReconnectWait: 50 * time.Millisecond}
	conn, release, err := natsconn.Get(opts)
	if err != nil {
		t.Fatal(err)
	}
	js, err := conn.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	kv := NewKV(js, KVConfig{Bucket: "copy", Replicas: 1, LockTTL: 2 * time.Second, Timeout: time.Second}, log)
	l, err := newLocal(dir, kv, conn, release, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Destruct() })
	return l, newConfigStorage(l, opts, func() bool { return true }, nil, log)
}

// peer is another replica's view of the bucket: a plain client.
func peer(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var kv jetstream.KeyValue
	eventually(t, "binding the bucket", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "copy", History: 1})
		return err
	})
	return kv
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// copyMetrics reads the local copies' metrics of bucket.
func copyMetrics(t *testing.T, bucket string) string {
	t.Helper()
	var local, queued float64 = -1, -1
	metrics.Each(collector{}, func(labels map[string]string, v float64) {
		if labels["bucket"] != bucket {
			return
		}
		if local < 0 {
			local = v
		} else {
			queued = v
		}
	})
	return fmt.Sprintf("local %v, queued %v", local, queued)
}

func natsValue(kv jetstream.KeyValue, key string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e, err := kv.Get(ctx, encodeKey(key))
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

func wantValue(kv jetstream.KeyValue, key, want string) func() error {
	return func() error {
		got, err := natsValue(kv, key)
		if err != nil {
			return err
		}
		if got != want {
			return errors.New(key + " = " + got + ", want " + want)
		}
		return nil
	}
}

// TestLocalCopyThroughOutage runs the storage through a NATS outage: reads
// come from the local copy at once, writes and deletes are queued (on
// disk: a restart during the outage keeps them) and applied when NATS is
// back, a write whose key another replica changed meanwhile loses to it,
// and locks are taken in the process.
func TestLocalCopyThroughOutage(t *testing.T) {
	cluster := natstest.StartCluster(t, 1)
	url := cluster.URL()
	dir := t.TempDir()
	l, s := openCopy(t, url, dir)
	ctx := context.Background()

	for k, v := range map[string]string{
		"certificates/local/a.example/a.example.crt": "a1",
		"rate_limit/instances/me.rlstate":            "r1",
		"stale/k":                                    "v1",
	} {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatalf("Store(%s): %v", k, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data", "certificates", "local", "a.example", "a.example.crt")); err != nil || string(b) != "a1" {
		t.Fatalf("local copy of a stored key: %q, %v", b, err)
	}
	other := peer(t, url)
	// Another replica changes a key this one has an older copy of, and
	// creates one this one never read (its internal CA, say).
	for k, v := range map[string]string{"stale/k": "theirs", "pki/authorities/local/root.crt": "fleet root"} {
		if _, err := other.Put(ctx, encodeKey(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}

	cluster.ShutdownAll()
	// Reads answer from the copy: the first may wait fallbackRead while
	// the client has not noticed the loss; after that, at once.
	if v, err := s.Load(ctx, "certificates/local/a.example/a.example.crt"); err != nil || string(v) != "a1" {
		t.Fatalf("Load during the outage = %q, %v", v, err)
	}
	start := time.Now()
	for i := 0; i < 20; i++ {
		if v, err := s.Load(ctx, "certificates/local/a.example/a.example.crt"); err != nil || string(v) != "a1" {
			t.Fatalf("Load during the outage = %q, %v", v, err)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("20 loads during the outage took %v: the storage waits on NATS", d)
	}
	if _, err := s.Load(ctx, "never/stored"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a key the copy lacks = %v, want fs.ErrNotExist", err)
	}

	// Writes and deletes are queued.
	for k, v := range map[string]string{
		"certificates/local/a.example/a.example.crt": "a2",
		"certificates/local/b.example/b.example.crt": "b1",
		"stale/k":                        "mine",
		"pki/authorities/local/root.crt": "my root",
	} {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatalf("Store(%s) during the outage: %v", k, err)
		}
	}
	if err := s.Delete(ctx, "rate_limit/instances/me.rlstate"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctx, "certificates/local/a.example/a.example.crt"); err != nil || string(v) != "a2" {
		t.Fatalf("Load of a queued write = %q, %v", v, err)
	}
	if s.Exists(ctx, "rate_limit/instances/me.rlstate") {
		t.Fatal("a deleted key exists during the outage")
	}
	got, err := s.List(ctx, "certificates/local", false)
	if want := []string{"certificates/local/a.example", "certificates/local/b.example"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("List during the outage = %q, %v; want %q", got, err, want)
	}
	if ki, err := s.Stat(ctx, "certificates/local/b.example/b.example.crt"); err != nil || !ki.IsTerminal || ki.Size != 2 {
		t.Fatalf("Stat during the outage = %+v, %v", ki, err)
	}

	// Locks are the process's own while NATS does not answer.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Lock(lctx, "issue_cert_b.example"); err != nil {
		t.Fatalf("Lock during the outage: %v", err)
	}
	if ok, err := s.TryLock(lctx, "issue_cert_b.example"); ok || err != nil {
		t.Fatalf("TryLock of a held lock = %v, %v", ok, err)
	}
	if err := s.Unlock(lctx, "issue_cert_b.example"); err != nil {
		t.Fatal(err)
	}

	// The metrics say so.
	if got := copyMetrics(t, "copy"); got != "local 1, queued 5" {
		t.Errorf("metrics during the outage: %s, want local 1, queued 5", got)
	}

	// A restart during the outage keeps the queue.
	l.Destruct()
	l, s = openCopy(t, url, dir)
	if n := l.Queued(); n != 5 {
		t.Fatalf("%d writes queued after a restart, want 5", n)
	}
	if v, err := s.Load(ctx, "stale/k"); err != nil || string(v) != "mine" {
		t.Fatalf("Load after a restart during the outage = %q, %v", v, err)
	}

	cluster.RestartAll()
	eventually(t, "queued write applied", wantValue(other, "certificates/local/a.example/a.example.crt", "a2"))
	eventually(t, "queued new key applied", wantValue(other, "certificates/local/b.example/b.example.crt", "b1"))
	eventually(t, "queued delete applied", func() error {
		if _, err := natsValue(other, "rate_limit/instances/me.rlstate"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("still there")
		}
		return nil
	})
	eventually(t, "queue empty", func() error {
		if n := l.Queued(); n != 0 {
			return errors.New("writes still queued")
		}
		if _, err := os.Stat(filepath.Join(dir, "pending.json")); !errors.Is(err, fs.ErrNotExist) {
			return errors.New("journal still there")
		}
		return nil
	})
	eventually(t, "metrics after the outage", func() error {
		if got := copyMetrics(t, "copy"); got != "local 0, queued 0" {
			return errors.New(got)
		}
		return nil
	})
	// The other replica's values won over the writes queued against
	// older ones, here and in the copy.
	for k, want := range map[string]string{"stale/k": "theirs", "pki/authorities/local/root.crt": "fleet root"} {
		if got, err := natsValue(other, k); err != nil || got != want {
			t.Errorf("NATS %s = %q, %v; want %q (the other replica's)", k, got, err, want)
		}
		if got, err := s.Load(ctx, k); err != nil || string(got) != want {
			t.Errorf("Load(%s) = %q, %v; want %q", k, got, err, want)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "data", filepath.FromSlash(k))); string(b) != want {
			t.Errorf("local copy of %s = %q, want %q", k, b, want)
		}
	}
	// And the storage reads NATS again.
	if _, err := other.Put(ctx, encodeKey("stale/k"), []byte("later")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "reading NATS again", func() error {
		v, err := s.Load(ctx, "stale/k")
		if err != nil || string(v) != "later" {
			return errors.New("got " + string(v))
		}
		return nil
	})
}

// TestHeldWrites: a config that has not started holds its writes (no
// bucket created, nothing in the copy); they are applied when it runs,
// and dropped when it ends without running.
func TestHeldWrites(t *testing.T) {
	cluster := natstest.StartCluster(t, 1)
	url := cluster.URL()
	dir := t.TempDir()
	l, _ := openCopy(t, url, dir)
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	buckets := func() []string {
		var names []string
		lister := js.KeyValueStoreNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		return names
	}

	for _, run := range []struct {
		name string
		runs bool
	}{{"never runs", false}, {"runs", true}} {
		t.Run(run.name, func(t *testing.T) {
			running := make(chan struct{})
			done := make(chan struct{})
			s := newConfigStorage(l, natsconn.Options{}, func() bool {
				select {
				case <-running:
					return true
				default:
					return false
				}
			}, done, zaptest.NewLogger(t))
			if v, err := s.Load(ctx, "pki/root.crt"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Load = %q, %v", v, err)
			}
			if err := s.Store(ctx, "pki/root.crt", []byte(run.name)); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Load(ctx, "pki/root.crt"); err != nil || string(v) != run.name {
				t.Fatalf("the config does not read its own held write: %q, %v", v, err)
			}
			if got, _ := s.List(ctx, "pki", true); !reflect.DeepEqual(got, []string{"pki/root.crt"}) {
				t.Fatalf("List = %q", got)
			}
			time.Sleep(200 * time.Millisecond) // the watcher polls every 50ms
			if names := buckets(); len(names) != 0 {
				t.Fatalf("buckets %v created by a config that has not started", names)
			}
			if files, _ := l.disk.below(ctx, ""); len(files) != 0 {
				t.Fatalf("local copy written by a config that has not started: %v", files)
			}
			if !run.runs {
				close(done)
				time.Sleep(200 * time.Millisecond)
				if names := buckets(); len(names) != 0 {
					t.Fatalf("buckets %v created by a config that never ran", names)
				}
				return
			}
			close(running)
			other := peer(t, url)
			eventually(t, "held write applied once the config runs", wantValue(other, "pki/root.crt", "runs"))
			close(done)
		})
	}
}
