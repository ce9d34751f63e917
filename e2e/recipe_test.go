package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTestTokenRecipe runs the recipe of docs/caddyjwt.md, "Test tokens",
// as written (its two ports moved into this package's range): the first
// shell block makes a key and serves its JWKS and a discovery document,
// the Caddyfile block runs on bin/caddy, and the second shell block mints
// a token and sends it; the gateway must answer "hello alice".
func TestTestTokenRecipe(t *testing.T) {
	bin := caddyBin(t)
	blocks := sectionBlocks(t, "docs/caddyjwt.md", "## Test tokens")
	if len(blocks) != 3 || blocks[0].info != "sh" || blocks[1].info != "caddyfile" || blocks[2].info != "sh" {
		t.Fatalf("the recipe's blocks: %v; want sh (key, JWKS, serve), caddyfile (the gateway), sh (token, request)", blocks)
	}
	ports := strings.NewReplacer("127.0.0.1:9000", "127.0.0.1:19652", "localhost:8080", "localhost:19651")
	serve, caddyfile, request := ports.Replace(blocks[0].text), ports.Replace(blocks[1].text), ports.Replace(blocks[2].text)

	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "caddy")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "HOME="+dir,
		"XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg", "CADDY_ADMIN="+adminAddr)
	sh := func(name, script string) (string, error) { return runScript(t, dir, env, name, script, 2*time.Minute) }
	if out, err := sh("serve", serve); err != nil {
		t.Fatalf("step 1 of the recipe: %v\n%s", err, out)
	}
	waitFor(t, "http://127.0.0.1:19652/.well-known/openid-configuration", "", 200, 10*time.Second, func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		return string(b)
	})

	if err := os.WriteFile(filepath.Join(dir, "Caddyfile.dev"), []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	gwLog, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer gwLog.Close()
	logs := func() string {
		b, _ := os.ReadFile(gwLog.Name())
		return string(b)
	}
	gw := exec.Command(bin, "run", "--config", "Caddyfile.dev", "--adapter", "caddyfile")
	gw.Dir, gw.Env, gw.Stdout, gw.Stderr = dir, env, gwLog, gwLog
	gw.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gw.Process.Signal(syscall.SIGTERM)
		gw.Wait()
	})
	waitFor(t, "http://localhost:19651/api/x", "", 401, 20*time.Second, logs)

	out, err := sh("request", request)
	if err != nil || !strings.Contains(out, "hello alice") {
		t.Fatalf("step 3 of the recipe: %v; output:\n%s\ngateway log:\n%s", err, out, logs())
	}
}
