// Package natsstore is Caddy's storage on a NATS JetStream key-value bucket
// (module caddy.storage.nats): with it, a fleet of gateway replicas shares
// certificates (automatic HTTPS, `tls internal`), their issuance locks, and
// rate_limit's distributed state.
package natsstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/runningconfig"
)

func init() {
	caddy.RegisterModule(Storage{})
}

// Storage is a Caddy storage module on NATS JetStream key-value buckets.
// Data goes to Bucket, locks to Bucket+"_locks" (a bucket whose entries
// expire after LockTTL unless their holder refreshes them, so the lock of
// a crashed replica frees itself). Both buckets are created by the first
// write of a running config when missing. Everything read or written is
// also kept in a local copy (LocalCopy), which serves reads and queues
// writes while NATS does not answer. The NATS connection is shared with
// every other module of the process that uses the same servers and
// credentials.
type Storage struct {
	// The NATS connection (the gateway's one NATS connection block:
	// servers, creds, nkey, user, password, token, tls, name; and the
	// older spellings creds_file, tls_ca, tls_cert, tls_key). Servers
	// default to nats://127.0.0.1:4222.
	natsconn.Config
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
	// LocalCopy is the directory of the local copy: every value this
	// gateway reads or writes is kept there too, so that it starts,
	// reloads and serves while NATS is unreachable (reads come from it,
	// writes are queued in it until NATS answers again). One directory
	// per gateway, never shared. Default: storage_nats/<bucket> under
	// Caddy's data directory.
	LocalCopy string `json:"local_copy,omitempty"`

	store  *configStorage
	key    string
	logger *zap.Logger
}

// locals holds the local copies, one per bucket, servers and directory,
// shared by the configs (and modules) that use them: a reload keeps the
// copy, its queue and its NATS connection.
var locals = caddy.NewUsagePool()

// CaddyModule returns the Caddy module information.
func (Storage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.storage.nats",
		New: func() caddy.Module { return new(Storage) },
	}
}

// Provision expands placeholders, sets defaults and takes the shared local
// copy and NATS connection (which keeps connecting in the background if
// NATS is down). It writes nothing: a read of a missing bucket finds
// nothing, and the config's writes wait until it runs.
func (s *Storage) Provision(ctx caddy.Context) error {
	s.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	if len(s.Servers) == 0 {
		s.Servers = []string{"nats://127.0.0.1:4222"}
	}
	opts, err := s.Config.Options(repl)
	if err != nil {
		return fmt.Errorf("storage nats: %w", err)
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
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	s.LocalCopy = repl.ReplaceKnown(s.LocalCopy, "")
	if s.LocalCopy == "" {
		s.LocalCopy = filepath.Join(caddy.AppDataDir(), "storage_nats", s.Bucket)
	}
	kvCfg := KVConfig{
		Bucket: s.Bucket, Replicas: s.Replicas,
		LockTTL: time.Duration(s.LockTTL), Timeout: time.Duration(s.Timeout),
	}
	keyb, err := json.Marshal(struct {
		KV   KVConfig
		NATS natsconn.Options
		Dir  string
	}{kvCfg, opts, s.LocalCopy})
	if err != nil {
		return err
	}
	s.key = string(keyb)
	logger := s.logger
	v, _, err := locals.LoadOrNew(s.key, func() (caddy.Destructor, error) {
		c, release, err := natsconn.Get(opts)
		if err != nil {
			return nil, err
		}
		js, err := c.JetStream()
		if err != nil {
			release()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		kv := NewKV(js, kvCfg, logger)
		kv.natsOpts = opts
		return newLocal(s.LocalCopy, kv, c, release, logger)
	})
	if err != nil {
		s.key = ""
		return fmt.Errorf("storage nats: %w", err)
	}
	// Modules of this config without NATS servers of their own (permission
	// invalidation, the docker fleet) use this cluster and share this
	// connection (NATSOptions). `caddy validate` and a config being
	// loaded are not the running one (TestValidateWritesNothing fails when
	// the check answers true for them).
	s.store = newConfigStorage(v.(*local), opts, runningconfig.Check(ctx), ctx.Done(), s.logger)
	return nil
}

// Validate checks the configuration.
func (s *Storage) Validate() error {
	if !natsconn.ValidBucket(s.Bucket) {
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
	return nil
}

// CertMagicStorage returns the storage.
func (s *Storage) CertMagicStorage() (certmagic.Storage, error) {
	if s.store == nil {
		return nil, fmt.Errorf("storage nats: not provisioned")
	}
	return s.store, nil
}

// Cleanup releases this config's use of the local copy; the last user
// stops its goroutine, its lock refreshers and its NATS connection.
func (s *Storage) Cleanup() error {
	if s.key != "" {
		_, _ = locals.Delete(s.key)
		s.key = ""
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
