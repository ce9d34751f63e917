// Package adminaddr is how the modules that call Caddy's admin API (the
// docker app applies routes through it, the dashboard reads routes from it)
// find it.
package adminaddr

import (
	"fmt"
	"os"

	"github.com/caddyserver/caddy/v2"
)

// Default is the admin address a module uses when its config names none:
// the CADDY_ADMIN environment variable, as Caddy's own default admin
// address follows it, else Caddy's default (localhost:2019). Caddy does not
// tell a module its config's admin address, so a config whose `admin` global
// option moves the admin API elsewhere must give that address to the module
// too (the docker app's and the dashboard handler's `admin` option).
func Default() string {
	if v := os.Getenv("CADDY_ADMIN"); v != "" {
		return v
	}
	return caddy.DefaultAdminListen
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
