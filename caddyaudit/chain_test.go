package caddyaudit_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/caddyaudit/auditchain"
	"github.com/apigate/gateway/internal/caddytester"
)

// TestChainRealRun runs the gateway with a chained file sink through a
// config reload (same key: the chain goes on) and a stop (a final
// checkpoint), verifies the file it wrote, then deletes, edits and swaps
// lines of it: each is caught, naming the line.
// writeChainKey writes a new Ed25519 private key for audit's chain to
// dir/name (not ending in .key: caddytest rewrites such paths) and returns
// its public key and path.
func writeChainKey(t *testing.T, dir, name string) (ed25519.PublicKey, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, _, err := auditchain.MarshalKeys(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, path
}

func TestChainRealRun(t *testing.T) {
	dir := t.TempDir()
	pub, keyFile := writeChainKey(t, dir, "audit-key.pem")
	trail := filepath.Join(dir, "audit.jsonl")
	config := func(body string) string {
		return fmt.Sprintf(`{
	admin localhost:2904
	http_port 19430
	https_port 19431
	grace_period 1s
	audit {
		chain %s {
			checkpoint_interval 100ms
		}
		sink file %s {
			flush_interval 10ms
		}
	}
}

:19404 {
	audit chained
	respond %q
}
`, keyFile, trail, body)
	}
	tester := caddytester.Load(t, 2904, config("one"))
	get := func(i int) {
		resp, err := tester.Client.Get(fmt.Sprintf("http://127.0.0.1:19404/r/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := 0; i < 30; i++ {
		get(i)
	}
	time.Sleep(250 * time.Millisecond) // a checkpoint or two
	tester.InitServer(config("two"), "caddyfile")
	for i := 30; i < 60; i++ {
		get(i)
	}
	tester.InitServer(`{
	admin localhost:2904
	http_port 19430
	https_port 19431
}
:19404 {
	respond "no audit"
}
`, "caddyfile") // the chain's last config goes: final checkpoint, sinks drained

	b, err := os.ReadFile(trail)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := auditchain.Verify(bytes.NewReader(b), pub, auditchain.VerifyOptions{RequireFinal: true})
	if err != nil {
		t.Fatalf("the gateway's own trail does not verify: %v\n%s", err, b)
	}
	if len(rep.Chains) != 1 {
		t.Fatalf("%d chains, want 1 (a reload with the same key continues the chain)", len(rep.Chains))
	}
	c := rep.Chains[0]
	if c.Checkpoints < 2 || !c.Final || c.Unsigned != 0 || c.Events != 60+1+c.Checkpoints {
		t.Fatalf("chain report %+v: want 60 requests + start + checkpoints, final, all signed", c)
	}
	t.Logf("chain %s: %d events, %d checkpoints", c.ID, c.Events, c.Checkpoints)

	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\n")
	}
	// A request event in the middle.
	mid := -1
	for i := len(lines) / 2; i < len(lines); i++ {
		if strings.Contains(lines[i], `"path":"/r/`) && strings.Contains(lines[i+1], `"path":"/r/`) {
			mid = i
			break
		}
	}
	if mid < 0 {
		t.Fatal("no two request events in a row")
	}
	join := func(ls []string) io.Reader { return strings.NewReader(strings.Join(ls, "\n") + "\n") }
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"deleted", append(append([]string{}, lines[:mid]...), lines[mid+1:]...), "missing"},
		{"edited", func() []string {
			ls := append([]string{}, lines...)
			ls[mid] = strings.Replace(ls[mid], `"status":200`, `"status":403`, 1)
			return ls
		}(), "altered"},
		{"swapped", func() []string {
			ls := append([]string{}, lines...)
			ls[mid], ls[mid+1] = ls[mid+1], ls[mid]
			return ls
		}(), "reordered"},
		{"cut", lines[:mid], "final checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auditchain.Verify(join(tc.lines), pub, auditchain.VerifyOptions{RequireFinal: true})
			var ve *auditchain.VerifyError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a VerifyError about %q", err, tc.want)
			}
			if tc.name != "cut" && ve.Line != mid+1 && ve.Line != mid+2 {
				t.Errorf("error at line %d, want the tampered line %d (or the one after it)", ve.Line, mid+1)
			}
			t.Log(err)
		})
	}
}
