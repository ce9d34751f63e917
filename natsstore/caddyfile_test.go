package natsstore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/apigate/gateway/internal/natsconn"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Storage
		err      string
	}{
		{name: "args", in: `nats nats://a:4222 nats://b:4222`,
			want: Storage{Config: natsconn.Config{Servers: []string{"nats://a:4222", "nats://b:4222"}}}},
		{name: "block", in: `nats {
			servers nats://a:4222
			user gw
			password {env.NATS_PASSWORD}
			token t
			tls_cert c.pem
			tls_key k.pem
			bucket b
			replicas 3
			lock_ttl 10s
			timeout 1s
		}`, want: Storage{Config: natsconn.Config{Servers: []string{"nats://a:4222"}, User: "gw", Password: "{env.NATS_PASSWORD}",
			Token: "t", TLS: &natsconn.TLSConfig{Cert: "c.pem", Key: "k.pem"}}, Bucket: "b", Replicas: 3,
			LockTTL: caddy.Duration(10 * time.Second), Timeout: caddy.Duration(time.Second)}},
		{name: "connection block", in: `nats nats://a:4222 {
			creds /c.creds
			nkey /u.nk
			tls {
				ca ca.pem
				server_name nats.internal
			}
			name gw-1
			bucket b
		}`, want: Storage{Config: natsconn.Config{Servers: []string{"nats://a:4222"}, Creds: "/c.creds", NKey: "/u.nk",
			TLS: &natsconn.TLSConfig{CA: "ca.pem", ServerName: "nats.internal"}, Name: "gw-1"}, Bucket: "b"}},
		{name: "bad tls subdirective", in: "nats {\n tls {\n verify\n }\n}", err: "unrecognized tls subdirective 'verify'"},
		{name: "unknown", in: "nats {\n bukket x\n}", err: "unrecognized subdirective 'bukket'"},
		{name: "replicas range", in: "nats {\n replicas 7\n}", err: `invalid replicas "7"`},
		{name: "bad ttl", in: "nats {\n lock_ttl soon\n}", err: `invalid lock_ttl "soon"`},
		{name: "missing arg", in: "nats {\n bucket\n}", err: "wrong argument count"},
		{name: "extra arg", in: "nats {\n bucket a b\n}", err: "wrong argument count"},
		{name: "servers empty", in: "nats {\n servers\n}", err: "wrong argument count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Storage
			err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(s.Servers, " ") != strings.Join(tc.want.Servers, " ") {
				t.Fatalf("servers = %q", s.Servers)
			}
			s.Servers, tc.want.Servers = nil, nil
			if !reflect.DeepEqual(s, tc.want) {
				t.Fatalf("got %+v\nwant %+v", s, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Storage{Bucket: "b", Replicas: 1, LockTTL: caddy.Duration(time.Minute), Timeout: 1}
	for _, tc := range []struct {
		name string
		mod  func(*Storage)
		err  string
	}{
		{"ok", func(*Storage) {}, ""},
		{"bucket", func(s *Storage) { s.Bucket = "a.b" }, `invalid bucket "a.b"`},
		{"replicas", func(s *Storage) { s.Replicas = 6 }, "invalid replicas 6"},
		{"ttl", func(s *Storage) { s.LockTTL = caddy.Duration(time.Millisecond) }, `invalid lock_ttl "1ms"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mod(&s)
			err := s.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate = %v, want %q", err, tc.err)
			}
		})
	}
}
