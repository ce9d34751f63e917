// The golden and end-to-end tests live in an external test package so that
// the packages they import initialize as in the real binary.
package caddyaudit_test

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

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddyrbac"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

const goldenSeparator = "----------"

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line.
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
				if strings.Contains(w.Message, "not formatted") {
					// contract.caddyfiletest is the CONTRACT's text verbatim,
					// aligned by hand.
					continue
				}
				t.Errorf("warning: %s:%d: %s: %s", file, w.Line, w.Directive, w.Message)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := pretty.String()
			if *update {
				if err := os.WriteFile(file, []byte(input+"\n"+goldenSeparator+"\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.TrimSpace(got) != strings.TrimSpace(expected) {
				t.Errorf("%s: adapted JSON differs\n--- got\n%s\n--- want\n%s", file, got, expected)
			}
		})
	}
}
