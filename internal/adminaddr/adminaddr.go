// Package adminaddr is how the modules that call Caddy's admin API (the
// docker app applies routes through it, the dashboard reads routes from it)
// find it: the config's own `admin` address, unless the module's `admin`
// option overrides it.
//
// This package is the one place in the repository that reads a Caddy
// internal. Caddy does not tell a module its config's admin address: the
// config (caddy.Config, exported, with its exported Admin field) is linked
// from the module's caddy.Context only through the unexported field `cfg`.
// Without that link every config that moves the admin API (`admin
// localhost:2999`, `admin unix//run/caddy-admin.sock`) would have to repeat
// the address for each module, and one that did not would lose discovery
// silently. So configured reads that one field, checking its name and type
// first; TestReadsPinnedCaddy fails when the pinned Caddy (go.mod) changes
// them. If a Caddy build ever lacks the field, the modules log a warning,
// use Caddy's default address and keep working where that is right; their
// `admin` option sets the address by hand.
package adminaddr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// Endpoint is where to reach an admin API.
type Endpoint struct {
	// Network is "tcp" or "unix".
	Network string
	// Address is host:port, or the socket's path.
	Address string
	// Host is the Host header the admin API accepts: Address, or
	// "localhost" on a socket.
	Host string
}

// ErrDisabled is returned for a config that turns the admin API off.
var ErrDisabled = errors.New("this config turns the admin API off (`admin off`, or \"disabled\": true)")

// ErrLayout is returned when ctx does not lead to its config the way the
// pinned Caddy does (see the package comment).
var ErrLayout = errors.New("this Caddy build's caddy.Context has no field cfg of type *caddy.Config")

// For returns the admin endpoint that a module of the config ctx belongs
// to (its provisioning context, or caddy.ActiveContext()) calls: override
// when it is not empty (the module's own `admin` option), else the
// config's own admin listen address, which is Caddy's default (following
// CADDY_ADMIN) when the config names none. It fails with ErrDisabled when
// the config turns the admin API off, override or not: the module's calls
// are meant for this process's admin API. When the config cannot be read
// (ErrLayout) it logs a warning to log and uses Caddy's default address.
func For(ctx caddy.Context, override string, log *zap.Logger) (Endpoint, error) {
	listen, disabled, err := configured(ctx)
	if disabled {
		return Endpoint{}, ErrDisabled
	}
	if override != "" {
		return Parse(override)
	}
	if err != nil {
		if log != nil {
			log.Warn("cannot read this config's admin address; using Caddy's default (set the module's admin option if the admin API is elsewhere)",
				zap.String("default", caddy.DefaultAdminListen), zap.Error(err))
		}
		listen = ""
	}
	return Parse(listen)
}

// configured reads the admin settings of the config that ctx belongs to:
// its listen address ("" when it names none) and whether it turns the
// admin API off. A zero Context (no config loaded yet) has neither.
func configured(ctx caddy.Context) (listen string, disabled bool, err error) {
	f := reflect.ValueOf(&ctx).Elem().FieldByName("cfg")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*caddy.Config]() {
		return "", false, ErrLayout
	}
	// The field is unexported, so reflection will not hand out its value;
	// its type is checked above, so reading it as that type is sound.
	cfg := *(**caddy.Config)(unsafe.Pointer(f.UnsafeAddr()))
	if cfg == nil || cfg.Admin == nil {
		return "", false, nil
	}
	return cfg.Admin.Listen, cfg.Admin.Disabled, nil
}

// Parse turns an admin listen address, as in Caddy's `admin` option ("" is
// Caddy's default, placeholders such as {env.X} are replaced as Caddy
// does), into the endpoint to dial. A socket's file mode suffix
// (unix//path|0660) is not part of its path.
func Parse(listen string) (Endpoint, error) {
	if listen == "" {
		listen = caddy.DefaultAdminListen
	}
	expanded, err := caddy.NewReplacer().ReplaceOrErr(listen, true, true)
	if err != nil {
		return Endpoint{}, fmt.Errorf("invalid admin address %q: %v", listen, err)
	}
	addr, err := caddy.ParseNetworkAddress(expanded)
	if err != nil {
		return Endpoint{}, fmt.Errorf("invalid admin address %q: %w", listen, err)
	}
	if addr.IsUnixNetwork() {
		path, _, _ := strings.Cut(addr.Host, "|")
		return Endpoint{Network: "unix", Address: path, Host: "localhost"}, nil
	}
	if addr.IsFdNetwork() || addr.PortRangeSize() != 1 {
		return Endpoint{}, fmt.Errorf("invalid admin address %q: must be one TCP address or a unix socket", listen)
	}
	hp := addr.JoinHostPort(0)
	return Endpoint{Network: "tcp", Address: hp, Host: hp}, nil
}
