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
	name := d.Val()
	switch name {
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
		c.tls()
		for nesting := d.Nesting(); d.NextBlock(nesting); {
			var field *string
			switch d.Val() {
			case "ca":
				field = &c.TLS.CA
			case "cert":
				field = &c.TLS.Cert
			case "key":
				field = &c.TLS.Key
			case "server_name":
				field = &c.TLS.ServerName
			default:
				return true, d.Errf("unrecognized tls subdirective '%s' (expected ca, cert, key or server_name)", d.Val())
			}
			v, err := oneArg(d)
			if err != nil {
				return true, err
			}
			*field = v
		}
	case "creds", "creds_file", "nkey", "user", "password", "token", "name", "tls_ca", "tls_cert", "tls_key":
		v, err := oneArg(d)
		if err != nil {
			return true, err
		}
		switch name {
		case "creds", "creds_file":
			c.Creds = v
		case "nkey":
			c.NKey = v
		case "user":
			c.User = v
		case "password":
			c.Password = v
		case "token":
			c.Token = v
		case "name":
			c.Name = v
		case "tls_ca":
			c.tls().CA = v
		case "tls_cert":
			c.tls().Cert = v
		case "tls_key":
			c.tls().Key = v
		}
	default:
		return false, nil
	}
	return true, nil
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

// oneArg returns the subdirective's one argument.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	name := d.Val()
	if !d.NextArg() {
		return "", d.Errf("%s needs a value", name)
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.Errf("%s takes one value, got another: '%s'", name, d.Val())
	}
	return v, nil
}
