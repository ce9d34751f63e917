// Package goldentest runs the Caddyfile -> JSON golden tests of the
// gateway's modules: each file holds a Caddyfile, a line of ten dashes, and
// the JSON that Caddy's caddyfile adapter makes of it (tab-indented).
package goldentest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // the caddyfile adapter
)

// Separator divides a golden file's Caddyfile from its expected JSON.
const Separator = "----------"

// Options adjust Run.
type Options struct {
	// AllowUnformatted accepts the adapter's "not formatted" warning, for
	// files that quote a document's text verbatim (aligned by hand).
	AllowUnformatted bool
}

// Run adapts every file matching pattern and compares the JSON with the
// part after the separator line; with update it rewrites that part instead.
// Adapter warnings fail the test.
func Run(t *testing.T, pattern string, update bool, opts Options) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no golden files match %s", pattern)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, expected, ok := strings.Cut(string(data), "\n"+Separator+"\n")
			if !ok {
				t.Fatalf("%s: no %q line", file, Separator)
			}
			out, warnings, err := adapter.Adapt([]byte(input+"\n"), nil)
			if err != nil {
				t.Fatalf("adapting: %v", err)
			}
			for _, w := range warnings {
				if opts.AllowUnformatted && strings.Contains(w.Message, "not formatted") {
					continue
				}
				t.Errorf("warning: %s:%d: %s: %s", file, w.Line, w.Directive, w.Message)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := pretty.String() + "\n"
			if update {
				if err := os.WriteFile(file, []byte(input+"\n"+Separator+"\n"+got), 0o644); err != nil {
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
