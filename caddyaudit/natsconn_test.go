package caddyaudit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/nats-io/nats.go"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestNATSSinkOverTLS: a nats sink reaches a server that requires TLS and
// a client certificate through the connection block's tls options, and a
// request's event arrives on its subject.
func TestNATSSinkOverTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	nc, _ := s.Connect(t)
	events := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("audit.tls", events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tester := caddytester.Load(t, 2904, fmt.Sprintf(`{
	admin localhost:2904
	http_port 19450
	https_port 19451
	audit {
		sink nats %s {
			subject audit.tls
			flush_interval 10ms
			%s
		}
	}
}

:19452 {
	audit
	respond "ok"
}
`, s.URL, s.Caddyfile()))
	resp, err := tester.Client.Get("http://127.0.0.1:19452/over-tls")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-events:
			var ev caddyaudit.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatalf("bad event %q: %v", m.Data, err)
			}
			if ev.Path == "/over-tls" {
				return
			}
		case <-deadline:
			t.Fatal("no event arrived through the TLS connection")
		}
	}
}

// TestSinkOldJSON: a nats sink in the JSON written before the connection
// block (url, creds_file, user, password, token) still loads, and means
// what the block's names mean.
func TestSinkOldJSON(t *testing.T) {
	old := `{"type":"nats","url":"nats://a:4222,nats://b:4222","subject":"s","creds_file":"/c.creds","user":"u","password":"p","token":"t"}`
	cur := `{"type":"nats","servers":["nats://a:4222","nats://b:4222"],"subject":"s","creds":"/c.creds","user":"u","password":"p","token":"t"}`
	var got [2]caddyaudit.SinkConfig
	for i, js := range []string{old, cur} {
		if err := caddy.StrictUnmarshalJSON([]byte(js), &got[i]); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
	}
	if got[0].URL != "nats://a:4222,nats://b:4222" || got[0].CredsFile != "/c.creds" || got[0].User != "u" ||
		got[0].Password != "p" || got[0].Token != "t" {
		t.Fatalf("old JSON: %+v", got[0])
	}
	// url is the sink's own field (Provision adds it to servers:
	// TestSinkConnection); the rest is the connection block's
	got[0].Servers = got[1].Servers
	o, err := got[0].Config.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := got[1].Config.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, c) {
		t.Fatalf("old JSON: %+v\nnew JSON: %+v", o, c)
	}
}
