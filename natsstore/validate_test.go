package natsstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storageConfig is a config whose `tls internal` site makes Caddy's pki
// app load (or, on an empty storage, create and store) its CA when the
// config is provisioned. Its storage's bucket is validate_test; conn holds
// more connection settings (a tls block).
func storageConfig(t *testing.T, url, localCopy, conn string) []byte {
	t.Helper()
	ports := freeport.Ports(t, 2)
	cf := fmt.Sprintf(`{
	admin off
	http_port %d
	https_port %d
	skip_install_trust
	storage nats %s {
		bucket validate_test
		local_copy %s
		%s
	}
}

https://validate.localhost {
	tls internal
	respond "ok"
}
`, ports[0], ports[1], url, localCopy, conn)
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// caKey is the key of the running config's CA (its pki app's root
// certificate) in the storage's bucket.
const caKey = "pki.authorities.local.root=2Ecrt"

// waitForKey waits until key is in bucket.
func waitForKey(t *testing.T, js jetstream.JetStream, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		kv, err := js.KeyValue(ctx, bucket)
		if err == nil {
			if _, err = kv.Get(ctx, key); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running config did not store %s in bucket %s: %v", key, bucket, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestValidateWritesNothing: `caddy validate` (caddy.Validate, which
// provisions the config: the pki app creates its CA on an empty storage)
// creates no bucket and stores nothing in NATS nor in the local copy;
// running the same config stores the CA.
func TestValidateWritesNothing(t *testing.T) {
	opts := natsserver.DefaultTestOptions
	opts.Port, opts.JetStream, opts.StoreDir = -1, true, t.TempDir()
	srv := natsserver.RunServer(&opts)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streams := func() []string {
		var names []string
		l := js.StreamNames(ctx)
		for n := range l.Name() {
			names = append(names, n)
		}
		return names
	}
	localCopy := t.TempDir()
	cfg := storageConfig(t, srv.ClientURL(), localCopy, "")

	var c caddy.Config
	if err := caddy.StrictUnmarshalJSON(cfg, &c); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&c); err != nil {
		t.Fatalf("validate: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // anything asynchronous would write by now
	if names := streams(); len(names) != 0 {
		t.Fatalf("caddy validate created streams %v in NATS", names)
	}
	var files []string
	_ = filepath.WalkDir(localCopy, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Fatalf("caddy validate wrote %v", files)
	}

	// Running it stores the CA in NATS (and the copy).
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatal(err)
	}
	defer caddy.Stop()
	waitForKey(t, js, "validate_test", caKey)
	if _, err := os.Stat(filepath.Join(localCopy, "data", "pki", "authorities", "local", "root.crt")); err != nil {
		t.Fatalf("local copy of the CA: %v", err)
	}
	// The site's certificate, issued in the background, is stored too
	// (and nothing writes after the test's Stop).
	waitForKey(t, js, "validate_test", "certificates.local.validate=2Elocalhost.validate=2Elocalhost=2Ecrt")
}
