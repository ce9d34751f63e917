package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// eventually retries fn until it succeeds or the deadline passes.
func eventually(t *testing.T, what string, timeout time.Duration, fn func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterSurvivesRestart checks what the helper promises: a replicated
// bucket on three routed servers, that keeps working with one server down,
// and whose data is back after every server was shut down and restarted
// on the same ports and stores.
func TestClusterSurvivesRestart(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.URLs) != 3 || len(c.Servers()) != 3 || c.ByName("n2") == nil {
		t.Fatalf("cluster: urls %v, servers %v", c.URLs, c.Servers())
	}
	nc, js := connect(t, c.URL())
	var kv jetstream.KeyValue
	eventually(t, "creating an R3 bucket", 30*time.Second, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Replicas: 3})
		return err
	})
	if name := nc.ConnectedClusterName(); name != "natstest" {
		t.Errorf("cluster name %q", name)
	}
	eventually(t, "put", 10*time.Second, func(ctx context.Context) error {
		_, err := kv.PutString(ctx, "k", "v1")
		return err
	})

	c.Shutdown(0)
	if c.Server(0) != nil || c.ByName("n1") != nil {
		t.Fatal("server 0 still listed after Shutdown")
	}
	eventually(t, "put with one server down", 30*time.Second, func(ctx context.Context) error {
		_, err := kv.PutString(ctx, "k", "v2")
		return err
	})

	c.ShutdownAll()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if _, err := kv.Get(ctx, "k"); err == nil {
		t.Fatal("read succeeded with every server down")
	}
	cancel()
	c.RestartAll()
	eventually(t, "reading after a full restart", 60*time.Second, func(ctx context.Context) error {
		e, err := kv.Get(ctx, "k")
		if err != nil {
			return err
		}
		if string(e.Value()) != "v2" {
			t.Fatalf("value after restart %q, want v2", e.Value())
		}
		return nil
	})
}

// TestSingleServerIsStandalone: one server is not clustered, so JetStream
// refuses replicas, as a single-server deployment does.
func TestSingleServerIsStandalone(t *testing.T) {
	c := StartCluster(t, 1)
	nc, js := connect(t, c.URL())
	eventually(t, "connecting", 10*time.Second, func(context.Context) error {
		if !nc.IsConnected() {
			return nats.ErrConnectionClosed
		}
		return nil
	})
	if name := nc.ConnectedClusterName(); name != "" {
		t.Errorf("standalone server reports cluster %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Replicas: 3}); err == nil {
		t.Error("a standalone server accepted 3 replicas")
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
	c.Restart(0)
	eventually(t, "bucket after restart", 30*time.Second, func(ctx context.Context) error {
		_, err := js.KeyValue(ctx, "b")
		return err
	})
}
