// Command testop runs the test OpenID Provider (package oidcop: zitadel/oidc's
// certified op package, users in memory, a login form) on this machine, for
// docs/oidc.md's worked example:
//
//	go run ./internal/testkit/oidcop/testop -addr 127.0.0.1:9998 \
//		-client gateway -secret "$OIDC_CLIENT_SECRET" \
//		-redirect http://127.0.0.1:8080/oauth2/callback
//
// Log in as test-user@127.0.0.1 with the password verysecure.
//
// With -login <url> it is the browser instead: it opens url (a page behind
// oidc_login), logs in through the form of the provider at -addr as its
// example user, and prints the session cookie it got (the bench's
// gw-fast-session row does this).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
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
	login := flag.String("login", "", "log in through this gateway URL and print the session cookie")
	flag.Parse()
	if *login != "" {
		cookie, err := loginAt(*login, *addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testop:", err)
			os.Exit(1)
		}
		fmt.Println(cookie)
		return
	}
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

// loginAt logs in through a gateway page, as the example user of the
// provider at addr, and returns the session cookie it got.
func loginAt(page, addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-addr %q: %v", addr, err)
	}
	b := oidcop.NewBrowser()
	at, status, body, err := b.Login(page, "test-user@"+host, oidcop.Password)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(page)
	if err != nil {
		return "", err
	}
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == "gateway_session" || c.Name == "__Host-gateway_session" {
			return c.Value, nil
		}
	}
	return "", fmt.Errorf("no session cookie after logging in through %s (ended at %s, %d: %.200s)", page, at, status, body)
}
