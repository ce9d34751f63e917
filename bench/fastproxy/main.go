// Command fastproxy is the bench's engine-class reference: a reverse proxy
// made of fasthttp's server and fasthttp's client and nothing else, the
// way /work/shared/tools/proxy-ceiling's go-fasthttp mode builds it. It
// answers the question the fast path's engine choice (issue 23) asks:
// what a Go proxy on fasthttp's engine serves on one core, measured in the
// same rounds as nginx and the gateway. It is not a gateway: no framing
// checks beyond fasthttp's own, no timeouts, no hop-by-hop cleanup.
//
//	fastproxy <listen addr> <upstream addr>
package main

import (
	"fmt"
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fastproxy <listen addr> <upstream addr>")
		os.Exit(2)
	}
	hc := &fasthttp.HostClient{Addr: os.Args[2], MaxConns: 4096}
	srv := &fasthttp.Server{
		Name:                  "fastproxy",
		NoDefaultDate:         false,
		NoDefaultServerHeader: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			}
		},
	}
	fmt.Fprintf(os.Stderr, "fastproxy listening on %s, upstream %s\n", os.Args[1], os.Args[2])
	if err := srv.ListenAndServe(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "fastproxy:", err)
		os.Exit(1)
	}
}
