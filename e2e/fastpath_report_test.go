package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
)

// TestFastPathReport: an operator sees whether the fast path serves each
// server, with every reason at once, wherever a config passes: `caddy
// adapt`, `caddy validate`, the running gateway's log, `caddy
// gateway-reload`, and Prometheus (gateway_fastpath_on).
func TestFastPathReport(t *testing.T) {
	bin := caddyBin(t)
	dir := t.TempDir()
	ports := freeport.Ports(t, 3)
	admin, on, off := ports[0], ports[1], ports[2]
	cfg := filepath.Join(dir, "Caddyfile")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{
	admin 127.0.0.1:%[1]d
	metrics
	servers :%[2]d {
		name api
		listener_wrappers {
			apigate
		}
		trusted_proxies static private_ranges
	}
	servers :%[3]d {
		name legacy
		listener_wrappers {
			apigate
		}
		expected_underscore_headers X_Api_Key
		expected_dot_headers X.Trace
	}
}
http://:%[2]d {
	log
	handle /files/* {
		file_server
	}
	respond "api"
}
http://:%[3]d {
	respond "legacy"
}
`, admin, on, off)), 0o644)
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/xdg", "XDG_CONFIG_HOME="+dir+"/xdg")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("caddy %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	wantOn := "fast path on for server api"
	wantOff := "fast path off for server legacy: expected_underscore_headers; expected_dot_headers"
	for _, args := range [][]string{{"adapt", "--config", cfg}, {"validate", "--config", cfg}} {
		out := run(args...)
		if !strings.Contains(out, wantOn) || !strings.Contains(out, wantOff) {
			t.Errorf("caddy %s does not say which servers the fast path serves:\n%s", args[0], out)
		}
	}

	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Env = env
	var mu sync.Mutex
	var buf bytes.Buffer
	logs := func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
	cmd.Stdout = &lockedWriter{mu: &mu, w: func() io.Writer { return &buf }}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	for deadline := time.Now().Add(15 * time.Second); ; {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", on))
		if err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not serve: %v\n%s", err, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	l := logs()
	if !strings.Contains(l, `"msg":"fast path on","server":"api","routes":`) ||
		!strings.Contains(l, `"msg":"fast path off","server":"legacy","reason":"expected_underscore_headers; expected_dot_headers"`) {
		t.Errorf("the load's log does not name each server's state:\n%s", l)
	}
	out := run("gateway-reload", "--config", cfg, "--force")
	if !strings.Contains(out, "fast path on for server api: 2 of 2 routes run on the plan") || !strings.Contains(out, wantOff) ||
		!strings.Contains(out, "http.handlers.file_server") {
		t.Errorf("gateway-reload does not say which servers the fast path serves:\n%s", out)
	}
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", admin))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, line := range []string{`gateway_fastpath_on{server="api"} 1`, `gateway_fastpath_on{server="legacy"} 0`} {
		if !strings.Contains(string(b), line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}
