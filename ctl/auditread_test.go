package ctl

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestAuditTailAndCount reads a real JetStream AUDIT stream (made by
// fleet init) holding events of two gateways, as the gateways write them
// (node, decision, client_request_id), plus a chain record that is not a
// request: count counts the request events, all or those of one
// client_request_id, per node and decision; --since leaves out what is
// older; tail prints the events as stored, one a line.
func TestAuditTailAndCount(t *testing.T) {
	c := natstest.StartCluster(t, 1)
	if err := run([]string{"fleet", "init", "--nats", c.URL()}, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	publish := func(node, decision, crid string, i int) {
		t.Helper()
		ev := fmt.Sprintf(`{"bytes_out":3,"client_request_id":%q,"decision":%q,"method":"GET","node":%q,"path":"/x/%d","request_id":"%s-%d","status":200}`, crid, decision, node, i, node, i)
		if _, err := js.Publish(ctx, "gateway.audit", []byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		publish("gw-1", "allow", "old", i)
	}
	time.Sleep(1500 * time.Millisecond) // the --since window below starts after these
	mark := time.Now()
	for i := 3; i < 8; i++ {
		publish("gw-1", "allow", "req-7", i)
	}
	publish("gw-2", "deny", "req-7", 8)
	publish("gw-2", "allow", "other", 9)
	if _, err := js.Publish(ctx, "gateway.audit", []byte(`{"kind":"chain_start","node":"gw-1","chain":"c"}`)); err != nil {
		t.Fatal(err)
	}
	since := (time.Since(mark) + time.Second).String()

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"all", []string{"count"}, "events 10\nnode gw-1 8\nnode gw-2 2\ndecision allow 9\ndecision deny 1\n"},
		{"one client request id", []string{"count", "--client-request-id", "req-7"}, "events 6\nnode gw-1 5\nnode gw-2 1\ndecision allow 5\ndecision deny 1\n"},
		{"since", []string{"count", "--since", since}, "events 7\nnode gw-1 5\nnode gw-2 2\ndecision allow 6\ndecision deny 1\n"},
		{"an id nobody sent", []string{"count", "--client-request-id", "nobody"}, "events 0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if err := run(append(append([]string{"audit"}, tc.args...), "--nats", c.URL()), &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", out.String(), tc.want)
			}
		})
	}

	t.Run("tail", func(t *testing.T) {
		var out strings.Builder
		if err := run([]string{"audit", "tail", "--nats", c.URL(), "--since", since}, &out); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 8 || !strings.Contains(lines[0], `"request_id":"gw-1-3"`) || !strings.Contains(lines[7], `"kind":"chain_start"`) {
			t.Errorf("tail printed %d lines:\n%s", len(lines), out.String())
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"audit", "count"},
			{"audit", "count", "--nats", c.URL(), "--stream", "NOPE"},
			{"audit", "tail", "--nats", c.URL(), "--since", "-1m"},
		} {
			if err := run(args, &strings.Builder{}); err == nil {
				t.Errorf("%v: no error", args)
			} else {
				t.Logf("%v: %v", args, err)
			}
		}
	})
}
