// Package runningconfig tells a module whether the config it was
// provisioned in is the one Caddy runs.
//
// Caddy makes a config the active one (caddy.ActiveContext) only after
// every app of it has started (its servers listen, its certificates are
// managed) and its admin set-up is finished. Until then a server of that
// config may already take requests: Caddy starts the apps one by one, in
// no fixed order. A config being validated (`caddy validate`) or one that
// failed to start never becomes active.
package runningconfig

import "github.com/caddyserver/caddy/v2"

// Check returns the check of whether ctx's config is the one Caddy runs:
// its context is the active one. Module contexts are Caddy's config
// context with values added (caddy.Context.WithValue), so they share its
// Done channel.
func Check(ctx caddy.Context) func() bool {
	done := ctx.Done()
	return func() bool {
		ac := caddy.ActiveContext()
		return ac.Context != nil && ac.Done() == done
	}
}
