package natsconn

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/prometheus/client_golang/prometheus"
)

func TestGetSharesAndReleases(t *testing.T) {
	s := natstest.RunRandClientPortServer()
	defer s.Shutdown()
	opts := Options{Servers: []string{s.ClientURL()}}

	c1, rel1, err := Get(opts)
	if err != nil {
		t.Fatal(err)
	}
	c2, rel2, err := Get(opts)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Fatal("equal options must share one connection")
	}
	c3, rel3, err := Get(Options{Servers: []string{s.ClientURL()}, Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if c3 == c1 {
		t.Fatal("different options must not share a connection")
	}
	if n := Count(); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c1.NATS().IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c1.JetStream(); err != nil {
		t.Fatal(err)
	}
	rel1()
	rel1() // idempotent
	if c1.NATS().IsClosed() {
		t.Fatal("closed while still referenced")
	}
	rel2()
	rel3()
	if !c1.NATS().IsClosed() || !c3.NATS().IsClosed() {
		t.Fatal("last release must close the connection")
	}
	if n := Count(); n != 0 {
		t.Fatalf("Count = %d, want 0", n)
	}
}

func TestGetErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no servers", Options{}},
		{"empty server", Options{Servers: []string{" "}}},
		{"tls cert without key", Options{Servers: []string{"nats://127.0.0.1:1"}, TLSCert: "c.pem"}},
		{"missing tls ca file", Options{Servers: []string{"nats://127.0.0.1:1"}, TLSCA: "/nonexistent/ca.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Get(tc.opts); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func TestGetServerDown(t *testing.T) {
	// RetryOnFailedConnect: Get succeeds and the connection keeps trying.
	c, rel, err := Get(Options{Servers: []string{"nats://127.0.0.1:1"}, ReconnectWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	if c.NATS().IsConnected() {
		t.Fatal("connected to nothing")
	}
}

func TestRedact(t *testing.T) {
	got := redact([]string{"nats://u:p@h:4222", "h2:4222", "a:b@h3"})
	if got != "nats://h:4222,h2:4222,h3" {
		t.Fatal(got)
	}
}

func TestSplitServers(t *testing.T) {
	got := SplitServers("nats://a:4222, nats://b:4222,", " nats://c:4222", "")
	if strings.Join(got, "|") != "nats://a:4222|nats://b:4222|nats://c:4222" {
		t.Fatalf("%q", got)
	}
}

func TestOnReconnect(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	s := natstest.RunServer(&opts)
	port := s.Addr().(*net.TCPAddr).Port
	c, rel, err := Get(Options{Servers: []string{s.ClientURL()}, ReconnectWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	got := make(chan struct{}, 4)
	remove := c.OnReconnect(func() { got <- struct{}{} })
	defer remove()
	s.Shutdown()
	opts.Port = port
	s = natstest.RunServer(&opts)
	defer s.Shutdown()
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no reconnect callback")
	}
}

func TestMetrics(t *testing.T) {
	s := natstest.RunRandClientPortServer()
	defer s.Shutdown()
	c, rel, err := Get(Options{Servers: []string{s.ClientURL()}, User: "u", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	deadline := time.Now().Add(5 * time.Second)
	for !c.NATS().IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := RegisterMetrics(reg); err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "gateway_nats_connected" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if strings.Contains(l.GetValue(), "secret") {
						t.Fatalf("label leaks the password: %q", l.GetValue())
					}
				}
				if m.GetGauge().GetValue() == 1 {
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatal("no gateway_nats_connected 1")
	}
}

// TestOnReconnectAfterLateStart: the servers were down at Get, and come
// up later: that first connect runs the OnReconnect callbacks too (a
// sender waiting to retry goes at once), and a connect at Get does not.
func TestOnReconnectAfterLateStart(t *testing.T) {
	port := freeport.Port(t)
	c, rel, err := Get(Options{Servers: []string{"nats://127.0.0.1:" + fmt.Sprint(port)}, ReconnectWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	got := make(chan struct{}, 4)
	remove := c.OnReconnect(func() { got <- struct{}{} })
	defer remove()
	opts := natstest.DefaultTestOptions
	opts.Port = port
	s := natstest.RunServer(&opts)
	defer s.Shutdown()
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no callback for the first connect after the servers came up")
	}

	// Connected at Get: no callback.
	c2, rel2, err := Get(Options{Servers: []string{s.ClientURL()}, Name: "at-get"})
	if err != nil {
		t.Fatal(err)
	}
	defer rel2()
	got2 := make(chan struct{}, 4)
	remove2 := c2.OnReconnect(func() { got2 <- struct{}{} })
	defer remove2()
	select {
	case <-got2:
		t.Fatal("callback for the connect made at Get")
	case <-time.After(300 * time.Millisecond):
	}
}

func TestValidBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"gateway_quota", true},
		{"KV-2", true},
		{"", false},
		{"a.b", false},
		{"a b", false},
		{"a/b", false},
		{"a*", false},
		{"caf\u00e9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidBucket(tc.name); got != tc.want {
				t.Fatalf("ValidBucket(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
