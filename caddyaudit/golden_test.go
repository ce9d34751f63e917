// The golden and end-to-end tests live in an external test package so that
// the packages they import initialize as in the real binary.
package caddyaudit_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/apigate/gateway/internal/testkit/goldentest"

	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddyrbac"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{AllowUnformatted: true})
}
