package natsstore_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/natsstore"
)

// TestStorageOverTLS: storage nats reaches a server that requires TLS and
// a client certificate through the connection block's tls options: the
// running config's CA lands in the bucket.
func TestStorageOverTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	cfg := storageConfig(t, s.URL, t.TempDir(), s.Caddyfile())
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatal(err)
	}
	defer caddy.Stop()
	_, js := s.Connect(t)
	waitForKey(t, js, "validate_test", caKey)
}

// TestOldJSON: a storage config in the JSON written before the connection
// block (creds_file, tls_ca, tls_cert, tls_key) still loads, with the
// same connection as the block's names give.
func TestOldJSON(t *testing.T) {
	old := `{"servers":["nats://a:4222"],"creds_file":"/c.creds","user":"u","password":"p",
		"tls_ca":"/ca.pem","tls_cert":"/c.pem","tls_key":"/k.pem","bucket":"b"}`
	cur := `{"servers":["nats://a:4222"],"creds":"/c.creds","user":"u","password":"p",
		"tls":{"ca":"/ca.pem","cert":"/c.pem","key":"/k.pem"},"bucket":"b"}`
	var opts [2]natsconn.Options
	for i, js := range []string{old, cur} {
		var s natsstore.Storage
		if err := caddy.StrictUnmarshalJSON([]byte(js), &s); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		o, err := s.Config.Options(nil)
		if err != nil {
			t.Fatal(err)
		}
		opts[i] = o
	}
	if !reflect.DeepEqual(opts[0], opts[1]) {
		t.Fatalf("old JSON: %+v\nnew JSON: %+v", opts[0], opts[1])
	}
	want := natsconn.Options{Servers: []string{"nats://a:4222"}, CredsFile: "/c.creds", User: "u", Password: "p",
		TLS: true, TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem"}
	if !reflect.DeepEqual(opts[0], want) {
		b, _ := json.Marshal(opts[0])
		t.Fatalf("old JSON: %s", b)
	}
}
