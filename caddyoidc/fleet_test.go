package caddyoidc_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/oidcop"
)

// fleet ports: gateways 20621 and 20622, admin 2981 and 2982.
func fleetURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 20621+i) }

// buildGateway builds the gateway binary (every module, with go build) once.
func buildGateway(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("FLEET_CADDY"); b != "" {
		return b
	}
	// bin/caddy (build/build.sh, as CI builds it) when it has oidc_login
	if b, err := filepath.Abs("../bin/caddy"); err == nil {
		if out, err := exec.Command(b, "list-modules").Output(); err == nil && strings.Contains(string(out), "http.handlers.oidc_login") {
			return b
		}
	}
	out := filepath.Join(t.TempDir(), "gateway")
	cmd := exec.Command("go", "build", "-o", out, "./internal/testkit/fleettest/fleetcaddy")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// runGateway runs one gateway of the fleet until the test ends.
func runGateway(t *testing.T, bin string, i int, natsURL, issuer string) {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	storage nats %s {
		bucket oidc_fleet_test
		timeout 1s
		local_copy %s/local
	}
}

http://127.0.0.1:%d {
	oidc_login {
		issuer %s
		client_id gateway
		client_secret %s
	}
	respond "hello {http.auth.user.id} from %d"
}
`, 2981+i, 20631+i, 20641+i, strings.ReplaceAll(natsURL, ",", " "), dir, 20621+i, issuer, clientSecret, i)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/data", "XDG_CONFIG_HOME="+dir+"/config")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("gateway %d log:\n%s", i, b)
		}
	})
	eventually(t, fmt.Sprintf("gateway %d up", i), 60*time.Second, func() bool {
		resp, err := http.Get(fleetURL(i) + "/probe")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 401
	})
}

func eventually(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not after %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func status(t *testing.T, u, cookie string, header map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Cookie", "gateway_session="+cookie)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestFleet runs two gateway processes sharing `storage nats` on a real
// NATS server: a login through A is a session on B; a logout through A is
// refused by B within a second; sessions B holds keep working while NATS
// is down, and a login during the outage works on its gateway and
// reaches the other once NATS is back (docs/oidc.md, "NATS outage").
func TestFleet(t *testing.T) {
	o := provider(t)
	bin := buildGateway(t)
	nats := natstest.StartCluster(t, 1)
	for i := range 2 {
		runGateway(t, bin, i, nats.URL(), o.Issuer)
	}
	a, b := fleetURL(0), fleetURL(1)

	br := oidcop.NewBrowser()
	at, code, body, err := br.Login(a+"/app", o.Username(), oidcop.Password)
	if err != nil || code != 200 || body != "hello id1 from 0" {
		t.Fatalf("login through A: at %v %d %q %v", at, code, body, err)
	}
	cookie := ""
	for _, c := range br.Jar.Cookies(at) {
		if c.Name == "gateway_session" {
			cookie = c.Value
		}
	}
	if s := status(t, b+"/x", cookie, nil); s != 200 {
		t.Fatalf("the session through B: %d", s)
	}
	// logout through A; B holds the session in its cache
	req, _ := http.NewRequest(http.MethodPost, a+"/oauth2/logout", nil)
	req.Header.Set("Cookie", "gateway_session="+cookie)
	req.Header.Set("Origin", a)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || resp.StatusCode != 303 {
		t.Fatalf("logout through A: %v %v", resp, err)
	}
	resp.Body.Close()
	took := eventually(t, "B refuses the logged-out session", time.Second, func() bool { return status(t, b+"/x", cookie, nil) == 401 })
	t.Logf("B refused the session %s after the logout through A", took)

	// a NATS outage: the session B holds keeps working; a new login
	// through A works (its storage queues the writes)
	br = oidcop.NewBrowser()
	at, _, _, err = br.Login(a+"/app", o.Username(), oidcop.Password)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range br.Jar.Cookies(at) {
		if c.Name == "gateway_session" {
			cookie = c.Value
		}
	}
	if s := status(t, b+"/x", cookie, nil); s != 200 {
		t.Fatalf("the second session through B: %d", s)
	}
	nats.ShutdownAll()
	for range 3 {
		if s := status(t, b+"/x", cookie, nil); s != 200 {
			t.Fatalf("a session B holds, during the NATS outage: %d", s)
		}
	}
	br = oidcop.NewBrowser()
	_, code, body, err = br.Login(a+"/during-outage", o.Username(), oidcop.Password)
	if err != nil || code != 200 {
		t.Fatalf("a login during the NATS outage: %d %q %v", code, body, err)
	}
	outage := ""
	for _, c := range br.Jar.Cookies(at) {
		if c.Name == "gateway_session" {
			outage = c.Value
		}
	}
	if s := status(t, a+"/x", outage, nil); s != 200 {
		t.Fatalf("the outage's session on A: %d", s)
	}
	nats.RestartAll()
	eventually(t, "B serves the session made during the outage", 60*time.Second, func() bool { return status(t, b+"/x", outage, nil) == 200 })
}
