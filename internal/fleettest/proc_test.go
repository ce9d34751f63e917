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

	"github.com/apigate/gateway/internal/podmantest"
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
	dir := t.TempDir()
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(config(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{log: filepath.Join(dir, "caddy.log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
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
	h.proc = runGateway(t, bin, h.name, func(dir string) string { return h.config(h, nats, dir) }, h.url("/ready"))
}

// kill SIGKILLs the gateway: it cannot delete its fleet entry.
func (h *fleetHost) kill() { h.proc.kill() }
