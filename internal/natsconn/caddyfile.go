package natsconn

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// UnmarshalCaddyfileOption is the connection block's one Caddyfile
// sub-parser. A module calls it for a subdirective of its own block that
// it does not know itself (at d.Val()); it parses the subdirective when it
// is one of these, and reports whether it was:
//
//	servers  <url>...
//	creds    <file>
//	nkey     <seed file>
//	user     <name>
//	password <password>
//	token    <token>
//	tls {
//		ca          <file>
//		cert        <file>
//		key         <file>
//		server_name <name>
//	}
//	name     <client name>
//
// A bare `tls` requires TLS with the system's CAs. The older spellings
// creds_file, tls_ca, tls_cert and tls_key are read as creds and tls'
// ca, cert and key.
func (c *Config) UnmarshalCaddyfileOption(d *caddyfile.Dispenser) (bool, error) {
	switch name := d.Val(); name {
	case "servers":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return true, d.ArgErr()
		}
		c.Servers = append(c.Servers, args...)
	case "tls":
		if d.NextArg() {
			return true, d.Errf("tls takes no argument, but a block (ca, cert, key, server_name), got '%s'", d.Val())
		}
		t := c.tls()
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			field := t.field(d.Val())
			if field == nil {
				return true, d.Errf("unrecognized tls subdirective '%s' (expected ca, cert, key or server_name)", d.Val())
			}
			if err := oneArg(d, field); err != nil {
				return true, err
			}
		}
	default:
		field := c.field(name)
		if field == nil {
			return false, nil
		}
		return true, oneArg(d, field)
	}
	return true, nil
}

// field is the setting a one-value subdirective sets (the older spellings
// included), or nil.
func (c *Config) field(name string) *string {
	switch name {
	case "creds", "creds_file":
		return &c.Creds
	case "nkey":
		return &c.NKey
	case "user":
		return &c.User
	case "password":
		return &c.Password
	case "token":
		return &c.Token
	case "name":
		return &c.Name
	case "tls_ca", "tls_cert", "tls_key":
		return c.tls().field(name[len("tls_"):])
	}
	return nil
}

// field is the setting a subdirective of the tls block sets, or nil.
func (t *TLSConfig) field(name string) *string {
	switch name {
	case "ca":
		return &t.CA
	case "cert":
		return &t.Cert
	case "key":
		return &t.Key
	case "server_name":
		return &t.ServerName
	}
	return nil
}

// UnmarshalCaddyfileBlock parses a block that holds only the connection's
// settings (permission's `nats { ... }`), from its opening brace.
func (c *Config) UnmarshalCaddyfileBlock(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		ok, err := c.UnmarshalCaddyfileOption(d)
		if err != nil {
			return err
		}
		if !ok {
			return d.Errf("unrecognized NATS subdirective '%s' (expected servers, creds, nkey, user, password, token, tls or name)", d.Val())
		}
	}
	return nil
}

func (c *Config) tls() *TLSConfig {
	if c.TLS == nil {
		c.TLS = new(TLSConfig)
	}
	return c.TLS
}

// oneArg sets field to the subdirective's one argument.
func oneArg(d *caddyfile.Dispenser, field *string) error {
	name := d.Val()
	if !d.NextArg() {
		return d.Errf("%s needs a value", name)
	}
	v := d.Val()
	if d.NextArg() {
		return d.Errf("%s takes one value, got another: '%s'", name, d.Val())
	}
	*field = v
	return nil
}
