package busyloop

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartStops: with GATEWAY_BUSY_LOOPS=1 a loop spins per CPU while
// the test runs, and none is left once it ends.
func TestStartStops(t *testing.T) {
	t.Setenv("GATEWAY_BUSY_LOOPS", "1")
	var pids []int
	t.Run("loops", func(t *testing.T) {
		n := Start(t)
		if n < 1 {
			t.Fatal("no busy loop started")
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			pids = spinning(t)
			if len(pids) >= n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d spinning processes, want %d", len(pids), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(b), ") Z") {
			t.Errorf("busy loop %d still runs after its test", pid)
		}
	}
	t.Setenv("GATEWAY_BUSY_LOOPS", "0")
	if On() {
		t.Error("GATEWAY_BUSY_LOOPS=0 does not turn it off")
	}
}

// spinning returns the pids of this process's children running the loop.
func spinning(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	me := strconv.Itoa(os.Getpid())
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(stat))
		if strings.Contains(string(cmd), "while :; do :; done") && len(f) > 3 && f[3] == me {
			out = append(out, pid)
		}
	}
	return out
}
