package fleettest

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// The HAProxy config docs/operations.md recommends for a rolling restart
// is testdata/haproxy.cfg, shown there verbatim (TestHAProxyConfigInDocs).
// The test runs it with only its addresses changed (haproxyConfig) and a
// stats socket added to the global section, through which the test sees
// what HAProxy thinks of each gateway; nothing else.

// haproxyBinary is Debian's haproxy (scripts/install-deps test installs
// it); without it the test skips loudly, or fails under CI=true.
func haproxyBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("haproxy is not installed (scripts/install-deps test installs it)")
	}
	t.Skip("SKIPPED LOUDLY: haproxy is not installed; apt-get install haproxy (scripts/install-deps test)")
	return ""
}

// haproxyConfig is testdata/haproxy.cfg with the documented addresses
// replaced by the test's loopback ports (http: the frontend's port;
// gw[i]: gateway i's HTTP port; tls, tlsGW: ports for the https
// frontend and the gateways' 443, which the test sends nothing to) and a
// stats socket at sock.
func haproxyConfig(t *testing.T, http, tls int, gw, tlsGW [2]int, sock string) string {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join("testdata", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(cfg)
	for _, r := range [][2]string{
		{"global\n", fmt.Sprintf("global\n\tstats socket %s level admin\n", sock)},
		{"bind :80\n", fmt.Sprintf("bind 127.0.0.1:%d\n", http)},
		{"bind :443\n", fmt.Sprintf("bind 127.0.0.1:%d\n", tls)},
		{"server g1 10.0.0.11:80 check\n", fmt.Sprintf("server g1 127.0.0.1:%d check\n", gw[0])},
		{"server g2 10.0.0.12:80 check\n", fmt.Sprintf("server g2 127.0.0.1:%d check\n", gw[1])},
		{"server g1 10.0.0.11:443 check port 80\n", fmt.Sprintf("server g1 127.0.0.1:%d check port %d\n", tlsGW[0], gw[0])},
		{"server g2 10.0.0.12:443 check port 80\n", fmt.Sprintf("server g2 127.0.0.1:%d check port %d\n", tlsGW[1], gw[1])},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("testdata/haproxy.cfg has %q %d times, want once: update haproxyConfig with the docs", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	if strings.Contains(s, "10.0.0.") {
		t.Fatalf("testdata/haproxy.cfg has an address haproxyConfig does not replace:\n%s", s)
	}
	return s
}

// haproxyStat is one server's line of HAProxy's `show stat`.
type haproxyStat struct {
	status string // UP, DOWN, "UP 1/2", ...
	total  int    // connections it was sent (stot)
}

// haproxyStats asks HAProxy's stats socket for backend's servers.
func haproxyStats(sock, backend string) (map[string]haproxyStat, error) {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("show stat\n")); err != nil {
		return nil, err
	}
	r := csv.NewReader(bufio.NewReader(c))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || len(rows[0]) < 18 {
		return nil, fmt.Errorf("show stat: unexpected answer %q", rows)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[strings.TrimPrefix(name, "# ")] = i
	}
	out := map[string]haproxyStat{}
	for _, row := range rows[1:] {
		if len(row) <= col["status"] || row[col["pxname"]] != backend || strings.ToUpper(row[col["svname"]]) == "BACKEND" {
			continue
		}
		var n int
		fmt.Sscan(row[col["stot"]], &n)
		out[row[col["svname"]]] = haproxyStat{status: row[col["status"]], total: n}
	}
	return out, nil
}

// TestRollingRestartBehindHAProxy: two gateway processes (a readiness
// route with gateway_ready, shutdown_delay 5s as the reference configs)
// behind a real HAProxy running the config docs/operations.md shows, and
// a steady load through HAProxy of 25 req/s each on a new connection and
// 25 req/s on kept-alive connections. A rolling restart, as the docs
// describe it (SIGTERM gateway g1, wait for its exit, start it again,
// wait until HAProxy sends to it again; then g2), refuses no connection,
// fails no request and answers nothing wrong. The same with the fast
// path's apigate listener wrapper (Caddyfile.example has it).
//
// The two run side by side: each has its own HAProxy, gateways, ports
// and directories, and most of their time is the shutdown delays.
func TestRollingRestartBehindHAProxy(t *testing.T) {
	hap := haproxyBinary(t)
	bin := gatewayBinary(t)
	// reserved at once, so the two runs' ports differ
	ports := freeport.Ports(t, 16)
	for i, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			t.Parallel()
			rollingBehindHAProxy(t, hap, bin, wrapper, ports[8*i:8*i+8])
		})
	}
}

// rollingBehindHAProxy is one run of TestRollingRestartBehindHAProxy on
// 8 free ports.
func rollingBehindHAProxy(t *testing.T, hap, bin string, wrapper bool, ports []int) {
	const delay = 5 * time.Second // the reference configs' shutdown_delay
	front, tlsFront := ports[0], ports[1]
	gw, tlsGW, admin := [2]int{ports[2], ports[3]}, [2]int{ports[4], ports[5]}, [2]int{ports[6], ports[7]}
	dir := t.TempDir()
	sock := filepath.Join(dir, "haproxy.sock")
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(t, front, tlsFront, gw, tlsGW, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(hap, "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}

	names := [2]string{"g1", "g2"}
	var procs [2]*gatewayProc
	start := func(i int) {
		t.Helper()
		base := fmt.Sprintf("http://127.0.0.1:%d", gw[i])
		procs[i] = runGateway(t, bin, names[i], drainConfig(admin[i], gw[i], delay, wrapper, ""), base+"/ready")
	}
	start(0)
	start(1)

	hlog := filepath.Join(dir, "haproxy.log")
	logf, err := os.Create(hlog)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hap, "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hdone := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(hdone) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-hdone:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-hdone
		}
		if t.Failed() {
			b, _ := os.ReadFile(hlog)
			t.Logf("haproxy log:\n%s", b)
		}
	})
	// state polls HAProxy's view of gateway i until it is want.
	state := func(i int, want string, within time.Duration) time.Duration {
		t.Helper()
		t0 := time.Now()
		podmantest.Eventually(t, "HAProxy sees "+names[i]+" "+want, within, func() string {
			st, err := haproxyStats(sock, "gateways_http")
			if err != nil {
				return err.Error()
			}
			if got := st[names[i]].status; got != want {
				return got
			}
			return ""
		})
		return time.Since(t0)
	}
	state(0, "UP", 10*time.Second)
	state(1, "UP", 10*time.Second)

	base := fmt.Sprintf("http://127.0.0.1:%d", front)
	api := func(code int, body string) bool { return code == 200 && body == "api" }
	fresh := startRate(base+"/api", 25, false, api)
	kept := startRate(base+"/api", 25, true, api)
	defer fresh.stop()
	defer kept.stop()
	time.Sleep(time.Second) // load through both gateways before the first stop

	for i := range procs {
		t0 := time.Now()
		if err := procs[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// HAProxy's view of it until it exits: out (DOWN) when?
		var down time.Duration
	wait:
		for {
			select {
			case <-procs[i].done:
				break wait
			case <-time.After(20 * time.Millisecond):
			}
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("gateway %s did not exit within 30s of SIGTERM", names[i])
			}
			if st, err := haproxyStats(sock, "gateways_http"); err == nil && down == 0 && strings.HasPrefix(st[names[i]].status, "DOWN") {
				down = time.Since(t0)
			}
		}
		exited := time.Since(t0)
		if down == 0 {
			t.Errorf("HAProxy did not take %s out before it exited (%v after SIGTERM)", names[i], exited)
		}
		start(i)
		ready := time.Since(t0)
		back := state(i, "UP", 10*time.Second)
		t.Logf("%s: HAProxy took it out %v after SIGTERM (0: not before its exit); exited %v after; /ready 200 again %v after; HAProxy sends to it again %v after",
			names[i], down.Round(time.Millisecond), exited.Round(time.Millisecond), ready.Round(time.Millisecond), (ready + back).Round(time.Millisecond))
	}
	time.Sleep(time.Second) // load through both again
	fresh.stop()
	kept.stop()
	st, err := haproxyStats(sock, "gateways_http")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new connections: %s", fresh.summary())
	t.Logf("kept-alive connections: %s", kept.summary())
	t.Logf("HAProxy connections per gateway (stot): g1 %d, g2 %d", st["g1"].total, st["g2"].total)
	for _, l := range []*rateLoad{fresh, kept} {
		if !l.clean() {
			t.Errorf("a rolling restart behind HAProxy failed requests: %s", l.summary())
		}
	}
}

// TestHAProxyConfigInDocs: docs/operations.md shows the HAProxy config
// TestRollingRestartBehindHAProxy runs, verbatim.
func TestHAProxyConfigInDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join("testdata", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```haproxy\n"+string(cfg)+"```\n") {
		t.Error("docs/operations.md does not show testdata/haproxy.cfg verbatim in a ```haproxy block")
	}
}
