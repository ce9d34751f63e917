package caddyquota

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/deny"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("quota", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("quota", parseHandler)
	// after the identity sources and the other duties (permission is
	// ordered right after basic_auth), before forward_auth and the
	// handlers that answer: what they refuse is not counted
	httpcaddyfile.RegisterDirectiveOrder("quota", httpcaddyfile.Before, "forward_auth")
}

func parseGlobalOption(d *caddyfile.Dispenser, _ any) (any, error) {
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "quota", Value: caddyconfig.JSON(app, nil)}, nil
}

func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the quota app from the global option:
//
//	quota {
//		plan <name> {
//			limit <n>/<minute|hour|day|month>...
//		}
//		plan <name> <n>/<window>...            # the same on one line
//		default        <plan>
//		plan_claim     <claim path>
//		timezone       <IANA zone>              # default UTC
//		on_unavailable fail_open|fail_closed [<share>]
//		dir            <directory>
//		max_consumers  <n>
//		retention      <duration>               # e.g. 100d
//		sync_interval  <duration>
//		consumer_metrics <n>
//		fleet [<nats url>...] {
//			servers     <url>...                 # default: storage nats's connection
//			creds       <file>
//			nkey        <seed file>
//			user        <user>
//			password    <password>
//			token       <token>
//			tls {
//				ca          <file>
//				cert        <file>
//				key         <file>
//				server_name <name>
//			}
//			name        <NATS client name>
//			bucket      <bucket>                 # default gateway_quota
//			replicas    <1-5>
//			node        <name>                   # default: the host name
//			max_lease   <n>
//			sync_interval <duration>
//			lease_wait  <duration>
//		}
//	}
//
// A share is a fraction (0.5), a percentage (50%) or a ratio (1/3). The
// fleet's connection settings (servers to name) are the gateway's one NATS
// connection block (natsconn.Config); nats is the older spelling of
// servers, creds_file of creds.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	optFile, optLine := d.File(), d.Line()
	var defFile string
	var defLine int
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch name := d.Val(); name {
		case "plan":
			if !d.NextArg() {
				return d.Errf("plan needs a name: plan <name> { limit <n>/<window> }")
			}
			pname := d.Val()
			if a.Plans == nil {
				a.Plans = map[string]PlanConfig{}
			}
			if _, dup := a.Plans[pname]; dup {
				return d.Errf("plan %s given twice", pname)
			}
			var pc PlanConfig
			for d.NextArg() {
				if _, err := ParseLimit(d.Val()); err != nil {
					return d.Errf("plan %s: %v", pname, err)
				}
				pc.Limits = append(pc.Limits, d.Val())
			}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if d.Val() != "limit" {
					return d.Errf("unrecognized plan subdirective '%s' (want limit)", d.Val())
				}
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.Errf("limit needs at least one <n>/<window>, e.g. limit 1000/day")
				}
				for _, s := range args {
					if _, err := ParseLimit(s); err != nil {
						return d.Errf("plan %s: %v", pname, err)
					}
					pc.Limits = append(pc.Limits, s)
				}
			}
			limits := make([]Limit, 0, len(pc.Limits))
			for _, s := range pc.Limits {
				l, _ := ParseLimit(s)
				limits = append(limits, l)
			}
			if _, err := NewPlan(pname, limits); err != nil {
				return d.Errf("%v", err)
			}
			a.Plans[pname] = pc
		case "default", "plan_claim", "timezone", "dir":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			switch name {
			case "default":
				a.Default = v
				defFile, defLine = d.File(), d.Line()
			case "plan_claim":
				a.PlanClaim = v
			case "timezone":
				if _, err := time.LoadLocation(v); err != nil {
					return d.Errf("invalid timezone %q: want an IANA zone such as Europe/Berlin (%v)", v, err)
				}
				a.Timezone = v
			case "dir":
				a.Dir = v
			}
		case "on_unavailable":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.Errf("on_unavailable needs fail_open or fail_closed, and optionally a share: on_unavailable fail_closed 50%%")
			}
			if args[0] != FailOpen && args[0] != FailClosed {
				return d.Errf("invalid on_unavailable %q: want fail_open or fail_closed", args[0])
			}
			a.OnUnavailable = args[0]
			if len(args) == 2 {
				share, err := parseShare(args[1])
				if err != nil {
					return d.Errf("on_unavailable: %v", err)
				}
				a.UnavailableShare = share
			}
		case "max_consumers", "consumer_metrics":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
			if err != nil || n <= 0 {
				return d.Errf("invalid %s %q: want a positive whole number", name, v)
			}
			if name == "max_consumers" {
				a.MaxConsumers = n
			} else {
				a.ConsumerMetrics = n
			}
		case "retention", "sync_interval":
			dur, err := parseDuration(d, name)
			if err != nil {
				return err
			}
			if name == "retention" {
				a.Retention = dur
			} else {
				a.SyncInterval = dur
			}
		case "fleet":
			if a.Fleet != nil {
				return d.Errf("fleet given twice")
			}
			a.Fleet = new(FleetConfig)
			if err := a.Fleet.unmarshal(d); err != nil {
				return err
			}
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	// what Provision would refuse later, without a line, inside a long
	// provision chain: named here with the file and line (as d.Errf does)
	names := make([]string, 0, len(a.Plans))
	for n := range a.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	_, known := a.Plans[a.Default]
	switch {
	case a.Default != "" && len(a.Plans) > 0 && !known:
		return fmt.Errorf("invalid default %q: no such plan (plans: %s), at %s:%d", a.Default, strings.Join(names, ", "), defFile, defLine)
	case a.Default == "" && len(a.Plans) > 1:
		return fmt.Errorf("quota: %d plans and no default: name the plan of consumers without one (default <plan>), at %s:%d", len(a.Plans), optFile, optLine)
	}
	return nil
}

func parseDuration(d *caddyfile.Dispenser, name string) (caddy.Duration, error) {
	var v string
	if !d.Args(&v) || d.NextArg() {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("invalid %s %q: want a positive duration (1s, 100d)", name, v)
	}
	return caddy.Duration(dur), nil
}

// parseShare reads 0.5, 50% or 1/3 as a share from 0 to 1.
func parseShare(s string) (float64, error) {
	var v float64
	var err error
	switch {
	case strings.HasSuffix(s, "%"):
		v, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		v /= 100
	case strings.Contains(s, "/"):
		num, den, _ := strings.Cut(s, "/")
		var n, dd float64
		if n, err = strconv.ParseFloat(num, 64); err == nil {
			if dd, err = strconv.ParseFloat(den, 64); err == nil && dd == 0 {
				err = strconv.ErrRange
			}
			v = n / dd
		}
	default:
		v, err = strconv.ParseFloat(s, 64)
	}
	if err != nil || v < 0 || v > 1 {
		return 0, &shareError{s}
	}
	return v, nil
}

type shareError struct{ s string }

func (e *shareError) Error() string {
	return "invalid share " + strconv.Quote(e.s) + ": want a fraction from 0 to 1 (0.5), a percentage (50%) or a ratio (1/3)"
}

// unmarshal reads the fleet block.
func (f *FleetConfig) unmarshal(d *caddyfile.Dispenser) error {
	f.Servers = append(f.Servers, d.RemainingArgs()...)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "nats": // the older spelling of servers
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			f.Servers = append(f.Servers, args...)
		case "bucket", "node":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if name == "bucket" {
				f.Bucket = v
			} else {
				f.Node = v
			}
		case "replicas", "max_lease":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return d.Errf("invalid %s %q: want a positive whole number", name, v)
			}
			if name == "replicas" {
				f.Replicas = n
			} else {
				f.MaxLease = int64(n)
			}
		case "sync_interval", "lease_wait":
			dur, err := parseDuration(d, name)
			if err != nil {
				return err
			}
			if name == "sync_interval" {
				f.SyncInterval = dur
			} else {
				f.LeaseWait = dur
			}
		default:
			if ok, err := f.Config.UnmarshalCaddyfileOption(d); ok {
				if err != nil {
					return err
				}
				continue
			}
			return d.Errf("unrecognized fleet subdirective '%s'", name)
		}
	}
	return f.validate()
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	quota [<matcher>] {
//		key     <placeholder>          # default {http.auth.user.id}
//		plan    <plan>                 # this route's plan for every consumer
//		plan    <name> <n>/<window>... # this route's own plan: a rate limit
//		plan    <name> {               # the same, as the global option writes it
//			limit <n>/<window>...
//		}
//		dry_run [true|false]
//	}
//
// A window is minute, hour, day, month, or a sliding window's length
// (10s, 5m, 2h).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch name := d.Val(); name {
		case "key":
			var v string
			if !d.Args(&v) || d.NextArg() {
				return d.ArgErr()
			}
			if err := checkKey(v); err != nil {
				return d.Errf("%v", err)
			}
			h.Key = v
		case "plan":
			if h.Plan != "" {
				return d.Errf("plan given twice")
			}
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Plan = d.Val()
			for d.NextArg() {
				h.Limits = append(h.Limits, d.Val())
			}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if d.Val() != "limit" {
					return d.Errf("unrecognized plan subdirective '%s' (want limit)", d.Val())
				}
				args := d.RemainingArgs()
				if len(args) == 0 {
					return d.Errf("limit needs at least one <n>/<window>, e.g. limit 20/10s")
				}
				h.Limits = append(h.Limits, args...)
			}
			if len(h.Limits) > 0 {
				if _, err := ownPlan(h.Plan, h.Limits); err != nil {
					return d.Errf("%v", err)
				}
			}
		case "dry_run":
			on, err := deny.ParseDryRun(d)
			if err != nil {
				return err
			}
			h.DryRun = on
		default:
			return d.Errf("unrecognized subdirective '%s'", name)
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
