package gateway

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/apigate/gateway/ctl"
)

// TestMain runs Caddy's command line (caddycmd.Main, as the built binary
// does) when GATEWAY_RUN_CADDY is set, so a test can run `caddy ...` with
// this package's commands registered, as a process.
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAY_RUN_CADDY") == "1" {
		os.Args[0] = "caddy"
		caddycmd.Main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCaddy runs `caddy args...` with the gateway's modules and commands, and
// returns its stdout, stderr and exit status.
func runCaddy(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GATEWAY_RUN_CADDY=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestCaddyGateway: every command of ctl's table is `caddy gateway
// <command>`: `caddy help gateway` lists each, each prints its usage with
// the name it was called by, and runs; an error exits 2 with the message
// on stderr, as gatewayctl does.
func TestCaddyGateway(t *testing.T) {
	stdout, stderr, code := runCaddy(t, "help", "gateway")
	if code != 0 {
		t.Fatalf("caddy help gateway: exit %d, stderr %s", code, stderr)
	}
	for _, c := range ctl.Commands() {
		if !strings.Contains(stdout, "  "+c.Name+" ") {
			t.Errorf("caddy help gateway does not list %s:\n%s", c.Name, stdout)
		}
		out, errOut, code := runCaddy(t, "gateway", c.Name, "-h")
		if code != 0 || !strings.Contains(out, "usage") || !strings.Contains(out, "caddy gateway "+c.Name) || strings.Contains(out, "gatewayctl "+c.Name) {
			t.Errorf("caddy gateway %s -h: exit %d, stderr %q, stdout:\n%s\nwant its usage, naming caddy gateway", c.Name, code, errOut, out)
		}
	}
	if stdout, _, code := runCaddy(t, "gateway", "-h"); code != 0 || !strings.Contains(stdout, "usage: caddy gateway <command>") || !strings.Contains(stdout, "  apikey new") {
		t.Errorf("caddy gateway -h: exit %d:\n%s", code, stdout)
	}

	// a command runs, with its flags after it
	stdout, stderr, code = runCaddy(t, "gateway", "apikey", "new", "--sub", "ci-bot", "--id", "ci-1")
	if code != 0 || !strings.HasPrefix(stdout, "key (shown once; give it to the client): gk_ci-1_") {
		t.Fatalf("caddy gateway apikey new: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}

	// errors: exit 2, the message on stderr naming the command as called
	stdout, stderr, code = runCaddy(t, "gateway", "apikey", "new")
	if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "caddy gateway: --sub is required") || strings.Contains(stderr, "gatewayctl") {
		t.Errorf("caddy gateway apikey new without --sub: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, stderr, code = runCaddy(t, "gateway", "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("caddy gateway frobnicate: exit %d, stderr %q", code, stderr)
	}
}
