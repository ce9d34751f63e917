package caddyoidc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/apigate/gateway/internal/testkit/chromium"
	"github.com/apigate/gateway/internal/testkit/oidcop"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestBrowserLogin logs in with a real headless Chromium through the real
// provider's form: the browser keeps the session cookie (HttpOnly: the
// page's script cannot read it), the page shows the identity, and after a
// logout the same page asks for a login again.
func TestBrowserLogin(t *testing.T) {
	o := provider(t)
	ctx, _ := chromium.Start(t)
	pathtest.Both[1].Load(t, adminPort, config(t.TempDir(), o.Issuer, "127.0.0.1:9"), "srv0")
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	run("the login",
		chromedp.Navigate(gw+"/app"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="password"]`)),
		chromedp.SendKeys(chromedp.CSS(`#username`), o.Username()),
		chromedp.SendKeys(chromedp.CSS(`#password`), oidcop.Password),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
	)
	// the form posts, the provider redirects to the callback, which
	// redirects to /app: poll (a navigation interrupts an evaluation)
	var state string
	deadline := time.Now().Add(30 * time.Second)
	for state == "" {
		if time.Now().After(deadline) {
			t.Fatal("the browser did not come back to /app")
		}
		state, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`(location.pathname === "/app" && document.body && document.body.innerText.startsWith("hello")) ? location.href + "|" + document.body.innerText + "|" + document.cookie : ""`))
		time.Sleep(50 * time.Millisecond)
	}
	parts := strings.SplitN(state, "|", 3)
	if parts[0] != gw+"/app" || strings.TrimSpace(parts[1]) != "hello id1 test-user@zitadel.ch" {
		t.Errorf("the page after the login: %q", state)
	}
	if strings.Contains(parts[2], "gateway_session") {
		t.Errorf("the page's script reads the session cookie (not HttpOnly): %q", parts[2])
	}

	// logout (a same-site navigation): the page asks for a login again
	run("the logout", chromedp.Navigate(gw+"/oauth2/logout"), chromedp.WaitReady(chromedp.CSS(`body`)))
	run("the page again", chromedp.Navigate(gw+"/app"), chromedp.WaitReady(chromedp.CSS(`body`)))
	after, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(after, o.Issuer) {
		t.Errorf("after the logout, /app went to %s, not to the provider's login", after)
	}
}
