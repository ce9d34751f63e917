// Package natsstore is Caddy's storage on a NATS JetStream key-value bucket
// (module caddy.storage.nats): with it, a fleet of gateway replicas shares
// certificates (automatic HTTPS, `tls internal`), their issuance locks, and
// rate_limit's distributed state.
package natsstore

import (
	"fmt"
	"regexp"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

func init() {
	caddy.RegisterModule(Storage{})
}

// Storage is a Caddy storage module on NATS JetStream key-value buckets.
// Data goes to Bucket, locks to Bucket+"_locks" (a bucket whose entries
// expire after LockTTL unless their holder refreshes them, so the lock of
// a crashed replica frees itself). Both buckets are created on first use
// when missing. The NATS connection is shared with every other module of
// the process that uses the same servers and credentials.
type Storage struct {
	// Servers are the NATS URLs (nats://host:4222, tls://host:4222); list
	// every node of the cluster. An entry may hold several URLs separated
	// by commas (as the audit NATS sink takes them), and placeholders such
	// as {env.NATS_URLS}. Default: nats://127.0.0.1:4222.
	Servers []string `json:"servers,omitempty"`
	// CredsFile is a NATS .creds file (user JWT and NKey seed).
	CredsFile string `json:"creds_file,omitempty"`
	// User and Password authenticate with a user name and password.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	// Token authenticates with a token.
	Token string `json:"token,omitempty"`
	// TLSCA is a PEM file of the CAs that verify the NATS servers.
	TLSCA string `json:"tls_ca,omitempty"`
	// TLSCert and TLSKey are a PEM client certificate and key (mutual TLS).
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// Bucket is the key-value bucket of the data; the locks go to
	// Bucket+"_locks". Default: caddy_storage.
	Bucket string `json:"bucket,omitempty"`
	// Replicas is the number of copies of each bucket kept by the NATS
	// cluster when this module creates the buckets (1 to 5; use 3 in a
	// 3-node cluster). Existing buckets are not changed. Default: 1.
	Replicas int `json:"replicas,omitempty"`
	// LockTTL is how long a lock outlives a holder that stopped refreshing
	// it (held locks are refreshed every LockTTL/3). It is the lock
	// bucket's max age, set when the bucket is created. Default: 30s.
	LockTTL caddy.Duration `json:"lock_ttl,omitempty"`
	// Timeout bounds each NATS operation. Default: 5s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	kv      *KV
	release func()
	logger  *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Storage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.storage.nats",
		New: func() caddy.Module { return new(Storage) },
	}
}

var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Provision expands placeholders, sets defaults and takes the shared
// connection (which keeps connecting in the background if NATS is down).
func (s *Storage) Provision(ctx caddy.Context) error {
	s.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	for i, u := range s.Servers {
		s.Servers[i] = repl.ReplaceKnown(u, "")
	}
	s.Servers = natsconn.SplitServers(s.Servers...)
	s.CredsFile = repl.ReplaceKnown(s.CredsFile, "")
	s.User = repl.ReplaceKnown(s.User, "")
	s.Password = repl.ReplaceKnown(s.Password, "")
	s.Token = repl.ReplaceKnown(s.Token, "")
	s.TLSCA = repl.ReplaceKnown(s.TLSCA, "")
	s.TLSCert = repl.ReplaceKnown(s.TLSCert, "")
	s.TLSKey = repl.ReplaceKnown(s.TLSKey, "")
	if len(s.Servers) == 0 {
		s.Servers = []string{"nats://127.0.0.1:4222"}
	}
	if s.Bucket == "" {
		s.Bucket = "caddy_storage"
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.LockTTL == 0 {
		s.LockTTL = caddy.Duration(30 * time.Second)
	}
	if s.Timeout == 0 {
		s.Timeout = caddy.Duration(5 * time.Second)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	opts := natsconn.Options{
		Servers: s.Servers, User: s.User, Password: s.Password, Token: s.Token,
		CredsFile: s.CredsFile, TLSCA: s.TLSCA, TLSCert: s.TLSCert, TLSKey: s.TLSKey,
	}
	c, release, err := natsconn.Get(opts)
	if err != nil {
		return fmt.Errorf("storage nats: %w", err)
	}
	js, err := c.JetStream()
	if err != nil {
		release()
		return fmt.Errorf("storage nats: jetstream: %w", err)
	}
	s.release = release
	s.kv = NewKV(js, KVConfig{
		Bucket: s.Bucket, Replicas: s.Replicas,
		LockTTL: time.Duration(s.LockTTL), Timeout: time.Duration(s.Timeout),
	}, s.logger)
	// Modules of this config without NATS servers of their own (permission
	// invalidation) use this cluster and share this connection.
	s.kv.natsOpts = opts
	return nil
}

// Validate checks the configuration.
func (s *Storage) Validate() error {
	if !bucketName.MatchString(s.Bucket) {
		return fmt.Errorf("invalid bucket %q: only letters, digits, '-' and '_'", s.Bucket)
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		return fmt.Errorf("invalid replicas %d: must be 1 to 5", s.Replicas)
	}
	if s.LockTTL < caddy.Duration(time.Second) {
		return fmt.Errorf("invalid lock_ttl %q: must be at least 1s", time.Duration(s.LockTTL))
	}
	if s.Timeout <= 0 {
		return fmt.Errorf("invalid timeout %q: must be positive", time.Duration(s.Timeout))
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return fmt.Errorf("tls_cert and tls_key go together")
	}
	return nil
}

// CertMagicStorage returns the storage.
func (s *Storage) CertMagicStorage() (certmagic.Storage, error) {
	if s.kv == nil {
		return nil, fmt.Errorf("storage nats: not provisioned")
	}
	return s.kv, nil
}

// Cleanup stops lock refreshers and releases the shared connection.
func (s *Storage) Cleanup() error {
	if s.kv != nil {
		s.kv.Close()
	}
	if s.release != nil {
		s.release()
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner      = (*Storage)(nil)
	_ caddy.Validator        = (*Storage)(nil)
	_ caddy.CleanerUpper     = (*Storage)(nil)
	_ caddy.StorageConverter = (*Storage)(nil)
)
