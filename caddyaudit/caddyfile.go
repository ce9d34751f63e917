package caddyaudit

import (
	"math"
	"net/http"
	"strconv"

	"github.com/dustin/go-humanize"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/natsconn"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("audit", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("audit", parseHandler)
	httpcaddyfile.RegisterDirectiveOrder("audit", httpcaddyfile.Before, "header")
}

func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "audit", Value: caddyconfig.JSON(app, nil)}, nil
}

func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the audit app from the global option:
//
//	audit {
//		node              gw-1
//		queue_size        65536
//		spool_dir         /var/lib/gateway/audit
//		durability        memory|disk
//		sync_interval     200ms
//		spool_max_size    1GiB
//		alert_after       1m
//		chain /etc/gateway/audit.key {
//			checkpoint_interval 10s
//		}
//		block_timeout     1s
//		shutdown_timeout  5s
//		sink http https://audit.example/hook {
//			name            webhook
//			batch_size      500
//			flush_interval  200ms
//			timeout         5s
//			max_retries     0
//			queue_size      65536
//			on_full         block|drop_oldest|reject
//			header Authorization "Bearer {env.AUDIT_TOKEN}"
//		}
//		sink nats nats://127.0.0.1:4222 {
//			subject    gateway.audit
//			jetstream
//			stream     AUDIT
//			servers    nats://n2:4222 nats://n3:4222
//			creds      /etc/gateway/nats.creds
//			nkey       /etc/gateway/nats.nk
//			user       gateway
//			password   {env.NATS_PASSWORD}
//			token      {env.NATS_TOKEN}
//			tls {
//				ca          /etc/gateway/nats-ca.pem
//				cert        /etc/gateway/nats-client.pem
//				key         /etc/gateway/nats-client.key
//				server_name nats.internal
//			}
//		}
//		sink file /var/log/gateway/audit.jsonl
//	}
//
// batch_size, flush_interval, timeout, max_retries, queue_size, on_full
// and name apply to every sink type. A nats sink's connection settings
// (servers to tls) are the gateway's one NATS connection block
// (natsconn.Config); its name is also its NATS client name.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "queue_size":
			n, err := intArg(d)
			if err != nil {
				return err
			}
			a.QueueSize = n
		case "node":
			v, err := stringArg(d)
			if err != nil {
				return err
			}
			a.Node = v
		case "spool_dir":
			if !d.NextArg() {
				return d.ArgErr()
			}
			a.SpoolDir = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "block_timeout":
			dur, err := durationArg(d)
			if err != nil {
				return err
			}
			a.BlockTimeout = dur
		case "shutdown_timeout":
			dur, err := durationArg(d)
			if err != nil {
				return err
			}
			a.ShutdownTimeout = dur
		case "durability":
			v, err := stringArg(d)
			if err != nil {
				return err
			}
			if v != durabilityMemory && v != durabilityDisk {
				return d.Errf("invalid durability '%s': must be memory or disk", v)
			}
			a.Durability = v
		case "sync_interval":
			dur, err := durationArg(d)
			if err != nil {
				return err
			}
			a.SyncInterval = dur
		case "alert_after":
			dur, err := durationArg(d)
			if err != nil {
				return err
			}
			a.AlertAfter = dur
		case "spool_max_size":
			v, err := stringArg(d)
			if err != nil {
				return err
			}
			n, err := humanize.ParseBytes(v)
			if err != nil || n == 0 || n > math.MaxInt64 {
				return d.Errf("invalid spool_max_size '%s': must be a size such as 512MiB or 2GB", v)
			}
			a.SpoolMaxSize = int64(n)
		case "chain":
			if a.Chain != nil {
				return d.Err("chain given twice")
			}
			cc := &ChainConfig{}
			if !d.NextArg() {
				return d.Err("chain needs the Ed25519 private key file that signs checkpoints")
			}
			cc.KeyFile = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				switch d.Val() {
				case "checkpoint_interval":
					dur, err := durationArg(d)
					if err != nil {
						return err
					}
					cc.CheckpointInterval = dur
				default:
					return d.Errf("unrecognized chain subdirective '%s'", d.Val())
				}
			}
			a.Chain = cc
		case "sink":
			sc, err := parseSink(d)
			if err != nil {
				return err
			}
			a.Sinks = append(a.Sinks, sc)
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
	}
	return nil
}

func parseSink(d *caddyfile.Dispenser) (SinkConfig, error) {
	var sc SinkConfig
	if !d.NextArg() {
		return sc, d.Err("sink needs a type: http, nats or file")
	}
	sc.Type = d.Val()
	switch sc.Type {
	case "http", "nats", "file":
	default:
		return sc, d.Errf("unrecognized sink type '%s': must be http, nats or file", sc.Type)
	}
	if !d.NextArg() {
		return sc, d.Errf("sink %s needs a destination", sc.Type)
	}
	if sc.Type == "file" {
		sc.Path = d.Val()
	} else {
		sc.URL = d.Val()
	}
	if d.NextArg() {
		return sc, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		var err error
		switch sub {
		case "name":
			sc.Name, err = stringArg(d)
		case "batch_size":
			sc.BatchSize, err = intArg(d)
		case "flush_interval":
			sc.FlushInterval, err = durationArg(d)
		case "timeout":
			sc.Timeout, err = durationArg(d)
		case "max_retries":
			sc.MaxRetries, err = intArg(d)
		case "queue_size":
			sc.QueueSize, err = intArg(d)
		case "on_full":
			sc.OnFull, err = stringArg(d)
			if err == nil && sc.OnFull != onFullBlock && sc.OnFull != onFullDropOldest && sc.OnFull != onFullReject {
				return sc, d.Errf("invalid on_full '%s': must be block, drop_oldest or reject", sc.OnFull)
			}
		case "header":
			if sc.Type != "http" {
				return sc, d.Errf("subdirective 'header' is only for http sinks")
			}
			args := d.RemainingArgs()
			if len(args) != 2 {
				return sc, d.Errf("header needs a name and a value, got %d arguments", len(args))
			}
			if sc.Headers == nil {
				sc.Headers = http.Header{}
			}
			sc.Headers.Add(args[0], args[1])
		case "subject", "stream", "jetstream":
			if sc.Type != "nats" {
				return sc, d.Errf("subdirective '%s' is only for nats sinks", sub)
			}
			switch sub {
			case "jetstream":
				if d.NextArg() {
					return sc, d.ArgErr()
				}
				sc.JetStream = true
			case "subject":
				sc.Subject, err = stringArg(d)
			case "stream":
				sc.Stream, err = stringArg(d)
			}
		default:
			// the NATS connection block (name is the sink's own, above)
			conn := &sc.Config
			if sc.Type != "nats" {
				conn = new(natsconn.Config)
			}
			ok, perr := conn.UnmarshalCaddyfileOption(d)
			switch {
			case !ok:
				return sc, d.Errf("unrecognized subdirective '%s'", sub)
			case sc.Type != "nats":
				return sc, d.Errf("subdirective '%s' is only for nats sinks", sub)
			}
			err = perr
		}
		if err != nil {
			return sc, err
		}
	}
	return sc, nil
}

func stringArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

func intArg(d *caddyfile.Dispenser) (int, error) {
	name := d.Val()
	s, err := stringArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, d.Errf("invalid %s %q: must be a non-negative integer", name, s)
	}
	return n, nil
}

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	name := d.Val()
	s, err := stringArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur <= 0 {
		return 0, d.Errf("invalid %s %q: must be a positive duration", name, s)
	}
	return caddy.Duration(dur), nil
}

// UnmarshalCaddyfile sets up the handler:
//
//	audit [<route>] {
//		route              orders
//		request_id_header  X-Request-Id
//		include_header     X-Tenant [<key>]     # repeatable; X-Client-* matches a prefix
//		include_claim      org.id [<key>]
//		include_query      page [<key>]
//		redact_header      X-Api-Key ...        # besides Authorization, Cookie, Proxy-Authorization
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.Route = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	for d.NextBlock(0) {
		var err error
		switch d.Val() {
		case "route":
			h.Route, err = stringArg(d)
		case "request_id_header":
			h.RequestIDHeader, err = stringArg(d)
		case "include_header", "include_claim", "include_query":
			sub := d.Val()
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.Errf("%s needs a name and an optional key, got %d arguments", sub, len(args))
			}
			inc := Include{Name: args[0]}
			if len(args) == 2 {
				inc.Key = args[1]
			}
			switch sub {
			case "include_header":
				h.IncludeHeaders = append(h.IncludeHeaders, inc)
			case "include_claim":
				h.IncludeClaims = append(h.IncludeClaims, inc)
			default:
				h.IncludeQuery = append(h.IncludeQuery, inc)
			}
		case "redact_header":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.RedactHeaders = append(h.RedactHeaders, args...)
		default:
			return d.Errf("unrecognized subdirective '%s'", d.Val())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
