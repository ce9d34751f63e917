package caddyh1

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/apigate/gateway/internal/testkit/goldentest"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line. Run with
// -update to rewrite the expected JSON after a deliberate change.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{})
}
