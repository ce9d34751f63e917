package caddyopenapi_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/caddytester"
)

type mdBlock struct{ info, text string }

// section returns the fenced blocks of a Markdown file's section (from
// its heading to the next heading of the same level).
func section(t *testing.T, file, heading string) []mdBlock {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s: no section %q", file, heading)
	}
	text = text[start+len(heading)+2:]
	if end := strings.Index(text, "\n## "); end >= 0 {
		text = text[:end]
	}
	var out []mdBlock
	var cur *mdBlock
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &mdBlock{info: strings.TrimSpace(line[3:])}
			} else {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.text += line + "\n"
		}
	}
	return out
}

// TestWorkedExample runs docs/caddyopenapi.md's worked example as
// written: it saves the document, loads the Caddyfile (on free ports of
// its own instead of 8034 and 8035), runs each shell block with bash and
// compares its output with the text block after it.
func TestWorkedExample(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is needed")
		}
		t.Skip("SKIPPED LOUDLY: curl is not installed; the worked example's commands use it")
	}
	blocks := section(t, "../docs/caddyopenapi.md", "## A worked example")
	if len(blocks) < 4 || blocks[0].info != "yaml" || blocks[1].info != "caddyfile" {
		t.Fatalf("the worked example's blocks are not a document, a Caddyfile and commands: %+v", blocks)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orders.yaml"), []byte(blocks[0].text), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, svc := freePort(t), freePort(t)
	ports := strings.NewReplacer("localhost:8034", fmt.Sprintf("localhost:%d", gw), "localhost:8035", fmt.Sprintf("localhost:%d", svc))
	caddyfile := ports.Replace(blocks[1].text)
	caddyfile = strings.Replace(caddyfile, "spec orders.yaml", "spec "+filepath.Join(dir, "orders.yaml"), 1)
	caddytester.Load(t, admin(t), globals(t, "")+caddyfile)

	ran := 0
	for i := 2; i < len(blocks); i++ {
		if blocks[i].info != "sh" {
			continue
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", ports.Replace(blocks[i].text))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", blocks[i].text, err, out)
		}
		ran++
		if i+1 < len(blocks) && blocks[i+1].info == "text" {
			want := ports.Replace(blocks[i+1].text)
			if got := strings.TrimSpace(string(out)); got != strings.TrimSpace(want) {
				t.Errorf("%s\ngot:\n%s\nthe docs say:\n%s", blocks[i].text, got, want)
			}
		}
	}
	if ran < 4 {
		t.Errorf("%d commands run, want the example's 4 at least", ran)
	}
}
