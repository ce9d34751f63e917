package caddyaudit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestForgedRequestIDs sends 100 requests that all carry one client
// request id through an audit handler with request_id_header, to a real
// JetStream stream (whose duplicate window drops messages with an id it
// has stored): the stream must hold 100 events, each with the gateway's
// own request id, the client's id in client_request_id, the app's node in
// node, and a message id of the app's node and that request id. Before the ids were the
// gateway's, JetStream stored one event and dropped 99: a client could
// erase its own audit trail. It runs on both request paths.
func TestForgedRequestIDs(t *testing.T) {
	pathtest.Run(t, testForgedRequestIDs)
}

func testForgedRequestIDs(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	opts := natsserver.DefaultTestOptions
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", -1, true, t.TempDir()
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	stream := "FORGED_" + strings.ToUpper(p.Name)
	const port, n = 19412, 100
	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19413
	https_port 19414
	grace_period 1s
	audit {
		node gw-forged
		sink nats %[3]s {
			subject audit.forged.%[4]s
			stream %[5]s
			flush_interval 20ms
		}
	}
}

:%[2]d {
	route /* {
		audit public {
			request_id_header X-Request-Id
		}
		respond "public"
	}
}
`, e2eAdminPort, port, srv.ClientURL(), p.Name, stream)
	tester := p.Load(t, e2eAdminPort, config, "srv0")

	forged := "forged-" + p.Name
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/item/%d", port, i), nil)
		req.Header.Set("X-Request-Id", forged)
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs uint64
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, err := js.Stream(ctx, stream); err == nil {
			if info, err := st.Info(ctx); err == nil {
				msgs = info.State.Msgs
			}
		}
		if msgs >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every event the gateway sent is in by now; one more flush interval
	// would show a late duplicate.
	time.Sleep(100 * time.Millisecond)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("the stream holds %d events for %d requests that shared the client request id %q", info.State.Msgs, n, forged)
	}
	ids := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var ev caddyaudit.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
		if ev.Node != "gw-forged" {
			t.Fatalf("event %d: node %q, want the app's node gw-forged", seq, ev.Node)
		}
		if ev.ClientRequestID != forged {
			t.Fatalf("event %d: client_request_id %q, want %q", seq, ev.ClientRequestID, forged)
		}
		if ev.RequestID == "" || ev.RequestID == forged || ids[ev.RequestID] {
			t.Fatalf("event %d: request_id %q is not the gateway's own, unique id", seq, ev.RequestID)
		}
		ids[ev.RequestID] = true
		if got, want := m.Header.Get(jetstream.MsgIDHeader), "gw-forged/"+ev.RequestID; got != want {
			t.Fatalf("event %d: Nats-Msg-Id %q, want %q", seq, got, want)
		}
		if seq == info.State.FirstSeq {
			rec.Add(p, "first event", pathtest.Event(ev, forged, "FORGED"))
		}
	}
	rec.Add(p, "events", len(ids))
}
