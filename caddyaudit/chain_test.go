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
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

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

// TestChainRealRun runs the gateway with a chained file sink through a
// config reload (same key: the chain goes on) and a stop (a final
// checkpoint), verifies the file it wrote, then deletes, edits and swaps
// lines of it: each is caught, naming the line.
//
// It runs on both request paths (Caddy's and the fast path), each with a
// key and trail of its own, and compares the responses, the request
// events in the trail (their chain fields apart), what the verification
// reports (but the number of checkpoints, which depends on the time) and
// what each tampering was caught as.
func TestChainRealRun(t *testing.T) {
	pathtest.Run(t, testChainRealRun)
}

func testChainRealRun(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
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
	tester := p.Load(t, 2904, config("one"), "srv0")
	get := func(i int) {
		resp, err := tester.Client.Get(fmt.Sprintf("http://127.0.0.1:19404/r/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, fmt.Sprintf("GET /r/%d", i), pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
	}
	for i := 0; i < 30; i++ {
		get(i)
	}
	// a periodic checkpoint is in the trail before the reload (the
	// report below wants one besides the final one)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(trail)
		if bytes.Contains(b, []byte(`"kind":"checkpoint"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in the trail after 10s (checkpoint_interval 100ms):\n%s", b)
		}
	}
	p.Reload(t, config("two"), "srv0")
	for i := 30; i < 60; i++ {
		get(i)
	}
	p.Reload(t, `{
	admin localhost:2904
	http_port 19430
	https_port 19431
}
:19404 {
	respond "no audit"
}
`, "srv0") // the chain's last config goes: final checkpoint, sinks drained

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
	rec.Add(p, "report", map[string]any{"chains": len(rep.Chains), "events but checkpoints": c.Events - c.Checkpoints,
		"final": c.Final, "unsigned": c.Unsigned, "duplicates": rep.Duplicates, "unchained": rep.Unchained})
	n := 0
	for _, ev := range pathtest.ReadEvents(t, trail) {
		if ev.Kind == "" {
			rec.Add(p, fmt.Sprintf("event %d", n), pathtest.Event(ev))
			n++
		}
	}

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
			rec.Add(p, p.Key(t), map[string]any{"caught": errors.As(err, &ve), "about": strings.Contains(fmt.Sprint(err), tc.want)})
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
