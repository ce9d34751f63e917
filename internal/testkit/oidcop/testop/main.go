// Command testop runs the test OpenID Provider (package oidcop: zitadel/oidc's
// certified op package, users in memory, a login form) on this machine, for
// docs/oidc.md's worked example:
//
//	go run ./internal/testkit/oidcop/testop -addr 127.0.0.1:9998 \
//		-client gateway -secret "$OIDC_CLIENT_SECRET" \
//		-redirect http://127.0.0.1:8080/oauth2/callback
//
// Log in as test-user@127.0.0.1 with the password verysecure.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/apigate/gateway/internal/testkit/oidcop"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9998", "address to listen on (the issuer is http://<addr>)")
	client := flag.String("client", "gateway", "client id to register")
	secret := flag.String("secret", "", "the client's secret (required)")
	redirect := flag.String("redirect", "http://127.0.0.1:8080/oauth2/callback", "redirect URIs of the client, comma-separated")
	flag.Parse()
	if *secret == "" {
		fmt.Fprintln(os.Stderr, "testop: -secret is required")
		os.Exit(2)
	}
	p, err := oidcop.Start(*addr, oidcop.Client{ID: *client, Secret: *secret, RedirectURIs: strings.Split(*redirect, ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testop:", err)
		os.Exit(1)
	}
	fmt.Printf("issuer %s: log in as %s with password %s\n", p.Issuer, p.Username(), oidcop.Password)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	<-sig
	_ = p.Close()
}
