package ctl

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain lets a test run the real command (its exit status, stdout and
// stderr): the test binary runs main when GATEWAYCTL_RUN_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAYCTL_RUN_MAIN") == "1" {
		os.Exit(Main("gatewayctl", os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// gatewayctl runs the command as a process, and returns its stdout,
// stderr and exit status.
func gatewayctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GATEWAYCTL_RUN_MAIN=1")
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

// TestHelp: every way of asking for help prints usage on stdout, nothing
// on stderr, and exits 0; the top-level usage lists every command.
func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"-h"}, "apikey new"},
		{[]string{"--help"}, "audit verify"},
		{[]string{"-help"}, "keygen -dir"},
		{[]string{"help"}, "token [flags]"},
		{[]string{"help", "token"}, "-jwks"},
		{[]string{"help", "audit", "verify"}, "-require-final"},
		{[]string{"secret", "-h"}, "usage: gatewayctl secret"},
		{[]string{"token", "-h"}, "usage: gatewayctl token"},
		{[]string{"token", "--help"}, "-kid"},
		{[]string{"keygen", "-h"}, "usage: gatewayctl keygen"},
		{[]string{"audit", "-h"}, "gatewayctl audit verify"},
		{[]string{"audit", "help"}, "gatewayctl audit keygen"},
		{[]string{"audit", "keygen", "-h"}, "-out"},
		{[]string{"audit", "verify", "--help"}, "-any-order"},
		{[]string{"apikey", "-h"}, "gatewayctl apikey new"},
		{[]string{"apikey", "new", "-h"}, "--file"},
		{[]string{"apikey", "new", "--help"}, "-expires"},
		{[]string{"fleet", "-h"}, "gatewayctl fleet init"},
		{[]string{"fleet", "init", "-h"}, "--replicas"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := gatewayctl(t, tc.args...)
			if code != 0 || stderr != "" || !strings.Contains(stdout, "usage") || !strings.Contains(stdout, tc.want) {
				t.Fatalf("exit %d, stderr %q, stdout:\n%s\nwant exit 0, usage with %q on stdout, nothing on stderr", code, stderr, stdout, tc.want)
			}
		})
	}
	stdout, _, _ := gatewayctl(t, "-h")
	for _, cmd := range []string{"secret", "token", "keygen", "audit keygen", "audit verify", "apikey new", "--file"} {
		if !strings.Contains(stdout, "  "+cmd) && !strings.Contains(stdout, cmd) {
			t.Errorf("gatewayctl -h does not list %q:\n%s", cmd, stdout)
		}
	}

	// errors: a message on stderr, nothing on stdout, exit 2
	for _, args := range [][]string{nil, {"-x"}, {"token", "-nope"}, {"apikey", "new", "--sub"}, {"help", "nope"}} {
		stdout, stderr, code := gatewayctl(t, args...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "gatewayctl: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the error on stderr", args, code, stdout, stderr)
		}
	}
}

// TestReadmeListsCommands: the README's command table has a row for
// every command the table lists (a command's subcommands each have one).
func TestReadmeListsCommands(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Commands() {
		for _, line := range strings.Split(c.Synopsis, "\n") {
			// a form: two spaces, then the command
			fields := strings.Fields(line)
			if !strings.HasPrefix(line, "  "+c.Name) || len(fields) == 0 {
				continue
			}
			cmd := fields[0]
			if len(fields) > 1 && fields[1][0] >= 'a' && fields[1][0] <= 'z' {
				cmd += " " + fields[1] // a subcommand: audit verify
			}
			if !strings.Contains(string(readme), "| `caddy gateway "+cmd) {
				t.Errorf("README.md has no row for caddy gateway %s", cmd)
			}
		}
	}
}
