// Package natsconn shares NATS connections inside one process: one
// connection per distinct set of Options, reference counted, so that every
// module that talks to the same servers with the same credentials (audit
// sinks, the fleet storage module, cache invalidation) uses one TCP
// connection, one reconnect loop and one reconnect buffer.
//
// Connections are made with RetryOnFailedConnect, so Get succeeds even while
// the servers are down: the connection keeps trying in the background and
// publishes are buffered (up to ReconnectBufSize) meanwhile.
//
// A module that connects to NATS configures it with Config, the one NATS
// connection block (servers, creds, nkey, user/password, token, tls { ca
// cert key server_name }, name), in four steps:
//
//	type Fleet struct {
//		natsconn.Config // embedded: its fields are the module's JSON fields
//		Bucket string `json:"bucket,omitempty"`
//	}
//
//	// Caddyfile: in the block's loop, for a subdirective the module does not know
//	if ok, err := f.Config.UnmarshalCaddyfileOption(d); ok { ... }
//
//	// Provision: own servers, else those of `storage nats` (nil: none)
//	opts, err := f.Config.Resolve(nil, natsconn.ConfigStorage(ctx))
//	conn, release, err := natsconn.Get(opts) // release in Cleanup/Stop
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsauth"
	"github.com/apigate/gateway/internal/urls"
)

// Options identify a connection. Two Get calls with equal Options share one
// connection.
type Options struct {
	// Servers are NATS URLs (nats://host:port, tls://host:port). Required.
	Servers []string
	// Name is the client name shown by the server (default "apigate").
	Name string
	// The credentials and TLS settings, as natsauth.Settings' fields of
	// the same names say (natsauth builds the client options from them,
	// for gatewayctl too).
	User, Password, Token, CredsFile, NKeyFile string
	TLS                                        bool
	TLSCA, TLSCert, TLSKey, TLSServerName      string
	// ConnectTimeout bounds each dial (default 2s).
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts (default 500ms).
	ReconnectWait time.Duration
	// MaxReconnects is the number of reconnect attempts; 0 means the
	// default, forever (-1).
	MaxReconnects int
	// ReconnectBufSize is how many bytes of publishes are buffered while
	// disconnected (default 8 MiB).
	ReconnectBufSize int
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "apigate"
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 500 * time.Millisecond
	}
	if o.MaxReconnects == 0 {
		o.MaxReconnects = -1
	}
	if o.ReconnectBufSize <= 0 {
		o.ReconnectBufSize = 8 << 20
	}
	return o
}

// key is a canonical string of the options (servers sorted).
func (o Options) key() string {
	s := append([]string(nil), o.Servers...)
	sort.Strings(s)
	return fmt.Sprintf("%q|%q|%q|%q|%q|%q|%q|%t|%q|%q|%q|%q|%s|%s|%d|%d", s, o.Name, o.User, o.Password,
		o.Token, o.CredsFile, o.NKeyFile, o.TLS, o.TLSCA, o.TLSCert, o.TLSKey, o.TLSServerName,
		o.ConnectTimeout, o.ReconnectWait, o.MaxReconnects, o.ReconnectBufSize)
}

// Conn is a shared connection. Do not Close it: call the release function
// returned by Get instead.
type Conn struct {
	nc     *nats.Conn
	key    string
	labels [2]string // servers (redacted, sorted), name: for metrics

	jsOnce sync.Once
	js     jetstream.JetStream
	jsErr  error

	lmu       sync.Mutex
	listeners map[int]func()
	nextL     int

	// late is set when the first connect failed: the connect that
	// follows (nats.go's connected callback) counts as a reconnect.
	late atomic.Bool
}

// OnReconnect registers fn to run (on nats.go's callback goroutine, so it
// must not block) each time the connection is re-established after a
// loss, and when it is first established after the servers were
// unreachable at Get; subscribers use it to resynchronize, since core
// NATS messages sent while disconnected are not delivered, and senders to
// retry at once. The returned function removes fn.
func (c *Conn) OnReconnect(fn func()) (remove func()) {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.listeners == nil {
		c.listeners = map[int]func(){}
	}
	id := c.nextL
	c.nextL++
	c.listeners[id] = fn
	return func() {
		c.lmu.Lock()
		delete(c.listeners, id)
		c.lmu.Unlock()
	}
}

func (c *Conn) reconnected() {
	c.lmu.Lock()
	fns := make([]func(), 0, len(c.listeners))
	for _, fn := range c.listeners {
		fns = append(fns, fn)
	}
	c.lmu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// NATS returns the underlying connection, for publishing and subscribing.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// JetStream returns a JetStream context on the connection (made once).
func (c *Conn) JetStream() (jetstream.JetStream, error) {
	c.jsOnce.Do(func() { c.js, c.jsErr = jetstream.New(c.nc) })
	return c.js, c.jsErr
}

// conns holds one connection per distinct Options, shared by every user
// (and across config reloads); the last user's release closes it.
var conns = caddy.NewUsagePool()

// OptionsProvider is implemented by what a config's `storage nats` global
// option provisions (the storage that caddy.Context.Storage returns): other
// modules of the same config that have no NATS servers of their own
// (permission invalidation) use its cluster, and share its connection.
// Being per config, it ends with the config: a reload that drops
// `storage nats` leaves them without a default.
type OptionsProvider interface {
	NATSOptions() Options
}

// ConfigStorage returns the lookup of ctx's config's `storage nats` (as
// an OptionsProvider; nil when the config's storage is another), for
// Config.Resolve, which makes it only when the block has no servers.
func ConfigStorage(ctx caddy.Context) func() OptionsProvider {
	return func() OptionsProvider {
		p, _ := ctx.Storage().(OptionsProvider)
		return p
	}
}

// Get returns the shared connection for opts, connecting if it is the first
// user. The release function must be called exactly once when the caller no
// longer needs the connection; the last release drains and closes it.
func Get(opts Options) (*Conn, func(), error) {
	if len(opts.Servers) == 0 {
		return nil, nil, errors.New("natsconn: no server URL")
	}
	for _, s := range opts.Servers {
		if strings.TrimSpace(s) == "" {
			return nil, nil, errors.New("natsconn: empty server URL")
		}
	}
	if err := opts.check(); err != nil {
		return nil, nil, fmt.Errorf("natsconn: %w", err)
	}
	opts = opts.withDefaults()
	k := opts.key()
	val, _, err := conns.LoadOrNew(k, func() (caddy.Destructor, error) {
		sorted := append([]string(nil), opts.Servers...)
		sort.Strings(sorted)
		c := &Conn{key: k, labels: [2]string{redact(sorted), opts.Name}}
		nc, err := connect(opts, c.reconnected, func() {
			if c.late.CompareAndSwap(true, false) {
				c.reconnected()
			}
		})
		if err != nil {
			return nil, err
		}
		if !nc.IsConnected() {
			c.late.Store(true)
		}
		c.nc = nc
		return c, nil
	})
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return val.(*Conn), func() { once.Do(func() { _, _ = conns.Delete(k) }) }, nil
}

// Destruct drains and closes the connection when its last user releases
// it. Draining flushes what is buffered; it is bounded so that a dead
// server cannot hold a config reload.
func (c *Conn) Destruct() error {
	done := make(chan struct{})
	go func() {
		_ = c.nc.Drain()
		for c.nc.IsDraining() {
			time.Sleep(10 * time.Millisecond)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
	c.nc.Close()
	return nil
}

// open returns the open connections.
func open() []*Conn {
	var cs []*Conn
	conns.Range(func(_, v any) bool {
		cs = append(cs, v.(*Conn))
		return true
	})
	return cs
}

// Count returns how many distinct connections are open (for tests).
func Count() int { return len(open()) }

func connect(o Options, onReconnect, onConnect func()) (*nats.Conn, error) {
	nopts := []nats.Option{
		nats.ReconnectHandler(func(*nats.Conn) { onReconnect() }),
		nats.ConnectHandler(func(*nats.Conn) { onConnect() }),
		nats.Name(o.Name),
		nats.Timeout(o.ConnectTimeout),
		nats.ReconnectWait(o.ReconnectWait),
		nats.MaxReconnects(o.MaxReconnects),
		nats.ReconnectBufSize(o.ReconnectBufSize),
		nats.RetryOnFailedConnect(true),
		// Errors are reported by the users of the connection (failed
		// publishes); do not let nats.go print them.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}
	auth, err := natsauth.Settings{User: o.User, Password: o.Password, Token: o.Token, CredsFile: o.CredsFile,
		NKeyFile: o.NKeyFile, TLS: o.TLS, TLSCA: o.TLSCA, TLSCert: o.TLSCert, TLSKey: o.TLSKey,
		TLSServerName: o.TLSServerName}.Options()
	if err != nil {
		return nil, fmt.Errorf("natsconn: %w", err)
	}
	nopts = append(nopts, auth...)
	nc, err := nats.Connect(strings.Join(o.Servers, ","), nopts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connecting to %s: %w", redact(o.Servers), err)
	}
	return nc, nil
}

// TooFewServers tells a JetStream placement failure (fewer servers than
// the replicas asked for, or replicas on a server that is not clustered)
// from other errors: the modules that create streams then create them
// with one replica, and say so.
func TooFewServers(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10005, // no suitable peers for placement
		10023, // insufficient resources
		10074: // replicas > 1 not supported in non-clustered mode
		return true
	}
	return false
}

// redact drops user info from URLs for error messages.
func redact(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = urls.Redact(s)
	}
	return strings.Join(out, ",")
}

// SplitServers turns server lists as configured (each entry may itself be a
// comma-separated list, as {env.NATS_URLS} expands to) into one URL each,
// trimmed, empty ones dropped.
func SplitServers(lists ...string) []string {
	var servers []string
	for _, l := range lists {
		for _, one := range strings.Split(l, ",") {
			if one = strings.TrimSpace(one); one != "" {
				servers = append(servers, one)
			}
		}
	}
	return servers
}

// ValidBucket reports whether name is a key-value bucket name JetStream
// takes: one or more ASCII letters, digits, '-' and '_'. Each module that
// names a bucket (storage, the docker fleet, the quota fleet) checks its
// setting with it in Validate and names the setting in its own error.
func ValidBucket(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return name != ""
}

// BindKV binds the key-value bucket cfg.Bucket as it exists (whatever its
// settings), or creates it with cfg; where the servers cannot place
// cfg.Replicas (TooFewServers) it is created with 1 replica and a
// warning. A bucket another process created meanwhile is bound.
func BindKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, logger *zap.Logger) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("binding bucket %q: %w", cfg.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if err != nil && cfg.Replicas > 1 && TooFewServers(err) {
		logger.Warn("too few NATS servers for the configured replicas; creating the bucket with 1. "+
			"Once enough servers run, raise it with: nats stream edit KV_"+cfg.Bucket+" --replicas N",
			zap.String("bucket", cfg.Bucket), zap.Int("replicas", cfg.Replicas), zap.Error(err))
		cfg.Replicas = 1
		kv, err = js.CreateKeyValue(ctx, cfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("creating bucket %q: %w", cfg.Bucket, err)
	}
	logger.Info("created key-value bucket", zap.String("bucket", cfg.Bucket), zap.Int("replicas", cfg.Replicas))
	return kv, nil
}
