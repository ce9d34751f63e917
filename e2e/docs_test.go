package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docBlock is a fenced code block of a Markdown file.
type docBlock struct {
	file string
	line int    // of the opening fence
	info string // the fence's info string: "caddyfile", "caddyfile syntax", "sh"
	text string // the content, each line ending with "\n"
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docBlocks returns the fenced code blocks (``` at the start of a line) of
// the README and docs/*.md.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var blocks []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../")
		var cur *docBlock
		for i, line := range strings.SplitAfter(string(data), "\n") {
			trimmed := strings.TrimRight(line, "\n")
			if !strings.HasPrefix(trimmed, "```") {
				if cur != nil {
					cur.text += trimmed + "\n"
				}
				continue
			}
			if cur == nil {
				cur = &docBlock{file: name, line: i + 1, info: strings.TrimSpace(trimmed[3:])}
				continue
			}
			blocks = append(blocks, *cur)
			cur = nil
		}
		if cur != nil {
			t.Errorf("%s: code block not closed", cur)
		}
	}
	return blocks
}

// sectionBlocks returns the code blocks of the section of file (a path
// from the repository's root) under heading ("## Test tokens"), up to the
// next heading of its level or above.
func sectionBlocks(t *testing.T, file, heading string) []docBlock {
	t.Helper()
	data, err := os.ReadFile("../" + file)
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	start := strings.Index(section, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no %q section", file, heading)
	}
	section = section[start+1+len(heading):]
	level, _, _ := strings.Cut(heading, " ")
	for _, l := range []string{"##", "###", "####"} { // (a "# " line may be a shell comment)
		if end := strings.Index(section, "\n"+l+" "); end >= 0 && len(l) <= len(level) {
			section = section[:end]
		}
	}
	var blocks []docBlock
	for _, b := range docBlocks(t) {
		if b.file == file && strings.Contains(section, "```"+b.info+"\n"+b.text+"```") {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// runScript runs a doc's shell block with bash -euo pipefail in dir, in a
// process group of its own that the test ends (a block may leave a server
// running in the background), killed if it runs longer than within; its
// output goes to <dir>/<name>.log (which a background job may keep open)
// and is returned.
func runScript(t *testing.T, dir string, env []string, name, script string, within time.Duration) (string, error) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGTERM) })
	timer := time.AfterFunc(within, func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	err = cmd.Wait()
	if !timer.Stop() {
		err = fmt.Errorf("killed after %s: %v", within, err)
	}
	out, _ := os.ReadFile(logPath)
	return string(out), err
}

// TestDocSnippets keeps the Caddyfile snippets of the README and docs/
// copyable: each one adapts with the built binary (as a whole config, as
// the body of a site, or as global options, whichever it is) and `caddy
// fmt` leaves it unchanged, so a copied snippet brings no "Caddyfile input
// is not formatted" warning. Blocks tagged ```caddyfile syntax are
// synopses with <placeholders>: they are only formatted. Every block has
// a language tag, so that no Caddyfile snippet goes untested untagged.
func TestDocSnippets(t *testing.T) {
	bin := caddyBin(t)
	dir := t.TempDir()
	n := 0
	for _, b := range docBlocks(t) {
		if b.info == "" {
			t.Errorf("%s: code block without a language: tag it (```caddyfile, ```sh, ```text...)", b)
			continue
		}
		lang, kind, _ := strings.Cut(b.info, " ")
		if lang != "caddyfile" {
			continue
		}
		n++
		t.Run(b.String(), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("snippet-%d.caddyfile", n))
			if err := os.WriteFile(path, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			// caddy fmt prints the formatted text, and exits 1 when it
			// differs from the input
			var stderr bytes.Buffer
			cmd := exec.Command(bin, "fmt", path)
			cmd.Stderr = &stderr
			formatted, err := cmd.Output()
			if len(formatted) == 0 {
				t.Fatalf("caddy fmt: %v %s", err, stderr.String())
			}
			if string(formatted) != b.text {
				t.Errorf("caddy fmt changes the snippet; it should read:\n%s", formatted)
			}
			switch kind {
			case "syntax":
				if !strings.Contains(b.text, "<") {
					t.Errorf("a ```caddyfile syntax block has <placeholders>; this one has none: tag it ```caddyfile so that it is adapted")
				}
				return
			case "":
			default:
				t.Fatalf("unknown kind %q after caddyfile: want none or syntax", kind)
			}
			indented := "\t" + strings.ReplaceAll(strings.TrimSuffix(b.text, "\n"), "\n", "\n\t") + "\n"
			var errs []string
			for _, c := range []struct{ as, text string }{
				{"a whole Caddyfile", b.text},
				{"the body of a site", ":8080 {\n" + indented + "}\n"},
				{"global options", "{\n" + indented + "}\n"},
			} {
				p := filepath.Join(dir, fmt.Sprintf("adapt-%d.caddyfile", n))
				if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(bin, "adapt", "--config", p, "--adapter", "caddyfile")
				// the adapt-time variables ({$VAR}) the docs' examples read
				cmd.Env = append(os.Environ(), "HOME="+dir, "GATEWAY_ADMIN=127.0.0.1:2019",
					"GATEWAY_HTTP_PORT=80", "GATEWAY_HTTPS_PORT=443", "NATS_URLS=nats://127.0.0.1:4222",
					"GATEWAY_NODE=gw-1", "GATEWAY_ADVERTISE=10.0.0.5", "AUDIT_SPOOL="+filepath.Join(dir, "audit"),
					"DOCKER_HOST=unix:///run/podman/podman.sock")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err == nil {
					return
				}
				errs = append(errs, fmt.Sprintf("as %s: %s", c.as, strings.TrimSpace(stderr.String())))
			}
			t.Errorf("the snippet does not adapt:\n%s\n%s", b.text, strings.Join(errs, "\n"))
		})
	}
	if n < 10 {
		t.Fatalf("found %d Caddyfile snippets; the docs have more: is the extraction broken?", n)
	}
}

// TestCaddyfileErrorLine: bin/caddy's Caddyfile errors name the line of
// the bad token once, not also the closing braces of the blocks around it
// (internal/caddyfileerr).
func TestCaddyfileErrorLine(t *testing.T) {
	bin := caddyBin(t)
	path := filepath.Join(t.TempDir(), "Caddyfile")
	config := ":8080 {\n\thandle /api/* {\n\t\tjwt_auth {\n\t\t\thmac_secret {env.JWT_SECRET}\n\t\t\tbogus x\n\t\t}\n\t\trespond ok\n\t}\n}\n"
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("a bad Caddyfile adapted")
	}
	msg := stderr.String()
	if !strings.Contains(msg, "unrecognized subdirective 'bogus', at "+path+":5\"") || strings.Count(msg, ", at ") != 1 {
		t.Fatalf("the error should name line 5 once:\n%s", msg)
	}
}

// TestFastPathProtocolsAgree: Caddyfile.example's comment on the fast
// path and the README's row of it name the same protocols as served by
// the fast path and the same as going to Caddy (the example once said
// HTTP/2 went to Caddy after the fast path served it).
func TestFastPathProtocolsAgree(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| the fast path:") {
			row = l
		}
	}
	example, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	var comment []string
	for _, l := range strings.Split(string(example), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "# The fast path") || len(comment) > 0 && strings.HasPrefix(l, "#") {
			comment = append(comment, strings.TrimPrefix(l, "#"))
		} else if len(comment) > 0 {
			break
		}
	}
	if row == "" || len(comment) == 0 {
		t.Fatalf("README's fast path row (%q) or Caddyfile.example's fast path comment (%q) not found", row, comment)
	}
	rs, rc := fastPathProtocols(row)
	es, ec := fastPathProtocols(strings.Join(comment, " "))
	if len(rs) == 0 || rs != es || rc != ec {
		t.Errorf("the fast path serves %q and hands %q to Caddy in the README, but serves %q and hands %q in Caddyfile.example",
			rs, rc, es, ec)
	}
}

// fastPathProtocols reads the HTTP versions a passage names as served by
// the fast path and as going to Caddy: a clause (between ";", "(" and
// ")") that mentions Caddy hands its versions over; the others are
// served.
func fastPathProtocols(text string) (served, caddy string) {
	clauses := strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == '(' || r == ')' })
	var s, c []string
	for _, cl := range clauses {
		for _, f := range strings.FieldsFunc(cl, func(r rune) bool { return r == ' ' || r == ',' || r == '`' }) {
			if !strings.HasPrefix(f, "HTTP/") {
				continue
			}
			if strings.Contains(cl, "to Caddy") || strings.Contains(cl, "Caddy's") {
				c = append(c, f)
			} else {
				s = append(s, f)
			}
		}
	}
	return strings.Join(s, " "), strings.Join(c, " ")
}
