package caddypermcache

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

func TestParseInvalidateMessage(t *testing.T) {
	for _, tc := range []struct {
		name, in, kind, err string
	}{
		{"subject", `{"subject":"alice"}`, "subject", ""},
		{"empty subject", `{"subject":""}`, "subject", ""},
		{"prefix", `{"prefix":["alice","GET"]}`, "prefix", ""},
		{"key", `{"key":["alice","GET","/orders/1"]}`, "key", ""},
		{"all", `{"all":true}`, "all", ""},
		{"two kinds", `{"subject":"a","all":true}`, "", "exactly one"},
		{"none", `{}`, "", "exactly one"},
		{"all false", `{"all":false}`, "", "exactly one"},
		{"empty prefix", `{"prefix":[]}`, "", `empty "prefix"`},
		{"unknown field", `{"subjct":"a"}`, "", "unknown field"},
		{"not json", `alice`, "", "invalid JSON"},
		{"two values", `{"all":true}{"all":true}`, "", "more than one"},
		{"wrong type", `{"subject":1}`, "", "invalid JSON"},
		{"too big", `{"subject":"` + strings.Repeat("a", maxInvalidateMessage) + `"}`, "", "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, kind, err := ParseInvalidateMessage([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || kind != tc.kind {
				t.Fatalf("kind %q, err %v; want %q", kind, err, tc.kind)
			}
		})
	}
}

func fillCache(t *testing.T, tmpl *KeyTemplate) *Cache {
	t.Helper()
	c := NewCache(1000)
	for _, v := range [][]string{
		{"alice", "GET", "/orders/1"}, {"alice", "GET", "/orders/2"}, {"alice", "POST", "/orders"},
		{"bob", "GET", "/orders/1"},
	} {
		c.Put(tmpl.Render(v...), v[0], true, time.Hour, 0, Now())
	}
	return c
}

func TestInvalidateApply(t *testing.T) {
	tmpl, err := ParseKeyTemplate(DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, msg string
		dropped   int
		err       string
	}{
		{"subject", `{"subject":"alice"}`, 3, ""},
		{"prefix one", `{"prefix":["alice"]}`, 3, ""},
		{"prefix two", `{"prefix":["alice","GET"]}`, 2, ""},
		{"key", `{"key":["alice","GET","/orders/1"]}`, 1, ""},
		{"key not cached", `{"key":["carol","GET","/orders/1"]}`, 0, ""},
		{"all", `{"all":true}`, 4, ""},
		{"key too short", `{"key":["alice"]}`, 0, "3 placeholders"},
		{"prefix too long", `{"prefix":["a","b","c","d"]}`, 0, "3 placeholders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fillCache(t, tmpl)
			m, _, err := ParseInvalidateMessage([]byte(tc.msg))
			if err != nil {
				t.Fatal(err)
			}
			n, err := m.apply(c, tmpl)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || n != tc.dropped || c.Len() != 4-tc.dropped {
				t.Fatalf("dropped %d (len %d), err %v; want %d", n, c.Len(), err, tc.dropped)
			}
		})
	}
}

// TestInvalidationOverNATS subscribes a handler's cache to a subject on a
// real NATS server and publishes messages to it.
func TestInvalidationOverNATS(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	srv := natstest.RunServer(&opts)
	defer srv.Shutdown()

	tmpl, _ := ParseKeyTemplate(DefaultKey)
	cache := fillCache(t, tmpl)
	h := &Handler{InvalidateSubject: "gateway.perm.invalidate", NATSServers: []string{srv.ClientURL()},
		tmpl: tmpl, shared: &shared{cache: cache}, logger: zap.NewNop()}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.startInvalidation(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.inv.stop()

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitLen := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for cache.Len() != want {
			if time.Now().After(deadline) {
				t.Fatalf("cache has %d entries, want %d", cache.Len(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	_ = nc.Publish("gateway.perm.invalidate", []byte(`not json`)) // ignored
	_ = nc.Publish("gateway.perm.invalidate", []byte(`{"key":["bob","GET","/orders/1"]}`))
	waitLen(3)
	_ = nc.Publish("gateway.perm.invalidate", []byte(`{"subject":"alice"}`))
	waitLen(0)
}

type storageNATS natsconn.Options

func (s storageNATS) NATSOptions() natsconn.Options { return natsconn.Options(s) }

// TestInvalidationServers: the handler's own servers, else the config's
// `storage nats` cluster, else an error naming the setting.
func TestInvalidationServers(t *testing.T) {
	h := &Handler{InvalidateSubject: "x"}
	if _, err := h.natsOptions(nil); err == nil || !strings.Contains(err.Error(), "invalidate_subject: nats: no NATS servers: set servers") {
		t.Fatalf("no servers and no storage nats: %v, want an error naming nats servers", err)
	}
	storage := func() natsconn.OptionsProvider { return storageNATS{Servers: []string{"nats://storage:4222"}} }
	if o, err := h.natsOptions(storage); err != nil || len(o.Servers) != 1 || o.Servers[0] != "nats://storage:4222" {
		t.Fatalf("with storage nats: %+v, %v", o, err)
	}
	h.NATSServers = []string{"nats://a:4222, nats://b:4222"}
	if o, err := h.natsOptions(storage); err != nil || len(o.Servers) != 2 || o.Servers[0] != "nats://a:4222" {
		t.Fatalf("own servers: %+v, %v", o, err)
	}
}

// TestInvalidationOldJSON: a handler in the JSON written before the
// connection block (nats_servers, nats_creds_file) still loads, to the
// connection that the nats block gives.
func TestInvalidationOldJSON(t *testing.T) {
	old := `{"url":"http://perm","invalidate_subject":"x","nats_servers":["nats://a:4222,nats://b:4222"],"nats_creds_file":"/c.creds"}`
	cur := `{"url":"http://perm","invalidate_subject":"x","nats":{"servers":["nats://a:4222","nats://b:4222"],"creds":"/c.creds"}}`
	want := natsconn.Options{Servers: []string{"nats://a:4222", "nats://b:4222"}, CredsFile: "/c.creds"}
	for _, js := range []string{old, cur} {
		var h Handler
		if err := caddy.StrictUnmarshalJSON([]byte(js), &h); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		got, err := h.natsOptions(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ngot  %+v\nwant %+v", js, got, want)
		}
	}
	both := Handler{NATSCredsFile: "/a.creds", NATS: &natsconn.Config{Servers: []string{"nats://a:4222"}, Creds: "/b.creds"}}
	if _, err := both.natsOptions(nil); err == nil || !strings.Contains(err.Error(), "creds") {
		t.Fatalf("nats_creds_file and nats { creds } differ: %v", err)
	}
}

func FuzzParseInvalidateMessage(f *testing.F) {
	for _, s := range []string{`{"subject":"a"}`, `{"prefix":["a"]}`, `{"key":["a","b","c"]}`, `{"all":true}`, `{}`, `[`} {
		f.Add([]byte(s))
	}
	tmpl, _ := ParseKeyTemplate(DefaultKey)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := ParseInvalidateMessage(data)
		if err != nil {
			return
		}
		c := NewCache(16)
		_, _ = m.apply(c, tmpl)
	})
}
