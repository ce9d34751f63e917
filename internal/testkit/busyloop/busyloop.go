// Package busyloop keeps every CPU busy beside a test, as a loaded CI
// machine or a crowded host does: the fleet tests run their timing
// (leases, lease waits, reads a moment too early) under it in CI, where a
// timing assumption must fail rather than in a user's fleet.
//
// It starts one spinning process per CPU (pinned to it with taskset when
// that exists), each in a process group of its own, and stops them when
// the test ends. It is on when CI=true or GATEWAY_BUSY_LOOPS=1, off
// otherwise (a developer's run stays fast); GATEWAY_BUSY_LOOPS=0 turns it
// off in CI too.
package busyloop

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

// On reports whether the busy loops run: CI=true or
// GATEWAY_BUSY_LOOPS=1, unless GATEWAY_BUSY_LOOPS=0.
func On() bool {
	switch os.Getenv("GATEWAY_BUSY_LOOPS") {
	case "1":
		return true
	case "0":
		return false
	}
	return os.Getenv("CI") == "true"
}

// Start starts a busy loop on each CPU until the test ends, when On.
// It returns how many it started.
func Start(t testing.TB) int {
	t.Helper()
	if !On() {
		return 0
	}
	taskset, _ := exec.LookPath("taskset")
	n := runtime.NumCPU()
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		args := []string{"sh", "-c", "while :; do :; done"}
		if taskset != "" {
			args = append([]string{taskset, "-c", strconv.Itoa(i)}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("busyloop: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	t.Cleanup(func() {
		for _, cmd := range cmds {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	t.Logf("busyloop: %d busy loops beside the test (one per CPU)", n)
	return n
}
