package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// podman is a private Podman: its own storage, runtime directory, config
// (runc with raised ulimits, as /work/shared/ENVIRONMENT.md says) and API
// socket, so the benchmark never touches other containers.
type podman struct {
	dir, socket, image string
	env                []string
	svc                *Proc
}

var activePodman *podman

func cleanupPodman() {
	if activePodman != nil {
		activePodman.close()
	}
}

func newPodman(ctrServer, logDir string) (*podman, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil, fmt.Errorf("podman not installed (scripts/install-deps bench)")
	}
	runc := "/usr/sbin/runc"
	if _, err := os.Stat(runc); err != nil {
		if runc, err = exec.LookPath("runc"); err != nil {
			return nil, fmt.Errorf("runc not installed (scripts/install-deps bench)")
		}
	}
	dir, err := os.MkdirTemp("", "apigate-bench-podman")
	if err != nil {
		return nil, err
	}
	p := &podman{dir: dir, socket: filepath.Join(dir, "api.sock"), image: "localhost/apigate-bench-ctr:latest"}
	activePodman = p
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
	p.env = []string{"CONTAINERS_CONF=" + filepath.Join(dir, "containers.conf")}
	// image: the static container server, imported from a tarball
	tarPath := filepath.Join(dir, "rootfs.tar")
	if err := tarFile(tarPath, ctrServer, "ctrserver"); err != nil {
		return nil, err
	}
	if _, err := p.cmd("import", "--change", `CMD ["/ctrserver"]`, tarPath, p.image); err != nil {
		return nil, err
	}
	svc, err := startPinned("podman-service", "0-1", filepath.Join(logDir, "podman-service.log"), p.env,
		"podman", "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"system", "service", "--time=0", "unix://"+p.socket)
	if err != nil {
		return nil, err
	}
	p.svc = svc
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p.socket)
		},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get("http://d/_ping"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if svc.Exited() {
			return nil, fmt.Errorf("podman system service exited: %s", svc.LogTail(10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("podman API did not answer on %s", p.socket)
}

func (p *podman) host() string { return "unix://" + p.socket }

func (p *podman) cmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--root", filepath.Join(p.dir, "root"), "--runroot", filepath.Join(p.dir, "run")}, args...)
	c := exec.CommandContext(ctx, "podman", full...)
	c.Env = append(os.Environ(), p.env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (p *podman) close() {
	_, _ = p.cmd("rm", "-af", "-t", "0")
	_, _ = p.cmd("rmi", "-af")
	if p.svc != nil {
		p.svc.Stop(3 * time.Second)
	}
	_ = syscall.Unmount(filepath.Join(p.dir, "root", "overlay"), syscall.MNT_DETACH)
	_ = os.RemoveAll(p.dir)
	activePodman = nil
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
