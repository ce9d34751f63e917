package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a process this tool started, in its own process group.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
}

// startPinned starts argv pinned to cpu (taskset execs the program, so
// the pid is the program's), with its output in logPath.
func startPinned(name, cpu, logPath string, env []string, argv ...string) (*Proc, error) {
	args := append([]string{"-c", cpu}, argv...)
	cmd := exec.Command("taskset", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	lf.Close()
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done); untrack(p) }()
	track(p)
	return p, nil
}

func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// LogTail returns the last lines of the process log, for error messages.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// peakRSS sums VmHWM (peak resident set) over the process and its
// descendants, in bytes.
func peakRSS(pid int) int64 {
	var total int64
	for _, p := range append([]int{pid}, descendants(pid)...) {
		total += statusKB(p, "VmHWM:") * 1024
	}
	return total
}

func statusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func descendants(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 {
			pp, _ := strconv.Atoi(f[1])
			parent[n] = pp
		}
	}
	var walk func(int)
	walk = func(p int) {
		for c, pp := range parent {
			if pp == p {
				out = append(out, c)
				walk(c)
			}
		}
	}
	walk(pid)
	return out
}

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, timeout time.Duration, p *Proc) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %s", p.Name, p.LogTail(15))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not accept connections within %s", addr, timeout)
}

// waitPortFree waits until nothing listens on addr (a stopped server's
// socket is gone).
func waitPortFree(addr string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

// plainClient makes the bench's own check requests: one connection each,
// and no verification of the bench's self-signed TLS certificate.
var plainClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

var insecureClient = plainClient

// probe makes one request and returns its status and body.
func probe(ctx context.Context, url, auth string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	setAuth(req, auth)
	resp, err := plainClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// setAuth sets a row's credential: a header line ("Authorization: Bearer
// ...", "Cookie: gateway_session=...") from Bench.authHeader.
func setAuth(req *http.Request, auth string) {
	if k, v, ok := strings.Cut(auth, ": "); ok {
		req.Header.Set(k, v)
	}
}

// waitStatus polls url until it answers want, or the deadline.
func waitStatus(url, auth string, want int, timeout time.Duration, p *Proc) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		st, body, err := probe(context.Background(), url, auth)
		if err == nil && st == want {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("status %d: %.200s", st, body)
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %s", p.Name, p.LogTail(15))
		}
		time.Sleep(25 * time.Millisecond)
	}
	return errors.New(last)
}

// sampler records the peak of a process's anonymous resident memory
// (RssAnon: heap, stacks; not the mapped binary), every 100 ms.
type sampler struct {
	quit chan struct{}
	done chan int64
	peak int64
	once bool
}

func sampleAnon(pid int) *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		var peak int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				s.done <- peak
				return
			case <-t.C:
				if a := statusKB(pid, "RssAnon:") * 1024; a > peak {
					peak = a
				}
			}
		}
	}()
	return s
}

// stop ends the sampling (idempotent) and returns the peak.
func (s *sampler) stop() int64 {
	if !s.once {
		s.once = true
		close(s.quit)
		s.peak = <-s.done
	}
	return s.peak
}

// cpuTicks returns the busy and total ticks of one CPU from /proc/stat.
func cpuTicks(cpu string) (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || f[0] != "cpu"+cpu {
			continue
		}
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
	}
	return busy, total
}

// procTicks is the CPU time (utime+stime, in ticks) of a process and its
// descendants, and of that the user time.
func procTicks(pid int) (total, user int64) {
	for _, p := range append([]int{pid}, descendants(pid)...) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			total += u + st
			user += u
		}
	}
	return total, user
}

// coreShare measures, over an interval, how much of a core the server
// under test used and how much went to everything else on that core.
type coreShare struct {
	pid               int
	busy0, total0, p0 int64
	lbusy0, ltotal0   int64 // core 0 (the load side)
	p1                int64 // the server's ticks at end
	u0, u1            int64 // of those, user time (the rest is the kernel's)
}

func startCoreShare(pid int) *coreShare {
	c := &coreShare{pid: pid}
	c.busy0, c.total0 = cpuTicks(coreGateway)
	c.lbusy0, c.ltotal0 = cpuTicks(coreLoad)
	if pid > 0 {
		c.p0, c.u0 = procTicks(pid)
	}
	return c
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// cpuSeconds is the server's CPU time (user + system, its processes and
// their children) between start and end.
func (c *coreShare) cpuSeconds() float64 { return float64(c.p1-c.p0) / clockTicks }

// userSeconds is the user-space part of cpuSeconds: the process's own
// work, where the rest is system calls and the kernel's network stack.
func (c *coreShare) userSeconds() float64 { return float64(c.u1-c.u0) / clockTicks }

// load is core 0's busy share since start (call after end).
func (c *coreShare) load() float64 {
	busy, total := cpuTicks(coreLoad)
	if total <= c.ltotal0 {
		return 0
	}
	return float64(busy-c.lbusy0) / float64(total-c.ltotal0)
}

// end returns the server's share and the others' share of the core.
func (c *coreShare) end() (ours, others float64) {
	busy, total := cpuTicks(coreGateway)
	dt := float64(total - c.total0)
	if dt <= 0 {
		return 0, 0
	}
	var p int64
	if c.pid > 0 {
		c.p1, c.u1 = procTicks(c.pid)
		p = c.p1 - c.p0
	}
	ours = float64(p) / dt
	others = float64(busy-c.busy0-p) / dt
	if others < 0 {
		others = 0
	}
	return ours, others
}
