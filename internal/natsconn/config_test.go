package natsconn

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/nats-io/nats-server/v2/server"
	natsservertest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

func TestConfigOptions(t *testing.T) {
	t.Setenv("NATSCONN_TEST_URLS", "nats://a:4222, nats://b:4222")
	t.Setenv("NATSCONN_TEST_PASSWORD", "s3cret")
	for _, tc := range []struct {
		name string
		cfg  Config
		want Options
		err  string
	}{
		{name: "every option", cfg: Config{
			Servers: []string{"{env.NATSCONN_TEST_URLS}", "nats://c:4222"}, Creds: "c.creds", NKey: "u.nk",
			User: "gw", Password: "{env.NATSCONN_TEST_PASSWORD}", Token: "t", Name: "gw-1",
			TLS: &TLSConfig{CA: "ca.pem", Cert: "c.pem", Key: "k.pem", ServerName: "nats.internal"},
		}, want: Options{
			Servers: []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}, CredsFile: "c.creds", NKeyFile: "u.nk",
			User: "gw", Password: "s3cret", Token: "t", Name: "gw-1",
			TLS: true, TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem", TLSServerName: "nats.internal",
		}},
		{name: "older spellings", cfg: Config{
			Servers: []string{"nats://a:4222"}, CredsFile: "c.creds", TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem",
		}, want: Options{
			Servers: []string{"nats://a:4222"}, CredsFile: "c.creds", TLS: true, TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem",
		}},
		{name: "both spellings agree", cfg: Config{
			Servers: []string{"nats://a:4222"}, Creds: "c.creds", CredsFile: "c.creds",
		}, want: Options{Servers: []string{"nats://a:4222"}, CredsFile: "c.creds"}},
		{name: "empty tls requires tls", cfg: Config{Servers: []string{"nats://a:4222"}, TLS: &TLSConfig{}},
			want: Options{Servers: []string{"nats://a:4222"}, TLS: true}},
		{name: "both spellings differ", cfg: Config{Servers: []string{"nats://a:4222"}, Creds: "a", CredsFile: "b"},
			err: `creds "a" and its older spelling creds_file "b" are both set`},
		{name: "tls ca twice", cfg: Config{Servers: []string{"nats://a:4222"}, TLS: &TLSConfig{CA: "a"}, TLSCA: "b"},
			err: "tls_ca"},
		{name: "cert without key", cfg: Config{Servers: []string{"nats://a:4222"}, TLS: &TLSConfig{Cert: "c.pem"}},
			err: "needs both tls cert and tls key"},
		{name: "no servers", cfg: Config{Creds: "c.creds"}, err: ErrNoServers.Error()},
		{name: "servers empty after expansion", cfg: Config{Servers: []string{"{env.NATSCONN_TEST_UNSET}"}}, err: ErrNoServers.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.Options(nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			// Options.Config is the way back, for modules that pass a
			// connection on in JSON.
			back, err := got.Config().Options(nil)
			if err != nil || !reflect.DeepEqual(back, tc.want) {
				t.Fatalf("round trip through Config: %+v, %v", back, err)
			}
		})
	}
}

type storageStub Options

func (s storageStub) NATSOptions() Options { return Options(s) }

func TestResolve(t *testing.T) {
	storage := storageStub{Servers: []string{"nats://storage:4222"}, CredsFile: "storage.creds"}
	lookup := func() OptionsProvider { return storage }
	got, err := Config{Name: "ignored"}.Resolve(nil, lookup)
	if err != nil || !reflect.DeepEqual(got, Options(storage)) {
		t.Fatalf("without servers: %+v, %v; want the storage's options", got, err)
	}
	got, err = Config{Servers: []string{"nats://own:4222"}}.Resolve(nil, func() OptionsProvider {
		t.Fatal("storage looked up with servers of its own")
		return nil
	})
	if err != nil || got.Servers[0] != "nats://own:4222" || got.CredsFile != "" {
		t.Fatalf("with servers: %+v, %v; want its own", got, err)
	}
	if _, err := (Config{}).Resolve(nil, nil); !errors.Is(err, ErrNoServers) {
		t.Fatalf("no servers, no lookup: %v", err)
	}
	if _, err := (Config{}).Resolve(nil, func() OptionsProvider { return nil }); !errors.Is(err, ErrNoServers) {
		t.Fatalf("no servers, no storage nats: %v", err)
	}
}

// TestConfigOldJSON: the JSON each module wrote before the connection
// block (storage's creds_file and tls_*) loads to the same options as the
// block's own names.
func TestConfigOldJSON(t *testing.T) {
	old := `{"servers":["nats://a:4222"],"creds_file":"c.creds","user":"u","password":"p","token":"t",
		"tls_ca":"ca.pem","tls_cert":"c.pem","tls_key":"k.pem"}`
	cur := `{"servers":["nats://a:4222"],"creds":"c.creds","user":"u","password":"p","token":"t",
		"tls":{"ca":"ca.pem","cert":"c.pem","key":"k.pem"}}`
	var a, b Config
	if err := json.Unmarshal([]byte(old), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cur), &b); err != nil {
		t.Fatal(err)
	}
	oa, err := a.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := b.Options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(oa, ob) {
		t.Fatalf("old JSON: %+v\nnew JSON: %+v", oa, ob)
	}
}

func TestUnmarshalCaddyfileOption(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Config
		err      string
	}{
		{name: "every option", in: `x {
			servers nats://a:4222 nats://b:4222
			servers nats://c:4222
			creds c.creds
			nkey u.nk
			user gw
			password {env.P}
			token t
			tls {
				ca ca.pem
				cert c.pem
				key k.pem
				server_name nats.internal
			}
			name gw-1
		}`, want: Config{Servers: []string{"nats://a:4222", "nats://b:4222", "nats://c:4222"}, Creds: "c.creds",
			NKey: "u.nk", User: "gw", Password: "{env.P}", Token: "t", Name: "gw-1",
			TLS: &TLSConfig{CA: "ca.pem", Cert: "c.pem", Key: "k.pem", ServerName: "nats.internal"}}},
		{name: "older spellings", in: "x {\n creds_file c.creds\n tls_ca ca.pem\n tls_cert c.pem\n tls_key k.pem\n}",
			want: Config{Creds: "c.creds", TLS: &TLSConfig{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}}},
		{name: "bare tls", in: "x {\n tls\n}", want: Config{TLS: &TLSConfig{}}},
		{name: "not ours", in: "x {\n bucket b\n}", err: "unrecognized NATS subdirective 'bucket'"},
		{name: "tls argument", in: "x {\n tls on\n}", err: "tls takes no argument"},
		{name: "tls unknown", in: "x {\n tls {\n verify\n }\n}", err: "unrecognized tls subdirective 'verify'"},
		{name: "tls ca without value", in: "x {\n tls {\n ca\n }\n}", err: "ca needs a value"},
		{name: "servers without value", in: "x {\n servers\n}", err: "wrong argument count"},
		{name: "two values", in: "x {\n user a b\n}", err: "user takes one value"},
		{name: "no value", in: "x {\n token\n}", err: "token needs a value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			d := caddyfile.NewTestDispenser(tc.in)
			d.Next()
			err := c.UnmarshalCaddyfileBlock(d)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", c, tc.want)
			}
		})
	}
}

// TestTLS connects to a server that requires TLS and a client certificate,
// and whose certificate holds only natstest.TLSServerName: the connection
// comes up with every tls option, and not without any one of them.
func TestTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	full := TLSConfig{CA: s.CA, Cert: s.Cert, Key: s.Key, ServerName: natstest.TLSServerName}
	for _, tc := range []struct {
		name string
		tls  func(*TLSConfig)
		ok   bool
	}{
		{"every option", func(*TLSConfig) {}, true},
		{"no ca", func(c *TLSConfig) { c.CA = "" }, false},
		{"no client certificate", func(c *TLSConfig) { c.Cert, c.Key = "", "" }, false},
		{"no server name", func(c *TLSConfig) { c.ServerName = "" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsc := full
			tc.tls(&tlsc)
			opts, err := Config{Servers: []string{s.URL}, TLS: &tlsc, Name: "tls-" + tc.name}.Options(nil)
			if err != nil {
				t.Fatal(err)
			}
			nc := connects(t, opts, tc.ok)
			if tc.ok {
				if _, err := nc.TLSConnectionState(); err != nil {
					t.Fatalf("connected without TLS: %v", err)
				}
			}
		})
	}
}

// TestNKey authenticates with an nkey seed file against a server that
// knows the user by its public key.
func TestNKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	file := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	o := natsservertest.DefaultTestOptions
	o.Port = -1
	o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	s := natsservertest.RunServer(&o)
	defer s.Shutdown()
	for _, tc := range []struct {
		name string
		nkey string
		ok   bool
	}{{"seed", file, true}, {"none", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := Config{Servers: []string{s.ClientURL()}, NKey: tc.nkey, Name: "nkey-" + tc.name}.Options(nil)
			if err != nil {
				t.Fatal(err)
			}
			connects(t, opts, tc.ok)
		})
	}
	if _, _, err := Get(Options{Servers: []string{s.ClientURL()}, NKeyFile: filepath.Join(t.TempDir(), "missing.nk")}); err == nil || !strings.Contains(err.Error(), "nkey") {
		t.Fatalf("missing seed file: %v", err)
	}
}

// connects gets a connection for opts and waits until it is connected
// (ok) or has failed (its first error), and checks which it was.
func connects(t *testing.T, opts Options, ok bool) *nats.Conn {
	t.Helper()
	opts.ReconnectWait = 20 * time.Millisecond
	c, rel, err := Get(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	nc := c.NATS()
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsConnected() && (ok || nc.LastError() == nil) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if nc.IsConnected() != ok {
		t.Fatalf("connected = %v, want %v (last error: %v)", nc.IsConnected(), ok, nc.LastError())
	}
	return nc
}
