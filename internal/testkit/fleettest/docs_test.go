package fleettest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuideShowsTestedConfig keeps docs/fleet.md honest: it must show the
// reference configurations this package runs (a replica, a gateway on a
// container host), verbatim, and the AUDIT stream settings the test
// creates.
func TestGuideShowsTestedConfig(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"replica.Caddyfile", "host.Caddyfile"} {
		cfg, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(guide), "```caddyfile\n"+string(cfg)+"```\n") {
			t.Errorf("docs/fleet.md does not show testdata/%s verbatim in a ```caddyfile block", name)
		}
	}
	for _, want := range []string{
		"nats stream add AUDIT --subjects " + auditStreamConfig.Subjects[0] + " --replicas 3 --storage file",
		"--dupe-window 2m --max-age 7d",
	} {
		if auditStreamConfig.Replicas != 3 || auditStreamConfig.Duplicates.String() != "2m0s" || auditStreamConfig.MaxAge.Hours() != 168 {
			t.Fatalf("auditStreamConfig changed: update docs/fleet.md and this test")
		}
		if !strings.Contains(string(guide), want) {
			t.Errorf("docs/fleet.md lacks %q", want)
		}
	}
}
