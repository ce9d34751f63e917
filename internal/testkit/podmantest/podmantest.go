// Package podmantest runs a private Podman for tests: its own storage,
// runtime directory, events log and API socket under a temporary directory,
// runc with raised ulimits (see ENVIRONMENT.md), and an image holding the
// static test server (internal/testkit/testserver) made with
// `podman import`. Containers use the host network and loopback ports.
package podmantest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Podman is a private Podman instance.
type Podman struct {
	Dir    string // temporary directory holding everything
	Socket string // API socket path
	Image  string // image with /testserver
	Prefix string // container name prefix of this test process

	bin     string
	env     []string
	mu      sync.Mutex
	service *exec.Cmd
	done    chan struct{}
}

// ErrNoPodman is returned by New when podman or runc is not installed.
var ErrNoPodman = errors.New("podman (and runc) not installed: apt-get install -y podman runc")

// Require returns a ready Podman or stops the test: without podman it
// skips loudly, except under CI=true where it fails.
func Require(tb testingTB, p *Podman, err error) *Podman {
	tb.Helper()
	if err == nil {
		return p
	}
	if errors.Is(err, ErrNoPodman) && os.Getenv("CI") == "" {
		tb.Skipf("\n\n!!!!!!!! SKIPPING PODMAN TESTS: %v !!!!!!!!\n(under CI=true this fails)\n", err)
	}
	tb.Fatalf("podman: %v", err)
	return nil
}

type testingTB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// New sets up a private Podman: config, storage, the test server image
// (built from modDir/internal/testserver), and the API service. name keeps
// the images, containers and temporary files of one test package apart
// from another's.
func New(modDir, name string) (*Podman, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, ErrNoPodman
	}
	runc := "/usr/sbin/runc"
	if _, err := os.Stat(runc); err != nil {
		if runc, err = exec.LookPath("runc"); err != nil {
			return nil, ErrNoPodman
		}
	}
	dir, err := os.MkdirTemp("", "pod-"+name)
	if err != nil {
		return nil, err
	}
	p := &Podman{
		Dir:    dir,
		Socket: filepath.Join(dir, "api.sock"),
		Image:  fmt.Sprintf("localhost/apigate-%s-test:%d", name, os.Getpid()),
		Prefix: fmt.Sprintf("apigate-%stest-%d-", name, os.Getpid()),
		bin:    bin,
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
events_logger = "file"
tmp_dir = %q
events_logfile_path = %q
[engine.runtimes]
runc = [%q]
`, filepath.Join(dir, "tmp"), filepath.Join(dir, "tmp", "events.log"), runc)
	if err := os.WriteFile(filepath.Join(dir, "containers.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p.env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"))
	if err := p.buildImage(modDir); err != nil {
		p.Close()
		return nil, err
	}
	if err := p.StartService(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Host is the engine address for the docker client: unix://<socket>.
func (p *Podman) Host() string { return "unix://" + p.Socket }

// Cmd runs podman with this instance's storage and config.
func (p *Podman) Cmd(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--root", filepath.Join(p.Dir, "root"), "--runroot", filepath.Join(p.Dir, "run")}, args...)
	cmd := exec.CommandContext(ctx, p.bin, full...)
	cmd.Env = p.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (p *Podman) cmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return p.Cmd(ctx, args...)
}

func (p *Podman) buildImage(modDir string) error {
	rootfs := filepath.Join(p.Dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(rootfs, "testserver")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", bin, "./internal/testkit/testserver")
	build.Dir = modDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building testserver: %v: %s", err, out)
	}
	tarPath := filepath.Join(p.Dir, "rootfs.tar")
	if err := tarFile(tarPath, bin, "testserver"); err != nil {
		return err
	}
	_, err := p.cmd("import", "--change", "CMD [\"/testserver\"]", tarPath, p.Image)
	return err
}

func tarFile(dst, src, name string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, in); err != nil {
		return err
	}
	return tw.Close()
}

// StartService starts `podman system service` on the socket and waits until
// the API answers.
func (p *Podman) StartService() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.service != nil {
		return nil
	}
	_ = os.Remove(p.Socket)
	cmd := exec.Command(p.bin, "--root", filepath.Join(p.Dir, "root"), "--runroot", filepath.Join(p.Dir, "run"),
		"system", "service", "--time=0", "unix://"+p.Socket)
	cmd.Env = p.env
	logf, err := os.OpenFile(filepath.Join(p.Dir, "service.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting podman system service: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.service, p.done = cmd, done
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p.Socket)
		},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := hc.Get("http://d/_ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-done:
			p.service = nil
			return fmt.Errorf("podman system service exited; see %s", filepath.Join(p.Dir, "service.log"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("podman API did not answer on %s", p.Socket)
}

// KillService kills the API service (SIGKILL) and waits for it to exit;
// running containers are not affected.
func (p *Podman) KillService() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.service == nil {
		return
	}
	_ = syscall.Kill(-p.service.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.service = nil
}

// Run starts a container named Prefix+name with the host network running
// `/testserver <port> <name>`, and returns once `podman run -d` returned.
func (p *Podman) Run(name string, port int, labels map[string]string) error {
	return p.RunOpts(name, port, labels)
}

// RunOpts is Run with more `podman run` options (e.g. "--env", "DRAIN=1s",
// or a health check: HealthArgs).
func (p *Podman) RunOpts(name string, port int, labels map[string]string, opts ...string) error {
	args := []string{"run", "-d", "--name", p.Prefix + name, "--network=host"}
	args = append(args, opts...)
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, p.Image, "/testserver", fmt.Sprint(port), name)
	_, err := p.cmd(args...)
	return err
}

// HealthArgs are the `podman run` options of a health check on the test
// server's /healthz that turns unhealthy at its first failure. Without
// systemd, Podman runs no checks by itself: run one with HealthCheck.
func HealthArgs(port int) []string {
	// the exec form: the image has no shell for CMD-SHELL
	return []string{"--health-cmd", fmt.Sprintf(`["/testserver", "check", "%d"]`, port), "--health-retries", "1", "--health-interval", "1h"}
}

// HealthCheck runs a container's health check once (`podman healthcheck
// run`); the error says why it did not pass.
func (p *Podman) HealthCheck(name string) error {
	out, err := p.cmd("healthcheck", "run", p.Prefix+name)
	if err != nil {
		return fmt.Errorf("%v (%s)", err, out)
	}
	return nil
}

// Stop stops a container with a 5 s grace period: StopGrace(name, 5s).
func (p *Podman) Stop(name string) error {
	return p.StopGrace(name, 5*time.Second)
}

// StopGrace stops a container (`podman stop -t`): SIGTERM, then SIGKILL
// once grace (whole seconds) has passed. The test server exits at once on
// SIGTERM unless it runs with DRAIN set.
func (p *Podman) StopGrace(name string, grace time.Duration) error {
	_, err := p.cmd("stop", "-t", fmt.Sprint(int(grace/time.Second)), p.Prefix+name)
	return err
}

// Signal sends sig to a container's process (`podman kill -s`); Podman
// reports it in a kill event at once, which `podman stop` does not.
func (p *Podman) Signal(name, sig string) error {
	_, err := p.cmd("kill", "-s", sig, p.Prefix+name)
	return err
}

// Kill kills a container with SIGKILL.
func (p *Podman) Kill(name string) error {
	_, err := p.cmd("kill", p.Prefix+name)
	return err
}

// Remove removes a container, running or not.
func (p *Podman) Remove(name string) error {
	_, err := p.cmd("rm", "-f", "-t", "0", p.Prefix+name)
	return err
}

// Wrapper writes an executable named podman into dir that runs podman
// on this instance (its storage and config), so that a script written for
// a plain `podman` (a doc's recipe) runs against it with dir first in
// PATH.
func (p *Podman) Wrapper(dir string) error {
	var env string
	for _, kv := range p.env {
		if strings.HasPrefix(kv, "CONTAINERS_CONF=") {
			env = "export " + kv + "\n"
		}
	}
	script := fmt.Sprintf("#!/bin/sh\n%sexec %s --root %s --runroot %s \"$@\"\n", env, p.bin,
		filepath.Join(p.Dir, "root"), filepath.Join(p.Dir, "run"))
	return os.WriteFile(filepath.Join(dir, "podman"), []byte(script), 0o755)
}

// RemoveAll removes every container of this instance.
func (p *Podman) RemoveAll() {
	_, _ = p.cmd("rm", "-af", "-t", "0")
}

// Close removes the containers and the image, stops the service and
// deletes the directory.
func (p *Podman) Close() {
	p.RemoveAll()
	_, _ = p.cmd("rmi", "-af")
	p.KillService()
	_ = syscall.Unmount(filepath.Join(p.Dir, "root", "overlay"), syscall.MNT_DETACH)
	_ = os.RemoveAll(p.Dir)
}

var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Get fetches url on a fresh connection; it returns the status and body.
func Get(url string) (int, string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Expect is a condition for Eventually: url answers status, with body
// unless body is "".
func Expect(url string, status int, body string) func() string {
	return func() string {
		code, b, err := Get(url)
		if err != nil {
			return err.Error()
		}
		if code != status || (body != "" && b != body) {
			return fmt.Sprintf("GET %s = %d %q, want %d %q", url, code, b, status, body)
		}
		return ""
	}
}

// Eventually polls cond until it returns "" (the engine's changes reach
// the gateway asynchronously) and fails tb with cond's last answer when
// timeout passes first.
func Eventually(tb interface {
	Helper()
	Fatalf(format string, args ...any)
}, what string, timeout time.Duration, cond func() string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("%s: not reached within %s; last: %s", what, timeout, last)
}
