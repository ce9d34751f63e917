// Package chromium starts Debian's headless Chromium for a test (the
// dashboard's page tests, oidc_login's browser login). Without chromium the
// tests skip loudly, except under CI=true where they fail.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path finds Debian's chromium (or $CHROMIUM).
func Path(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	msg := "chromium not installed (apt-get install -y chromium)"
	if os.Getenv("CI") == "" {
		t.Skipf("\n\n!!!!!!!! SKIPPING BROWSER TESTS: %s !!!!!!!!\n(under CI=true this fails)\n", msg)
	}
	t.Fatalf("browser tests need %s", msg)
	return ""
}

// Options are the headless browser's flags, with a user data directory of
// the test's own.
func Options(t *testing.T) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 900),
	}
}

// Start starts a browser and returns its context (and the cancel that the
// test's cleanup also calls). The first action starts the browser; it has
// no timeout (that would stop the browser), a watchdog cancels it instead.
func Start(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), Options(t)...)
	ctx, cancelC := chromedp.NewContext(actx)
	cancel := func() { cancelC(); cancelA() }
	t.Cleanup(cancel)
	watchdog := time.AfterFunc(60*time.Second, cancelC)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	watchdog.Stop()
	return ctx, cancel
}
