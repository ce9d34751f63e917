package caddyquota

import (
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/internal/natsconn"
)

type storageConn natsconn.Options

func (s storageConn) NATSOptions() natsconn.Options { return natsconn.Options(s) }

// TestFleetOldJSON: a fleet in the JSON written before the connection block
// (nats, creds_file, user, password, token) still loads, to the connection
// the block's names give; without servers the fleet takes the storage's.
func TestFleetOldJSON(t *testing.T) {
	old := `{"nats":["nats://a:4222,nats://b:4222"],"creds_file":"/c.creds","user":"u","password":"p","token":"t","bucket":"q"}`
	cur := `{"servers":["nats://a:4222","nats://b:4222"],"creds":"/c.creds","user":"u","password":"p","token":"t","bucket":"q"}`
	want := natsconn.Options{Servers: []string{"nats://a:4222", "nats://b:4222"}, CredsFile: "/c.creds", User: "u", Password: "p", Token: "t"}
	for _, js := range []string{old, cur} {
		var f FleetConfig
		if err := caddy.StrictUnmarshalJSON([]byte(js), &f); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		got, err := f.natsOptions(caddy.NewReplacer(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ngot  %+v\nwant %+v", js, got, want)
		}
	}

	storage := func() natsconn.OptionsProvider { return storageConn{Servers: []string{"nats://storage:4222"}} }
	if got, err := (&FleetConfig{}).natsOptions(caddy.NewReplacer(), storage); err != nil || got.Servers[0] != "nats://storage:4222" {
		t.Fatalf("without servers: %+v, %v; want the storage's connection", got, err)
	}
	if _, err := (&FleetConfig{}).natsOptions(caddy.NewReplacer(), nil); err == nil || !strings.Contains(err.Error(), "quota fleet: no NATS servers: set servers, or configure the `storage nats`") {
		t.Fatalf("without servers or storage: %v", err)
	}
	bad := &FleetConfig{Config: natsconn.Config{Servers: []string{"nats://a:4222"}, TLS: &natsconn.TLSConfig{Cert: "c.pem"}}}
	if _, err := bad.natsOptions(caddy.NewReplacer(), nil); err == nil || !strings.Contains(err.Error(), "quota fleet") {
		t.Fatalf("cert without key: %v", err)
	}
}
