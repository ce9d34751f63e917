package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// oidcAddr is the test OpenID Provider's address (the session rows).
const oidcAddr = "127.0.0.1:29907"

// oidcSecret is the gateway's client secret at the test provider
// (configs/Caddyfile.tmpl has the same).
const oidcSecret = "bench-oidc-client-secret-0123456789abcdef"

// testop is the test OpenID Provider's command (bench/run builds it from
// the repository's internal/testkit/oidcop/testop).
func (b *Bench) testop() string { return filepath.Join(b.Work, "testop") }

// startProvider runs the test OpenID Provider on core 0, with the gateway
// at addr as its client, for one session row.
func (b *Bench) startProvider(addr, tag string) (func(), error) {
	if _, err := os.Stat(b.testop()); err != nil {
		return nil, fmt.Errorf("%s missing (bench/run builds it): %v", b.testop(), err)
	}
	waitPortFree(oidcAddr, 5*time.Second)
	p, err := startPinned("testop", coreLoad, filepath.Join(b.logDir, tag+"-testop.log"), nil, b.testop(),
		"-addr", oidcAddr, "-client", "gateway", "-secret", oidcSecret, "-redirect", "http://"+addr+"/oauth2/callback")
	if err != nil {
		return nil, err
	}
	if err := waitTCP(oidcAddr, 30*time.Second, p); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return func() { p.Stop(5 * time.Second) }, nil
}

// login logs in through the gateway at url as a browser would (testop
// -login follows the redirects and fills the provider's form) and keeps
// the session cookie for the row's requests.
func (b *Bench) login(url string) error {
	out, err := exec.Command(b.testop(), "-login", url, "-addr", oidcAddr).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return fmt.Errorf("login through %s: %v %s", url, err, stderr)
	}
	b.sessionCookie = strings.TrimSpace(string(out))
	if b.sessionCookie == "" {
		return fmt.Errorf("login through %s: no session cookie", url)
	}
	return nil
}
