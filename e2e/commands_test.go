package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestQuickStart runs the README's "From nothing to a quota 429" as
// written, after its build (bin/caddy is the built binary): the Caddyfile,
// an API key made by `caddy gateway apikey new`, `caddy start`, four
// requests (the fourth a 429 problem) and `caddy gateway usage`. Its port
// is moved into this package's range; the admin API is this package's
// (CADDY_ADMIN, which `caddy gateway usage` follows as Caddy's commands do).
func TestQuickStart(t *testing.T) {
	bin := caddyBin(t)
	blocks := sectionBlocks(t, "README.md", "## From nothing to a quota 429")
	if len(blocks) != 2 || blocks[0].info != "sh" || blocks[1].info != "sh" || !strings.Contains(blocks[0].text, "build/build.sh") {
		t.Fatalf("the section's blocks: %v; want sh (the build), sh (the rest)", blocks)
	}
	if n := commands(blocks[0].text) + commands(blocks[1].text); n > 7 {
		t.Errorf("the quick start takes %d commands, want at most 7", n)
	}
	script := strings.NewReplacer(":8080", ":19670").Replace(blocks[1].text)

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "caddy")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg", "CADDY_ADMIN="+adminAddr)
	// the block leaves the gateway running (caddy start): stop it, also
	// when the block fails half-way
	t.Cleanup(func() { exec.Command(bin, "stop", "--address", adminAddr).Run() })
	out, err := runScript(t, dir, env, "quickstart", script, 2*time.Minute)
	if err != nil {
		t.Fatalf("the quick start: %v\n%s", err, out)
	}
	// the gateway started in the background logs to the same output as the
	// script's commands, a line per write, which can land between a curl's
	// body and its status (seen: "hello alice{...cleaning storage...}\n 200")
	out = caddyLogLine.ReplaceAllString(out, "")

	for i := 1; i <= 3; i++ {
		if !strings.Contains(out, "hello alice 200\n") {
			t.Fatalf("request %d not answered 200 hello alice:\n%s", i, out)
		}
		out = strings.Replace(out, "hello alice 200\n", "", 1)
	}
	refused := regexp.MustCompile(`(?m)^(\{.*\})\n? 429$`).FindStringSubmatch(out)
	if refused == nil {
		t.Fatalf("no 429 after the 3 a day:\n%s", out)
	}
	var problem map[string]any
	if err := json.Unmarshal([]byte(refused[1]), &problem); err != nil {
		t.Fatalf("the 429's body is not JSON: %v: %s", err, refused[1])
	}
	if problem["type"] != "urn:apigate:problem:quota_exceeded" || problem["status"] != float64(429) || problem["instance"] != "/" ||
		problem["error"] != "quota_exceeded" || problem["plan"] != "free" || problem["window"] != "day" {
		t.Errorf("the 429's problem: %s", refused[1])
	}
	// caddy gateway usage: the day's row, 3 admitted and 1 refused
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d\s+free\s+3\s+1\s*$`).MatchString(out) {
		t.Errorf("caddy gateway usage does not show 3 admitted, 1 refused:\n%s", out)
	}
}

// caddyLogLine is a line of Caddy's JSON log.
var caddyLogLine = regexp.MustCompile(`(?m)\{"level":"[a-z]+","ts":[0-9.e+]+,[^\n]*\}\n`)

// commands counts a shell block's commands: its lines that are neither
// blank, comments, nor inside a here-document.
func commands(script string) int {
	n := 0
	heredoc := ""
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case heredoc != "":
			if trimmed == heredoc {
				heredoc = ""
			}
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		default:
			n++
			if _, tag, ok := strings.Cut(trimmed, "<<'"); ok {
				heredoc, _, _ = strings.Cut(tag, "'")
			}
		}
	}
	return n
}

// TestAuditVerifyCommand: `caddy gateway audit keygen` makes the chain's
// key, the gateway signs its audit file with it, and `caddy gateway audit
// verify` accepts the file as written after a clean stop, and exits 2
// naming the line when an event is altered, all from the built binary.
func TestAuditVerifyCommand(t *testing.T) {
	bin := caddyBin(t)
	dir := t.TempDir()
	gateway := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{"gateway"}, args...)...)
		var o, e bytes.Buffer
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return o.String(), e.String(), exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}
	if out, errOut, code := gateway("audit", "keygen", "-out", "keys"); code != 0 || !strings.Contains(out, "key id") {
		t.Fatalf("caddy gateway audit keygen: exit %d: %s %s", code, out, errOut)
	}
	cfg := fmt.Sprintf(`{
	admin %s
	audit {
		chain keys/audit.key
		sink file audit.jsonl
	}
}

:19671 {
	audit
	respond "ok"
}
`, adminAddr)
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	var mu sync.Mutex
	logs := func() string { mu.Lock(); defer mu.Unlock(); return log.String() }
	lw := &lockedWriter{mu: &mu, w: func() io.Writer { return &log }}
	gw := exec.Command(bin, "run", "--config", "Caddyfile")
	gw.Dir, gw.Stdout, gw.Stderr = dir, lw, lw
	gw.Env = append(os.Environ(), "XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg")
	gw.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			gw.Process.Kill()
			gw.Wait()
		}
	})
	waitFor(t, "http://127.0.0.1:19671/", "", 200, 20*time.Second, logs)
	for i := 0; i < 5; i++ {
		waitFor(t, fmt.Sprintf("http://127.0.0.1:19671/%d", i), "", 200, 5*time.Second, logs)
	}
	gw.Process.Signal(syscall.SIGTERM) // a clean stop signs the final checkpoint
	gw.Wait()
	stopped = true

	out, errOut, code := gateway("audit", "verify", "-key", "keys/audit.pub", "-require-final", "audit.jsonl")
	if code != 0 || !strings.Contains(out, "ok: 1 chain verified") {
		t.Fatalf("caddy gateway audit verify: exit %d\nstdout: %s\nstderr: %s\ngateway log:\n%s", code, out, errOut, logs())
	}

	// one event altered: exit 2, the file and line named
	data, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	altered := strings.Replace(string(data), `"path":"/2"`, `"path":"/x"`, 1)
	if altered == string(data) {
		t.Fatalf("no event for /2 in the audit file:\n%s", data)
	}
	if err := os.WriteFile(filepath.Join(dir, "altered.jsonl"), []byte(altered), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = gateway("audit", "verify", "-key", "keys/audit.pub", "altered.jsonl")
	if code != 2 || !strings.HasPrefix(errOut, "caddy gateway: ") || !strings.Contains(errOut, "altered.jsonl") {
		t.Fatalf("an altered trail: exit %d, stdout %q, stderr %q; want exit 2 naming the file", code, out, errOut)
	}
}
