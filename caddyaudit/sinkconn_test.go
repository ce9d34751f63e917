package caddyaudit

import (
	"reflect"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/internal/natsconn"
)

// TestSinkConnection: a nats sink's connection is its url (the older
// spelling of servers) and servers, the connection block's settings, and
// its name as client name; its spool stays where url put it.
func TestSinkConnection(t *testing.T) {
	t.Setenv("AUDIT_TEST_TOKEN", "tok")
	sc := SinkConfig{Type: "nats", URL: "nats://a:4222,nats://b:4222", Name: "primary", Config: natsconn.Config{
		Servers: []string{"nats://c:4222"}, Token: "{env.AUDIT_TEST_TOKEN}",
		TLS: &natsconn.TLSConfig{CA: "ca.pem", ServerName: "nats.internal"},
	}}
	got, err := sc.natsOptions(caddy.NewReplacer())
	if err != nil {
		t.Fatal(err)
	}
	want := natsconn.Options{Servers: []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}, Name: "primary",
		Token: "tok", TLS: true, TLSCA: "ca.pem", TLSServerName: "nats.internal"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}

	onlyServers := SinkConfig{Type: "nats", Subject: "s", Config: natsconn.Config{Servers: []string{"nats://u:pw@a:4222"}}}
	if err := onlyServers.validate(); err != nil {
		t.Fatalf("servers without url: %v", err)
	}
	if n := onlyServers.defaultName(); n != "nats:nats://a:4222/s" {
		t.Fatalf("default name %q", n)
	}
	if err := (SinkConfig{Type: "nats", Subject: "s"}).validate(); err == nil {
		t.Fatal("a nats sink without url or servers validated")
	}
	// the directory the code before servers existed gave this sink
	if d := spoolSubdir(SinkConfig{Type: "nats", URL: "nats://a:4222", Subject: "s"}); d != "nats-faabd3354944" {
		t.Fatalf("the spool of a url sink moved: %s", d)
	}
	a := SinkConfig{Type: "nats", Subject: "s", Config: natsconn.Config{Servers: []string{"nats://a:4222"}}}
	b := SinkConfig{Type: "nats", Subject: "s", Config: natsconn.Config{Servers: []string{"nats://b:4222"}}}
	if spoolSubdir(a) == spoolSubdir(b) {
		t.Fatal("two sinks of different servers share a spool")
	}
}
