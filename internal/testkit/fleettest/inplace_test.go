package fleettest

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
)

// The in-place restart method docs/operations.md documents: the
// listening socket belongs to the service manager (systemd's socket
// activation: gateway.socket), the gateway serves it as Caddy's fd/3
// address, and a restart or an upgrade (a new binary, then `systemctl
// restart`) stops the old process and starts the new one on the same
// socket. Connections that arrive meanwhile wait in the socket's backlog:
// none is refused. The test holds the socket as systemd does.

const inPlaceRate = 200 // requests per second, each on a new connection

// TestInPlaceRestartAndUpgrade: a client at 200 req/s opening a new
// connection per request, straight to the gateway (no balancer): a
// restart of the gateway, then an upgrade to another binary, refuse no
// connection and answer nothing wrong. With the fast path's apigate
// listener wrapper (the reference configs') no request fails either: the
// fast path answers a new connection's first request during a shutdown.
// On Caddy's own server (no wrapper), requests that fail are logged: see
// the note at the end.
func TestInPlaceRestartAndUpgrade(t *testing.T) {
	bin := gatewayBinary(t)
	// the "new version": another file (the upgrade replaces the binary)
	upgraded := filepath.Join(t.TempDir(), "caddy-new")
	copyFile(t, bin, upgraded)
	for _, wrapper := range []bool{true, false} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			testInPlace(t, bin, upgraded, wrapper)
		})
	}
}

func testInPlace(t *testing.T, bin, upgraded string, wrapper bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	admin := freeport.Ports(t, 1)[0]
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	home := t.TempDir()
	start := func(bin string) *gatewayProc {
		p := runGatewayFiles(t, bin, "in-place", home, nil, []*os.File{sock},
			drainConfig(admin, port, 500*time.Millisecond, wrapper, "fd/3"), base+"/ready")
		// (the adapter's report, logged before the process serves: the
		// wrapper is on the fd/3 server, whose options are keyed by that
		// address, not by the port)
		if b, _ := os.ReadFile(p.log); wrapper != strings.Contains(string(b), "fast path on for server") {
			t.Fatalf("the fast path is not as wanted (%v) on the fd/3 server:\n%s", wrapper, b)
		}
		return p
	}
	p := start(bin)
	load := startRate(base+"/api", inPlaceRate, false, func(code int, body string) bool { return code == 200 && body == "api" })
	defer load.stop()
	time.Sleep(500 * time.Millisecond)
	for _, step := range []struct{ name, bin string }{{"restart", bin}, {"upgrade", upgraded}} {
		t0 := time.Now()
		p.stop(t)
		p = start(step.bin)
		t.Logf("%s: the new process answers /ready %v after the old one's SIGTERM", step.name, time.Since(t0).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	load.stop()
	t.Logf("restart and upgrade in place under %d req/s (a new connection each): %s", inPlaceRate, load.summary())
	load.mu.Lock()
	refused, failed, wrong := len(load.refused), len(load.failed), len(load.wrong)
	load.mu.Unlock()
	if refused+wrong > 0 {
		t.Fatalf("connections refused or wrong answers: %s", load.summary())
	}
	switch {
	case failed > 0 && wrapper:
		t.Fatalf("requests failed through the fast path: %q", load.failed)
	case failed > 0:
		// Known, on Caddy's own server (docs/operations.md): Go's
		// net/http server closes, unanswered, a connection whose first
		// request it reads after Shutdown began (server.go: "if
		// c.server.shuttingDown() { return }" after readRequest): one
		// accepted in the instant before the old process's Shutdown gets
		// EOF. The fast path serves that request (newConnGrace).
		t.Logf("KNOWN: %d of %d requests got EOF at the old process's Shutdown: %q", failed, load.sent, load.failed)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
