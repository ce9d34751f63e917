// Command gatewayctl is the gateway's operator and developer commands
// without the gateway: the same commands, from the same table (package
// ctl), as `caddy gateway <command>` in the gateway binary. Its usage
// (gatewayctl -h) lists them; each command's -h has the details. Errors,
// and an audit trail that does not verify, exit with status 2.
//
// `make run` used it to create the development secret and print a demo
// token; the gateway binary does that now (`caddy gateway secret`).
package main

import (
	"os"

	"github.com/apigate/gateway/ctl"
)

func main() {
	os.Exit(ctl.Main("gatewayctl", os.Args[1:], os.Stdout, os.Stderr))
}
