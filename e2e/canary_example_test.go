package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestCanaryWorkedExample runs docs/caddydocker.md's worked example of a
// canary release as written, on a private Podman with no registry (its
// ports and the Podman socket moved into this test's): the image built
// offline, the gateway started with its Caddyfile, a token minted, v1
// routed, a broken v2 rolled back at its 20th answer (all others v1's),
// and v2.1 beside the rolled-back v2 promoted to complete at weight 100.
func TestCanaryWorkedExample(t *testing.T) {
	bin := caddyBin(t)
	blocks := sectionBlocks(t, "docs/caddydocker.md", "### A worked example")
	// image, Caddyfile, start + v1, broken v2, v2.1, clean up, the
	// production variant (not run)
	if len(blocks) != 7 || blocks[1].info != "caddyfile" {
		t.Fatalf("the example's blocks: %v; want sh, caddyfile, then five sh", blocks)
	}

	pm, err := podmantest.New("..", "e2ecanary")
	pm = podmantest.Require(t, pm, err)
	t.Cleanup(pm.Close)
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "caddy")); err != nil {
		t.Fatal(err)
	}
	if err := pm.Wrapper(binDir); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for range 3 {
		p := freeport.Port(t)
		ports = append(ports, strconv.Itoa(p))
	}
	const gw = "19661"
	replace := strings.NewReplacer("unix:///run/podman/podman.sock", pm.Host(), "8080", gw,
		"localhost:2019", adminAddr, "9081", ports[0], "9082", ports[1], "9083", ports[2])
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "HOME="+dir, "GATEWAY="+repo,
		"XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg")
	// the Go caches stay the test's own (HOME moved): a cold build of the
	// service would take a minute
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil {
			env = append(env, v+"="+strings.TrimSpace(string(out)))
		}
	}
	// sh runs a block (each in a process group the test ends, so the
	// gateway that `caddy start` leaves running ends with the test) and
	// returns its output.
	sh := func(step int, script string) string {
		t.Helper()
		began := time.Now()
		out, err := runScript(t, dir, env, fmt.Sprintf("step%d", step), script, 3*time.Minute)
		if err != nil {
			status, _ := exec.Command("curl", "-s", "http://"+adminAddr+"/gateway/containers").Output()
			t.Fatalf("step %d of the example: %v\n%s\nthe gateway's containers: %s", step, err, out, status)
		}
		t.Logf("step %d (%s):\n%s", step, time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
		return out
	}
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile.canary"), []byte(replace.Replace(blocks[1].text)), 0o644); err != nil {
		t.Fatal(err)
	}

	sh(1, replace.Replace(blocks[0].text))
	if out := sh(3, replace.Replace(blocks[2].text)); !strings.Contains(out, "v1 /orders/42") {
		t.Fatalf("step 3: v1 did not answer: %q", out)
	}
	counts := func(out string) map[string]int {
		m := map[string]int{}
		for _, match := range regexp.MustCompile(`(?m)^\s*(\d+) (.+)$`).FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(match[1])
			m[match[2]] = n
		}
		return m
	}
	out := sh(4, replace.Replace(blocks[3].text))
	c := counts(out)
	if c["v2 /orders/x 500"] != 20 || c["v1 /orders/x 200"] != 280 {
		t.Errorf("step 4: answers %v; want 20 failed ones from the broken v2 (rolled back at its 20th), the other 280 from v1", c)
	}
	// step 5: requests until v2.1 is complete (v1's and v2.1's answers,
	// sorted and counted: v1's line first), then 300 that v2.1 all takes
	out = sh(5, replace.Replace(blocks[4].text))
	var lines []string
	for _, match := range regexp.MustCompile(`(?m)^\s*(\d+ .+)$`).FindAllStringSubmatch(out, -1) {
		lines = append(lines, match[1])
	}
	if n := len(lines); n < 2 || lines[n-1] != "300 v2.1 /orders/x 200" || !strings.HasSuffix(lines[n-2], " v2.1 /orders/x 200") ||
		(n == 3 && !strings.HasSuffix(lines[0], " v1 /orders/x 200")) || n > 3 {
		t.Errorf("step 5: answers %q; want v1's and v2.1's until v2.1 is complete, then 300 of v2.1's", lines)
	}
	sh(6, replace.Replace(blocks[5].text))
}
