package ctl

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestFleetInit runs `gatewayctl fleet init` against a real NATS server:
// it creates the audit stream and the buckets with the settings the
// gateways use, and a second run leaves them as they are.
func TestFleetInit(t *testing.T) {
	c := natstest.StartCluster(t, 1)
	var out strings.Builder
	if err := run([]string{"fleet", "init", "--nats", c.URL()}, &out); err != nil {
		t.Fatalf("fleet init: %v\n%s", err, out.String())
	}
	t.Logf("first run:\n%s", out.String())
	for _, want := range []string{"created stream AUDIT", "created bucket gateway_storage:", "created bucket gateway_storage_locks:",
		"created bucket gateway_routes:", "created bucket gateway_routes_rate_limit:", "created bucket gateway_quota:", "1 replica"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != "gateway.audit" || cfg.Duplicates != 2*time.Minute ||
		cfg.MaxAge != 7*24*time.Hour || cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 {
		t.Errorf("AUDIT stream config: %+v", cfg)
	}
	for bucket, ttl := range map[string]time.Duration{"gateway_storage": 0, "gateway_storage_locks": 30 * time.Second,
		"gateway_routes": time.Minute, "gateway_routes_rate_limit": 8 * 24 * time.Hour, "gateway_quota": 100 * 24 * time.Hour} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Errorf("bucket %s: %v", bucket, err)
			continue
		}
		s, err := kv.Status(ctx)
		if err != nil || s.TTL() != ttl || s.History() != 1 {
			t.Errorf("bucket %s: ttl %v history %d (%v), want ttl %v history 1", bucket, s.TTL(), s.History(), err, ttl)
		}
	}

	out.Reset()
	if err := run([]string{"fleet", "init", "--nats", c.URL()}, &out); err != nil {
		t.Fatalf("second fleet init: %v", err)
	}
	if strings.Contains(out.String(), "created") || !strings.Contains(out.String(), "stream AUDIT exists (1 replica)") {
		t.Errorf("second run:\n%s\nwant everything left as it is", out.String())
	}

	// Replicas a single server cannot place: a clear error.
	other := natstest.StartCluster(t, 1)
	err = run([]string{"fleet", "init", "--nats", other.URL(), "--replicas", "3"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--replicas at most the number of JetStream servers") {
		t.Errorf("--replicas 3 on one server: %v", err)
	}
	if err := run([]string{"fleet", "init"}, &out); err == nil || !strings.Contains(err.Error(), "--nats is required") {
		t.Errorf("without --nats: %v", err)
	}
}

// TestFleetInitTLS: the connection flags reach a NATS server that
// requires TLS and a client certificate (the settings the gateway's
// connection block has: internal/natsauth builds both): with them fleet
// init creates the stream; without the client certificate it fails,
// naming the connection.
func TestFleetInitTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	base := []string{"fleet", "init", "--nats", s.URL, "--timeout", "5s", "--tls-ca", s.CA, "--tls-server-name", natstest.TLSServerName}
	var out strings.Builder
	if err := run(base, &out); err == nil || !strings.Contains(err.Error(), "connecting to "+s.URL) {
		t.Fatalf("fleet init without a client certificate: %v, want a connection error\n%s", err, out.String())
	}
	out.Reset()
	if err := run(append(base, "--tls-cert", s.Cert), &out); err == nil || !strings.Contains(err.Error(), "give both or neither") {
		t.Fatalf("fleet init with --tls-cert alone: %v", err)
	}
	out.Reset()
	if err := run(append(base, "--tls-cert", s.Cert, "--tls-key", s.Key), &out); err != nil {
		t.Fatalf("fleet init over mutual TLS: %v\n%s", err, out.String())
	}
	_, js := s.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "AUDIT"); err != nil {
		t.Fatalf("no AUDIT stream after fleet init over TLS: %v\n%s", err, out.String())
	}
}
