package fleettest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// gatewayProc is one gateway process of a test "host".
type gatewayProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// runGateway runs bin on the Caddyfile config(dir) makes, in a directory
// of its own (HOME, data and config directories: a new instance each
// time), until the test ends (SIGINT, SIGKILL after 15 s; the log's tail
// is shown when the test failed), and waits until readyURL answers 200.
func runGateway(t *testing.T, bin, name string, config func(dir string) string, readyURL string) *gatewayProc {
	t.Helper()
	return runGatewayIn(t, bin, name, t.TempDir(), nil, config, readyURL)
}

// runGatewayIn is runGateway in dir (a host's data that outlives a
// restart: its local storage copy, state file, instance id), with env
// added to the process's environment.
func runGatewayIn(t *testing.T, bin, name, dir string, env []string, config func(dir string) string, readyURL string) *gatewayProc {
	t.Helper()
	return runGatewayFiles(t, bin, name, dir, env, nil, config, readyURL)
}

// runGatewayFiles is runGatewayIn with files the process inherits as fd
// 3, 4, ... (listening sockets, as systemd's socket activation passes
// them: Caddy's fd/3 network address).
func runGatewayFiles(t *testing.T, bin, name, dir string, env []string, files []*os.File, config func(dir string) string, readyURL string) *gatewayProc {
	t.Helper()
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(config(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{log: filepath.Join(dir, "caddy.log"), done: make(chan struct{})}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	cmd.Env = append(cmd.Env, env...)
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("gateway %s log (tail):\n%s", name, b)
		}
	})
	podmantest.Eventually(t, "gateway "+name+" ready", 60*time.Second, func() string {
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("gateway %s exited:\n%s", name, b)
		default:
		}
		code, _, err := podmantest.Get(readyURL)
		if err != nil || code != 200 {
			return fmt.Sprintf("%d %v", code, err)
		}
		return ""
	})
	return p
}

// kill SIGKILLs the gateway: it cannot delete its fleet entry.
func (p *gatewayProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop stops the gateway gracefully (SIGTERM, as systemd does) and waits
// for it to exit.
func (p *gatewayProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not exit within 30s of SIGTERM")
	}
}

// twoPodmans sets up the private Podmans of two "hosts" in parallel
// (names keep their images and containers apart), closed when the test
// ends; without podman the test skips (fails under CI=true).
func twoPodmans(t *testing.T, names [2]string) [2]*podmantest.Podman {
	t.Helper()
	root := repoRoot(t)
	var (
		wg   sync.WaitGroup
		pods [2]*podmantest.Podman
		errs [2]error
	)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i], errs[i] = podmantest.New(root, name)
		}()
	}
	wg.Wait()
	for i := range pods {
		if pods[i] != nil {
			p := pods[i]
			t.Cleanup(p.Close)
		}
		podmantest.Require(t, pods[i], errs[i])
	}
	return pods
}

// fleetHost is one "host" of a fleet test: a private Podman service and a
// gateway process following it, whose Caddyfile config makes.
type fleetHost struct {
	name        string
	pod         *podmantest.Podman
	admin, http int // the gateway's admin and HTTP ports
	proc        *gatewayProc
	config      func(h *fleetHost, nats, dir string) string
	// home, when set, is the host's data directory, kept across restarts
	// (else each start is a new instance); env is added to the process's
	// environment (the reference configs take their settings from it).
	home string
	env  func(h *fleetHost, nats string) []string
}

func (h *fleetHost) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", h.http, path)
}

func (h *fleetHost) adminURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", h.admin, path)
}

// start runs the host's gateway (a new instance each time) and waits
// until it answers GET /ready.
func (h *fleetHost) start(t *testing.T, bin, nats string) {
	t.Helper()
	dir := h.home
	if dir == "" {
		dir = t.TempDir()
	}
	var env []string
	if h.env != nil {
		env = h.env(h, nats)
	}
	h.proc = runGatewayIn(t, bin, h.name, dir, env, func(dir string) string { return h.config(h, nats, dir) }, h.url("/ready"))
}

// kill SIGKILLs the gateway: it cannot delete its fleet entry.
func (h *fleetHost) kill() { h.proc.kill() }

// runStep runs fn as t's subtest name, and stops t when it fails (the
// next steps build on it).
func runStep(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}
