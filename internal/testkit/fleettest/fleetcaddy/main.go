// Command fleetcaddy is the gateway binary the fleet test builds when
// bin/caddy (made by build/build.sh) is missing or lacks a module the fleet
// needs: the same modules, compiled with go build instead of xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway"
	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/natsstore"
)

func main() { caddycmd.Main() }
