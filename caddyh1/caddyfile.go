package caddyh1

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
)

// UnmarshalCaddyfile sets up the transport from Caddyfile tokens:
//
//	transport h1 {
//		dial_timeout            <duration>
//		response_header_timeout <duration>
//		keepalive               <duration>|off
//		max_idle_conns_per_host <n>
//		max_conns_per_host      <n>
//		read_buffer             <size>
//		write_buffer            <size>
//		max_response_header     <size>
//	}
func (t *Transport) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume transport name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		if !d.NextArg() {
			return d.ArgErr()
		}
		val := d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		switch name {
		case "dial_timeout", "response_header_timeout", "keepalive":
			if name == "keepalive" && val == "off" {
				t.DisableKeepAlive = true
				continue
			}
			dur, err := caddy.ParseDuration(val)
			if err != nil {
				return d.Errf("invalid %s %q: %v", name, val, err)
			}
			if dur <= 0 {
				return d.Errf("invalid %s %q: must be positive", name, val)
			}
			switch name {
			case "dial_timeout":
				t.DialTimeout = caddy.Duration(dur)
			case "response_header_timeout":
				t.ResponseHeaderTimeout = caddy.Duration(dur)
			default:
				t.KeepAlive = caddy.Duration(dur)
			}
		case "max_idle_conns_per_host", "max_conns_per_host":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return d.Errf("invalid %s %q: must be a number, 0 or more", name, val)
			}
			if name == "max_idle_conns_per_host" {
				t.MaxIdleConnsPerHost = n
			} else {
				t.MaxConnsPerHost = n
			}
		case "read_buffer", "write_buffer", "max_response_header":
			size, err := humanize.ParseBytes(val)
			if err != nil || size == 0 || size > 1<<30 {
				return d.Errf("invalid %s %q: must be a size such as 4KiB, up to 1GiB", name, val)
			}
			switch name {
			case "read_buffer":
				t.ReadBuffer = int(size)
			case "write_buffer":
				t.WriteBuffer = int(size)
			default:
				t.MaxResponseHeaderSize = int(size)
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Transport)(nil)
