// Package adminaddr finds the admin API of a Caddy config, for modules that
// call it (the docker app applies routes through it, the dashboard reads
// routes from it).
package adminaddr

import (
	"fmt"
	"reflect"

	"github.com/caddyserver/caddy/v2"
)

// Listen reads the admin listen address of the config that ctx belongs to
// (a module's provisioning context, or caddy.ActiveContext()). Caddy does
// not export it, so it is read with reflection (read-only); an unexpected
// layout yields "", false.
func Listen(ctx caddy.Context) (listen string, disabled bool) {
	defer func() {
		if recover() != nil {
			listen, disabled = "", false
		}
	}()
	cfg := reflect.ValueOf(ctx).FieldByName("cfg")
	if !cfg.IsValid() || cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return "", false
	}
	admin := cfg.Elem().FieldByName("Admin")
	if !admin.IsValid() || admin.Kind() != reflect.Pointer || admin.IsNil() {
		return "", false
	}
	if d := admin.Elem().FieldByName("Disabled"); d.IsValid() && d.Kind() == reflect.Bool && d.Bool() {
		return "", true
	}
	if l := admin.Elem().FieldByName("Listen"); l.IsValid() && l.Kind() == reflect.String {
		return l.String(), false
	}
	return "", false
}

// Endpoint turns an admin listen address ("" is Caddy's default) into the
// network ("unix" or "tcp") and address to dial.
func Endpoint(listen string) (network, address string, err error) {
	if listen == "" {
		listen = caddy.DefaultAdminListen
	}
	addr, err := caddy.ParseNetworkAddress(listen)
	if err != nil {
		return "", "", fmt.Errorf("invalid admin address %q: %w", listen, err)
	}
	if addr.IsUnixNetwork() {
		return "unix", addr.Host, nil
	}
	return "tcp", addr.JoinHostPort(0), nil
}
