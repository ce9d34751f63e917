package deny

import "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

// ParseDryRun reads the arguments of a duty's `dry_run` subdirective
// (the dispenser is on the `dry_run` token): none means true, else
// exactly one of true or false (so that `dry_run {$RBAC_DRY_RUN}` can
// switch it from the environment).
func ParseDryRun(d *caddyfile.Dispenser) (bool, error) {
	if !d.NextArg() {
		return true, nil
	}
	var on bool
	switch v := d.Val(); v {
	case "true":
		on = true
	case "false":
	default:
		return false, d.Errf("invalid dry_run %q: must be true or false, or no value (true)", v)
	}
	if d.NextArg() {
		return false, d.ArgErr()
	}
	return on, nil
}
