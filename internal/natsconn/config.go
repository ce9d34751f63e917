package natsconn

import (
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
)

// Config is the one NATS connection block: the settings of every module
// that connects to NATS (storage nats, the audit NATS sink, the quota
// fleet, the docker fleet, permission invalidation). A module embeds it
// (its fields then sit at the module's own JSON level), parses it in its
// Caddyfile block with UnmarshalCaddyfileOption, and turns it into the
// Options of a shared connection with Resolve (or Options, for a module
// that has servers of its own by default).
//
// The older spellings load too, as aliases: creds_file for creds, and
// tls_ca, tls_cert, tls_key for tls { ca, cert, key }. A module adds its
// own aliases of servers (a fleet's nats, the audit sink's url,
// permission's nats_servers) with AddServers.
type Config struct {
	// Servers are the NATS URLs (nats://host:4222, tls://host:4222); list
	// every node of the cluster. An entry may hold several URLs separated
	// by commas, and placeholders such as {env.NATS_URLS}.
	Servers []string `json:"servers,omitempty"`
	// Creds is a NATS .creds file (a user JWT and its NKey seed), as
	// `nsc` writes it.
	Creds string `json:"creds,omitempty"`
	// NKey is a file holding an NKey user seed (SU...): the server knows
	// the user by its public key (an `nkey` user of the server's
	// authorization block).
	NKey string `json:"nkey,omitempty"`
	// User and Password authenticate with a user name and password.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	// Token authenticates with a token.
	Token string `json:"token,omitempty"`
	// TLS, when set (even empty), requires TLS to the servers, as a
	// tls:// URL does; its fields name the files that verify the servers
	// and the client certificate for servers that require mutual TLS.
	TLS *TLSConfig `json:"tls,omitempty"`
	// Name is the client name the servers show for this connection
	// (`nats server report connections`). Default: apigate.
	Name string `json:"name,omitempty"`

	// CredsFile is the older spelling of Creds. Deprecated: use creds.
	CredsFile string `json:"creds_file,omitempty"`
	// TLSCA, TLSCert and TLSKey are the older spellings of tls { ca,
	// cert, key }. Deprecated: use tls.
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
}

// TLSConfig is the TLS of a NATS connection.
type TLSConfig struct {
	// CA is a PEM file of the CA certificates that verify the servers.
	// Default: the system pool.
	CA string `json:"ca,omitempty"`
	// Cert and Key are a PEM client certificate and its key, for servers
	// that require mutual TLS (verify: true). Both or neither.
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// ServerName is the name the servers' certificates are verified
	// against. Default: the host of the URL being dialled; set it when
	// dialling by IP address, or by a name the certificate does not hold.
	ServerName string `json:"server_name,omitempty"`
}

// AddServers adds servers given under a module's older spelling (a
// fleet's nats, the audit sink's url, permission's nats_servers).
func (c *Config) AddServers(servers ...string) {
	c.Servers = append(c.Servers, servers...)
}

// IsZero reports whether nothing is set.
func (c *Config) IsZero() bool {
	return len(c.Servers) == 0 && c.Creds == "" && c.NKey == "" && c.User == "" && c.Password == "" &&
		c.Token == "" && c.TLS == nil && c.Name == "" && c.CredsFile == "" && c.TLSCA == "" &&
		c.TLSCert == "" && c.TLSKey == ""
}

// ErrNoServers is the error of a block without servers (Options), and of
// Resolve when there is no `storage nats` to fall back to either; modules
// wrap it with their own name.
var ErrNoServers = errors.New("no NATS servers")

// Resolve returns the connection options of the block: placeholders
// expanded (repl; nil: global placeholders such as {env.X}), server lists
// split, aliases merged. Without servers it returns the options of the
// config's `storage nats` that storage returns (ConfigStorage(ctx); the
// module then shares its connection, and the block's other settings are
// not used), or ErrNoServers when there is none. storage is called only
// then, and may be nil.
func (c Config) Resolve(repl *caddy.Replacer, storage func() OptionsProvider) (Options, error) {
	o, err := c.Options(repl)
	if !errors.Is(err, ErrNoServers) {
		return o, err
	}
	if storage != nil {
		if p := storage(); p != nil {
			return p.NATSOptions(), nil
		}
	}
	return o, fmt.Errorf("%w: set servers, or configure the `storage nats` global option", err)
}

// Options returns the connection options of the block, as Resolve does,
// without the fallback: no servers is an error.
func (c Config) Options(repl *caddy.Replacer) (Options, error) {
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	expand := func(s string) string { return repl.ReplaceKnown(s, "") }
	var o Options
	for _, s := range c.Servers {
		o.Servers = append(o.Servers, SplitServers(expand(s))...)
	}
	if len(o.Servers) == 0 {
		return Options{}, ErrNoServers
	}
	var err error
	pick := func(name, v, alias, aliasName string) string {
		v, alias = expand(v), expand(alias)
		if v != "" && alias != "" && v != alias && err == nil {
			err = fmt.Errorf("%s %q and its older spelling %s %q are both set: keep %s", name, v, aliasName, alias, name)
		}
		if v == "" {
			return alias
		}
		return v
	}
	var t TLSConfig
	if c.TLS != nil {
		t, o.TLS = *c.TLS, true
	}
	o.CredsFile = pick("creds", c.Creds, c.CredsFile, "creds_file")
	o.TLSCA = pick("tls ca", t.CA, c.TLSCA, "tls_ca")
	o.TLSCert = pick("tls cert", t.Cert, c.TLSCert, "tls_cert")
	o.TLSKey = pick("tls key", t.Key, c.TLSKey, "tls_key")
	if err != nil {
		return Options{}, err
	}
	o.TLSServerName = expand(t.ServerName)
	// a TLS file (the older spellings included) requires TLS as the block does
	o.TLS = o.TLS || o.TLSCA != "" || o.TLSCert != "" || o.TLSServerName != ""
	o.NKeyFile = expand(c.NKey)
	o.User, o.Password, o.Token = expand(c.User), expand(c.Password), expand(c.Token)
	o.Name = expand(c.Name)
	if err := o.check(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// Config returns the block that resolves to o (for a module that passes
// a connection on in JSON, such as the docker fleet's rate_limit storage).
func (o Options) Config() Config {
	c := Config{
		Servers: append([]string(nil), o.Servers...),
		Creds:   o.CredsFile, NKey: o.NKeyFile,
		User: o.User, Password: o.Password, Token: o.Token,
		Name: o.Name,
	}
	if o.TLS || o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" || o.TLSServerName != "" {
		c.TLS = &TLSConfig{CA: o.TLSCA, Cert: o.TLSCert, Key: o.TLSKey, ServerName: o.TLSServerName}
	}
	return c
}

// check reports settings that cannot work together, naming them.
func (o Options) check() error {
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return errors.New("a TLS client certificate needs both tls cert and tls key")
	}
	return nil
}
