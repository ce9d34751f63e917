// The golden and end-to-end tests live in an external test package, so that
// caddy-ratelimit (which they import) is not a dependency of caddyrbac:
// Go then initializes caddyrbac first, as in the real binary, and the
// directive order is the production one (rbac before rate_limit).
package caddyrbac_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/apigate/gateway/internal/testkit/goldentest"

	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/caddyrbac"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line. Run with
// -update to rewrite the expected JSON after a deliberate change.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{})
}
