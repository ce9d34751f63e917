package caddydocker

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestFleetOverTLS: two fleets configured from JSON with the connection
// block's tls options reach a server that requires TLS and a client
// certificate, and what one publishes the other follows.
func TestFleetOverTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	start := func(node, advertise string) *Fleet {
		var o FleetOptions
		js := fmt.Sprintf(`{"servers":[%q],"tls":%s,"name":"fleet-tls-%s","advertise":%q,"node":%q,"ttl":2000000000}`,
			s.URL, s.JSON(), node, advertise, node)
		if err := caddy.StrictUnmarshalJSON([]byte(js), &o); err != nil {
			t.Fatal(err)
		}
		opts, err := o.natsOptions(nil)
		if err != nil {
			t.Fatal(err)
		}
		opts.ReconnectWait = 50 * time.Millisecond
		conn, release, err := natsconn.Get(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		log, _ := observed(t)
		f, err := NewFleet(o.config(), conn, log.Named(node))
		if err != nil {
			t.Fatal(err)
		}
		f.Start()
		t.Cleanup(f.Stop)
		return f
	}
	a := start("a", "10.0.0.1")
	b := start("b", "10.0.0.2")
	a.Publish([]Container{ctr("web", 30001)})
	remoteIs(t, b, "a/web", 30*time.Second)
}

// TestFleetOldJSON: a fleet in the JSON written before the connection
// block (nats) still loads, to the connection servers gives.
func TestFleetOldJSON(t *testing.T) {
	for _, js := range []string{
		`{"nats":["nats://a:4222,nats://b:4222"],"advertise":"x"}`,
		`{"servers":["nats://a:4222","nats://b:4222"],"advertise":"x"}`,
	} {
		var o FleetOptions
		if err := caddy.StrictUnmarshalJSON([]byte(js), &o); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		got, err := o.natsOptions(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"nats://a:4222", "nats://b:4222"}; !reflect.DeepEqual(got.Servers, want) {
			t.Fatalf("%s: servers %q", js, got.Servers)
		}
	}
	if _, err := (&FleetOptions{}).natsOptions(func() natsconn.OptionsProvider { return nil }); err == nil ||
		!strings.Contains(err.Error(), "docker: fleet: no NATS servers: set servers") {
		t.Fatalf("no servers, no storage nats: %v", err)
	}
}

// TestRateLimitCountsConnection: the counts block the rate_limit labels'
// handlers get on a fleet without `storage nats` carries the fleet's whole
// NATS connection (TLS and credentials included), in JSON the quota's
// Counts loads strictly; with `storage nats` it carries none (the
// handlers take the storage's).
func TestRateLimitCountsConnection(t *testing.T) {
	opts := natsconn.Options{Servers: []string{"nats://a:4222"}, Name: "gw", CredsFile: "/c.creds",
		TLS: true, TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem", TLSServerName: "nats.internal"}
	a := &App{Fleet: &FleetOptions{}}
	raw, err := a.countsBlock(false, 250*time.Millisecond, opts)
	if err != nil {
		t.Fatal(err)
	}
	var c caddyquota.Counts
	if err := caddy.StrictUnmarshalJSON(raw, &c); err != nil || c.Fleet == nil {
		t.Fatalf("%s: %v", raw, err)
	}
	got, err := c.Fleet.Config.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, opts) || c.Fleet.Bucket != "gateway_routes_rate_limit" {
		t.Fatalf("%s loads as %+v (bucket %q), want %+v", raw, got, c.Fleet.Bucket, opts)
	}
	raw, err = a.countsBlock(true, 250*time.Millisecond, opts)
	if err != nil || string(raw) != `{"fleet":{"bucket":"gateway_routes_rate_limit","sync_interval":250000000}}` {
		t.Fatalf("with storage nats: %s %v", raw, err)
	}
}
