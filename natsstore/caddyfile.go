package natsstore

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// UnmarshalCaddyfile sets up the storage from the global `storage` option:
//
//	storage nats [<server>...] {
//		servers    nats://n1:4222 nats://n2:4222 nats://n3:4222
//		creds      /etc/gateway/nats.creds
//		nkey       /etc/gateway/nats.nk
//		user       gateway
//		password   {env.NATS_PASSWORD}
//		token      {env.NATS_TOKEN}
//		tls {
//			ca          /etc/gateway/nats-ca.pem
//			cert        /etc/gateway/nats-client.pem
//			key         /etc/gateway/nats-client.key
//			server_name nats.internal
//		}
//		name       gw-1
//		bucket     caddy_storage
//		replicas   3
//		lock_ttl   30s
//		timeout    5s
//		local_copy /var/lib/gateway/storage_nats
//	}
//
// Servers may be given as arguments, in the block, or both. The
// connection's subdirectives (servers to name) are the NATS connection
// block every module shares (natsconn.Config); the older spellings
// creds_file, tls_ca, tls_cert and tls_key still work.
func (s *Storage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // "nats"
	s.Servers = append(s.Servers, d.RemainingArgs()...)
	for d.NextBlock(0) {
		name := d.Val()
		switch name {
		case "bucket", "local_copy":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if name == "bucket" {
				s.Bucket = v
			} else {
				s.LocalCopy = v
			}
		case "replicas":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n < 1 || n > 5 {
				return d.Errf("invalid replicas %q: must be 1 to 5", d.Val())
			}
			s.Replicas = n
			if d.NextArg() {
				return d.ArgErr()
			}
		case "lock_ttl", "timeout":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return d.Errf("invalid %s %q: must be a positive duration", name, d.Val())
			}
			if name == "lock_ttl" {
				s.LockTTL = caddy.Duration(dur)
			} else {
				s.Timeout = caddy.Duration(dur)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			if ok, err := s.Config.UnmarshalCaddyfileOption(d); ok {
				if err != nil {
					return err
				}
				continue
			}
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Storage)(nil)
