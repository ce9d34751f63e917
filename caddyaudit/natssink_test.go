package caddyaudit

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/apigate/gateway/internal/natsconn"
	gwnatstest "github.com/apigate/gateway/internal/testkit/natstest"
)

func runNATS(t *testing.T, port int, storeDir string) *server.Server {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Host = "127.0.0.1"
	opts.Port = port
	if storeDir != "" {
		opts.JetStream = true
		opts.StoreDir = storeDir
	}
	s := natstest.RunServer(&opts)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return s
}

func TestNATSSinkCore(t *testing.T) {
	s := runNATS(t, -1, "")
	defer s.Shutdown()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	got := map[string]bool{}
	sub, err := nc.Subscribe("gateway.audit", func(m *nats.Msg) {
		var ev Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Errorf("bad message %q: %v", m.Data, err)
			return
		}
		mu.Lock()
		got[ev.RequestID] = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	sink, err := newNATSSink(natsconn.Options{Servers: []string{s.ClientURL()}}, "gw-test", "gateway.audit", false, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, workerConfig{BatchSize: 10, FlushInterval: 5 * time.Millisecond, RetryBase: 5 * time.Millisecond}, sink, nil)
	waitFor(t, "connection", func() bool { return sink.conn.NATS().IsConnected() })
	const n = 100
	for i := 0; i < n; i++ {
		w.Enqueue(testEvent(i))
	}
	waitFor(t, "all events", func() bool { mu.Lock(); defer mu.Unlock(); return allIDs(n)(got) })
}

func streamIDs(t *testing.T, url, stream string) (map[string]bool, uint64) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, 0
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0
	}
	ids := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		var ev Event
		if json.Unmarshal(m.Data, &ev) == nil {
			ids[ev.RequestID] = true
		}
		if want := "gw-test/" + ev.RequestID; m.Header.Get(jetstream.MsgIDHeader) != want {
			t.Errorf("Nats-Msg-Id %q, want %q", m.Header.Get(jetstream.MsgIDHeader), want)
		}
	}
	return ids, info.State.Msgs
}

func TestNATSSinkJetStreamServerRestart(t *testing.T) {
	store := t.TempDir()
	s := runNATS(t, -1, store)
	url := s.ClientURL()
	addrPort := s.Addr().(*net.TCPAddr).Port

	sink, err := newNATSSink(natsconn.Options{Servers: []string{url}, ReconnectWait: 20 * time.Millisecond},
		"gw-test", "audit.events", true, "AUDIT", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, workerConfig{QueueSize: 64, BatchSize: 10, FlushInterval: 2 * time.Millisecond,
		RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, BlockTimeout: time.Minute}, sink, nil)

	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			w.Enqueue(testEvent(i))
			if i == n/3 {
				// Restart the server mid-stream, same port and store.
				s.Shutdown()
				s.WaitForShutdown()
				opts := natstest.DefaultTestOptions
				opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", addrPort, true, store
				s = natstest.RunServer(&opts) // t.Fatal is not allowed here
				if !s.ReadyForConnections(10 * time.Second) {
					t.Error("restarted nats server not ready")
				}
			}
		}
	}()
	<-done
	defer s.Shutdown()
	var ids map[string]bool
	var msgs uint64
	waitFor(t, "every event in the stream", func() bool {
		ids, msgs = streamIDs(t, url, "AUDIT")
		return allIDs(n)(ids)
	})
	if msgs != n {
		t.Fatalf("stream holds %d messages for %d events: duplicates were not removed by Nats-Msg-Id", msgs, n)
	}
	if d := w.m.droppedN.Load(); d != 0 {
		t.Fatalf("%d dropped", d)
	}
}

func TestNATSSinkDedupOnRetry(t *testing.T) {
	s := runNATS(t, -1, t.TempDir())
	defer s.Shutdown()
	sink, err := newNATSSink(natsconn.Options{Servers: []string{s.ClientURL()}}, "gw-test", "audit.dedup", true, "DEDUP", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	waitFor(t, "connection", func() bool { return sink.conn.NATS().IsConnected() })
	var batch []record
	for i := 0; i < 5; i++ {
		ev := testEvent(i)
		batch = append(batch, record{id: ev.RequestID, data: ev.AppendJSON(nil)})
	}
	// A retried batch, and the same events read back from the spool
	// (no id beside the data): still five messages.
	spooled := make([]record, len(batch))
	for i, r := range batch {
		spooled[i] = record{data: r.data}
	}
	for _, b := range [][]record{batch, batch, spooled} {
		if err := sink.Send(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	_, msgs := streamIDs(t, s.ClientURL(), "DEDUP")
	if msgs != 5 {
		t.Fatalf("%d messages, want 5", msgs)
	}
}

func TestNATSSinkNotConnected(t *testing.T) {
	sink, err := newNATSSink(natsconn.Options{Servers: []string{"nats://127.0.0.1:1"}}, "gw-test", "x", false, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	err = sink.Send(context.Background(), []record{{data: []byte("{}")}})
	if err == nil {
		t.Fatal("want error while disconnected")
	}
	if err != errNotConnected {
		t.Fatalf("err = %v, want %v", err, errNotConnected)
	}
}

// TestNATSSinkRetriesWhenNATSReturns: a batch that has been failing for a
// while (its next retry seconds away) goes as soon as NATS is back, not
// when its backoff ends: the sink's Ready wakes the worker. Before, audit
// events waited up to 12 s after NATS returned.
func TestNATSSinkRetriesWhenNATSReturns(t *testing.T) {
	cluster := gwnatstest.StartCluster(t, 1)
	sink, err := newNATSSink(natsconn.Options{Servers: cluster.URLs, ReconnectWait: 50 * time.Millisecond},
		"gw-test", "audit.ready", true, "READY", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	w := startWorker(t, workerConfig{BatchSize: 10, FlushInterval: 5 * time.Millisecond,
		RetryBase: 100 * time.Millisecond, RetryMax: 30 * time.Second}, sink, zap.New(core))
	waitFor(t, "connection", func() bool { return sink.conn.NATS().IsConnected() })
	w.Enqueue(testEvent(0))
	waitFor(t, "the first event stored", func() bool { ids, _ := streamIDs(t, cluster.URL(), "READY"); return ids["id-0"] })

	cluster.ShutdownAll()
	w.Enqueue(testEvent(1))
	// Until a retry is 2 s or more away.
	deadline := time.Now().Add(30 * time.Second)
	for {
		long := false
		for _, e := range logs.FilterMessage("audit batch not delivered; retrying").All() {
			if d, ok := e.ContextMap()["retry_in"].(time.Duration); ok && d >= 2*time.Second {
				long = true
			}
		}
		if long {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no retry 2s away within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cluster.RestartAll()
	back := time.Now()
	waitFor(t, "the event sent during the outage stored", func() bool { ids, _ := streamIDs(t, cluster.URL(), "READY"); return ids["id-1"] })
	took := time.Since(back)
	t.Logf("stored %v after NATS was back (the pending retry was 2s or more away)", took.Round(time.Millisecond))
	if took > 1500*time.Millisecond {
		t.Errorf("the event waited %v after NATS was back: the retry was not woken", took)
	}
	// The outage logged once when it began and once when it ended; its
	// retries only at debug level (the backlog alarm, alert_after, is
	// its own line).
	var loud []string
	for _, e := range logs.All() {
		if e.Level >= zap.InfoLevel && !strings.HasPrefix(e.Message, "audit backlog") {
			loud = append(loud, e.Message)
		}
	}
	want := []string{"audit sink does not deliver; events wait (queue, spool) and are retried until it does", "audit sink delivers again"}
	if !slices.Equal(loud, want) {
		t.Errorf("the outage logged %q at info and above, want %q", loud, want)
	}
}
