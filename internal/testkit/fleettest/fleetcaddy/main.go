// Command fleetcaddy is the gateway binary the fleet test builds when
// bin/caddy (made by build/build.sh) is missing or lacks a module the fleet
// needs: the same modules, compiled with go build instead of xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/mholt/caddy-ratelimit"

	// every module of the gateway, as xcaddy's build has them: the root
	// package's list is the one list, so this binary cannot lack one
	_ "github.com/apigate/gateway"
)

func main() { caddycmd.Main() }
