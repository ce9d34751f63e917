package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestRestartServesLastGoodRoutes restarts the gateway three times
// (SIGTERM) and kills it once (SIGKILL) while a real Podman container is
// routed by its labels, and sends a GET and a POST in turn from the first
// connection the new process accepts, for two seconds after each start.
// Every answer must be the service's (the last good routes, from the state
// file at once, then from the engine) or a 503 with Retry-After: never
// Caddy's empty 200, never a 404 for the routed path, never a cut
// connection. It runs on Caddy's path and on the fast path.
func TestRestartServesLastGoodRoutes(t *testing.T) {
	rec := &pathtest.Recorder{}
	for _, v := range variants[1:] {
		t.Run(v.name, func(t *testing.T) { testRestart(t, v, rec) })
	}
	rec.CompareNamed(t, "transport h1", "fast path")
}

func testRestart(t *testing.T, v variant, rec *pathtest.Recorder) {
	s, pm, stateFile := discoveryStack(t, v, func(*stack) string { return "" })
	s.start()

	port := freeport.Port(t)
	if err := pm.Run("svc", port, map[string]string{
		"gateway.enable": "true", "gateway.name": "svc", "gateway.port": fmt.Sprint(port),
		"gateway.router.api.path_prefix": "/svc", "gateway.router.api.auth.required": "false",
		"gateway.router.api.audit": "false",
	}); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, s, "/svc/x", "", 200, 30*time.Second)
	podmantest.Eventually(t, "the route in the state file", 10*time.Second, func() string {
		b, err := os.ReadFile(stateFile)
		if err != nil || !strings.Contains(string(b), "docker:gateway:svc:api") {
			return fmt.Sprintf("state file: %v", err)
		}
		return ""
	})
	resp, body := do(t, "GET", "/svc/x", "", nil)
	rec.AddNamed(v.name, "routed", clientSaw(resp, body))

	for i, kill := range []bool{false, false, false, true} {
		how := "SIGTERM"
		if kill {
			how = "SIGKILL"
		}
		s.stop(kill)
		r := restartAndProbe(t, s, 2*time.Second)
		t.Logf("restart %d (%s): first connection accepted %v after the process started; %d answers: %d from the service, %d 503; first answer %q",
			i+1, how, r.firstConn.Round(time.Millisecond), r.total, r.service, r.unavailable, r.first)
		if r.total == 0 {
			t.Fatalf("restart %d: no answer", i+1)
		}
		for _, bad := range r.bad {
			t.Errorf("restart %d (%s): %s", i+1, how, bad)
		}
		if r.first != "svc /svc/0 (GET)" {
			t.Errorf("restart %d (%s): the first request on the first accepted connection got %q, want the service's answer", i+1, how, r.first)
		}
	}
	resp, body = do(t, "GET", "/svc/x", "", nil)
	rec.AddNamed(v.name, "routed after the restarts", clientSaw(resp, body))
}

// discoveryStack is a stack (on variant v) with a private Podman and a
// docker app routing its containers to the gateway server, keeping the
// returned state file, with the further docker options docker(s) gives;
// the gateway is not started.
func discoveryStack(t *testing.T, v variant, docker func(s *stack) string) (*stack, *podmantest.Podman, string) {
	s := newStack(t)
	s.use(v)
	pm, err := podmantest.New("..", "e2e")
	pm = podmantest.Require(t, pm, err)
	t.Cleanup(pm.Close)
	stateFile := filepath.Join(s.dir, "docker-routes.json")
	s.global = fmt.Sprintf(`	docker {
		host %s
		state_file %s
		server gateway
		debounce 50ms%s
	}`, pm.Host(), stateFile, docker(s))
	return s, pm, stateFile
}

// probeResult is what the requests after one restart got.
type probeResult struct {
	firstConn                   time.Duration
	total, service, unavailable int
	first                       string
	bad                         []string
}

// restartAndProbe starts the gateway process again and, from the first
// connection it accepts, sends requests for d: a GET and a POST in turn,
// each on a new connection, the first on the first accepted connection.
func restartAndProbe(t *testing.T, s *stack, d time.Duration) probeResult {
	t.Helper()
	cmd := exec.Command(caddyBin(t), "run", "--config", filepath.Join(s.dir, "Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+s.dir, "XDG_DATA_HOME="+s.dir+"/xdg", "XDG_CONFIG_HOME="+s.dir+"/xdg")
	s.logsMu.Lock()
	s.logs.Reset()
	s.logsMu.Unlock()
	cmd.Stdout = &lockedWriter{mu: &s.logsMu, w: func() io.Writer { return s.logs }}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	addr := fmt.Sprintf("127.0.0.1:%d", gwPort)
	var conn net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway accepted no connection within 30s:\n%s", s.logText())
		}
	}
	r := probeResult{firstConn: time.Since(began)}
	end := time.Now().Add(d)
	for n := 0; n == 0 || time.Now().Before(end); n++ {
		method := "GET"
		if n%2 == 1 {
			method = "POST"
		}
		if n > 0 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				r.bad = append(r.bad, fmt.Sprintf("request %d: dial: %v", n, err))
				continue
			}
			conn = c
		}
		status, retry, body, err := rawRequest(conn, method, fmt.Sprintf("/svc/%d", n))
		conn.Close()
		r.total++
		switch {
		case err != nil:
			r.bad = append(r.bad, fmt.Sprintf("%s /svc/%d: %v", method, n, err))
		case status == 200 && body == fmt.Sprintf("svc /svc/%d", n):
			r.service++
		case status == 503 && retry != "":
			r.unavailable++
		default:
			r.bad = append(r.bad, fmt.Sprintf("%s /svc/%d: %d %q (Retry-After %q)", method, n, status, body, retry))
		}
		if n == 0 {
			r.first = fmt.Sprintf("%s (%s)", body, method)
			if err != nil {
				r.first = err.Error()
			}
		}
		time.Sleep(3 * time.Millisecond)
	}
	return r
}

// rawRequest sends one HTTP/1.1 request (a POST with a small body) on c
// and reads the answer.
func rawRequest(c net.Conn, method, path string) (status int, retryAfter, body string, err error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	payload := ""
	if method == "POST" {
		payload = `{"order":1}`
	}
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, path, gwPort, len(payload), payload); err != nil {
		return 0, "", "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err
}
