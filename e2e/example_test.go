package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestCaddyfileExampleRuns runs Caddyfile.example as scripts/run does (its
// fixed local ports moved into this package's range) and checks what the
// README promises: a demo token passes every duty, no token gets 401, the
// demo JWKS verifies RS256 tokens, writes are checked by method.
func TestCaddyfileExampleRuns(t *testing.T) {
	bin := caddyBin(t)
	dir := t.TempDir()
	src, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		"localhost:2019", adminAddr,
		"127.0.0.1:9001", "127.0.0.1:19611",
		"http://:9001", "http://:19611",
		"127.0.0.1:9100", "127.0.0.1:19612",
		"127.0.0.1:9180", "127.0.0.1:19613",
		"localhost:2020", "localhost:19614",
	).Replace(string(src))
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// what scripts/run sets up
	s := &stack{t: t, dir: dir}
	var kerr error
	s.key, kerr = rsaKey()
	if kerr != nil {
		t.Fatal(kerr)
	}
	s.kid = "demo-kid"
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keys", "jwks.json"), s.jwksJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("s3cret", 8)
	// as scripts/run: the site is named localhost, so the Host header the
	// gateway passes upstream is not the upstream's own address
	site := fmt.Sprintf("http://localhost:%d", gwPort)
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg",
		"JWT_SECRET="+secret, "GATEWAY_SITE="+site, "GATEWAY_LISTEN=:19600", "GATEWAY_DEV_DIR="+dir,
		"AUDIT_FILE="+dir+"/audit.jsonl", "AUDIT_SPOOL="+dir+"/spool", "DOCKER_ROUTES_STATE="+dir+"/routes.json",
		"UPSTREAM=127.0.0.1:19611", "JWKS_URL=http://127.0.0.1:19611/.well-known/jwks.json",
		"PERMISSION_URL=http://127.0.0.1:19612/check", "DOCKER_HOST=unix://"+dir+"/no-engine.sock")
	out := &lockedWriter{mu: &s.logsMu, w: func() io.Writer { return s.logs }}
	s.logs = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	t.Cleanup(func() { s.stop(false) })
	waitFor(t, site+"/health", "", 200, 30*time.Second, s.logText)

	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "demo-user",
		"roles": []string{"admin", "editor"}, "scope": "orders:read orders:write",
		"exp": time.Now().Add(time.Hour).Unix()})
	demo, err := hs.SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	viewer := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "demo-viewer",
		"roles": []string{"viewer"}, "scope": "orders:read", "exp": time.Now().Add(time.Hour).Unix()})
	viewer.Header["kid"] = s.kid
	rs, err := viewer.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}

	// The demo JWKS is served by the gateway itself, so the fetch at start
	// fails and jwt_auth retries in the background (1s, 2s, 4s...).
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, _ := do(t, "GET", site+"/api/orders/1", rs, nil)
		if resp.StatusCode == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	cases := []struct {
		name, method, path, token string
		status                    int
		bodyHas                   string
	}{
		{"health, no auth", "GET", "/health", "", 200, `"ok"`},
		{"demo token", "GET", "/api/orders/42", demo, 200, `"user":"demo-user"`},
		{"no token", "GET", "/api/orders/42", "", 401, ""},
		{"RS256 via the demo JWKS", "GET", "/api/orders/42", rs, 200, `"user":"demo-viewer"`},
		{"viewer may not write", "POST", "/api/orders/42", rs, 403, "missing role"},
		{"editor writes", "PUT", "/api/orders/42", demo, 200, ""},
		{"demo permission service denies DELETE", "DELETE", "/api/orders/42", demo, 403, "permission"},
		{"public route", "GET", "/api/public/info", "", 200, `"upstream":"demo"`},
		// no engine and no state file: whether a container routes
		// /nowhere is not known, so docker_routes (in the catch-all
		// handle) answers 503 rather than the 404 after it
		{"no route, discovery starting", "GET", "/nowhere", "", 503, `"discovery_starting"`},
		{"dashboard", "GET", "http://localhost:19614/", "", 200, "<html"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if strings.HasPrefix(path, "/") {
				path = site + path
			}
			resp, body := do(t, tc.method, path, tc.token, nil)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.bodyHas) {
				t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.bodyHas)
			}
		})
	}
	// scripts/run starts without an error line: the demo JWKS, served by
	// the gateway itself, is not up for the first fetch, which is a
	// warning (docs/caddyjwt.md); nothing else may log an error.
	for _, line := range strings.Split(s.logText(), "\n") {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("error line while starting and serving Caddyfile.example:\n%s", line)
		}
	}
	// the audit file sink got the events
	deadline = time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
		if strings.Count(string(b), "\n") >= 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit.jsonl has %d lines, want >= 7:\n%s", strings.Count(string(b), "\n"), b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls url (with token, if any) until it answers status.
// waitFor polls url until it answers status; it returns how many answers
// (of any status) it got.
func waitFor(t testing.TB, url, token string, status int, within time.Duration, logs func() string) (answers int) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := -1
	for {
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			last = resp.StatusCode
			answers++
			if last == status {
				return answers
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d within %s (last status %d, error %v)\n%s", url, status, within, last, err, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rsaKey() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) }
