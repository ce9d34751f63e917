// The golden tests live in an external test package that also imports
// caddy-ratelimit, to show its distributed mode taking this storage.
package natsstore_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/natsstore"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

const goldenSeparator = "----------"

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line. Run with
// -update to rewrite the expected JSON after a deliberate change.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.caddyfiletest files")
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, expected, ok := strings.Cut(string(data), "\n"+goldenSeparator+"\n")
			if !ok {
				t.Fatalf("%s: no %q line", file, goldenSeparator)
			}
			out, warnings, err := adapter.Adapt([]byte(input+"\n"), nil)
			if err != nil {
				t.Fatalf("adapting: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("warning: %s:%d: %s: %s", file, w.Line, w.Directive, w.Message)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := pretty.String() + "\n"
			if *update {
				if err := os.WriteFile(file, []byte(input+"\n"+goldenSeparator+"\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != expected {
				t.Errorf("%s: adapted JSON differs (run with -update to accept)\n--- got\n%s--- want\n%s", file, got, expected)
			}
		})
	}
}
