package ctl

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apigate/gateway/caddyaudit/auditchain"
)

// writeTrail writes a chain of events as the gateway's file sink does:
// chain_start, requests, a checkpoint after every 3 requests and a final
// checkpoint. It returns the lines.
func writeTrail(t *testing.T, priv ed25519.PrivateKey, chain string, requests int) []string {
	t.Helper()
	keyID := auditchain.KeyID(priv.Public().(ed25519.PublicKey))
	var lines []string
	prev := auditchain.Genesis
	add := func(ev map[string]any) {
		seq := len(lines)
		ev["chain"], ev["seq"] = chain, seq
		ev["time"] = fmt.Sprintf("2026-12-01T10:00:%02dZ", seq%60)
		if ev["request_id"] == nil {
			ev["request_id"] = fmt.Sprintf("%s-%d", chain, seq)
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		canon, err := auditchain.Canonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		ev["hash"] = auditchain.Link(prev, canon)
		prev = ev["hash"].(string)
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(line))
	}
	checkpoint := func(final bool) {
		last := len(lines) - 1
		sig := ed25519.Sign(priv, auditchain.CheckpointMessage(chain, uint64(last), prev))
		ev := map[string]any{"kind": auditchain.KindCheckpoint, "key_id": keyID, "last_seq": last,
			"last_hash": prev, "signature": base64.StdEncoding.EncodeToString(sig)}
		if final {
			ev["final"] = true
		}
		add(ev)
	}
	add(map[string]any{"kind": auditchain.KindStart, "node": "gw-test", "key_id": keyID})
	for i := 1; i <= requests; i++ {
		add(map[string]any{"request_id": fmt.Sprintf("req-%d", i), "route": "orders", "method": "GET",
			"host": "api.example.com", "path": "/orders", "status": 200, "duration_ms": 0.5, "remote_ip": "192.0.2.1",
			"subject": "alice", "roles": []string{"reader"}, "decision": "allow", "reason": "", "bytes_out": 10 * i})
		if i%3 == 0 {
			checkpoint(false)
		}
	}
	checkpoint(true)
	return lines
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAuditKeygenAndVerify(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	out, err := runOut(t, "audit", "keygen", "-out", keys)
	if err != nil {
		t.Fatal(err)
	}
	keyPath, pubPath := filepath.Join(keys, "audit.key"), filepath.Join(keys, "audit.pub")
	st, err := os.Stat(keyPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit.key: %v, %v; want mode 0600", st, err)
	}
	priv, err := auditchain.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := auditchain.LoadPublicKey(pubPath)
	if err != nil || !pub.Equal(priv.Public()) {
		t.Fatalf("audit.pub: %v, or not the public half of audit.key", err)
	}
	keyID := auditchain.KeyID(pub)
	if !strings.Contains(out, keyPath) || !strings.Contains(out, "key id "+keyID) {
		t.Errorf("keygen printed %q; want the key's path and id %s", out, keyID)
	}

	// A second keygen keeps the key.
	before, _ := os.ReadFile(keyPath)
	out, err = runOut(t, "audit", "keygen", "--out", keys)
	after, _ := os.ReadFile(keyPath)
	if err != nil || !bytes.Equal(before, after) || !strings.Contains(out, keyPath) || !strings.Contains(out, "not overwritten") {
		t.Fatalf("second keygen: %q, %v; the key must be kept and its path printed", out, err)
	}

	const chain = "0123456789abcdef"
	lines := writeTrail(t, priv, chain, 7)
	trail := filepath.Join(dir, "audit.jsonl")
	writeLines(t, trail, lines)

	for _, args := range [][]string{
		{"-key", pubPath, trail},
		{"--key", keyPath, "--require-final", trail}, // the private key file works too
		{trail, "--require-final", "-key", pubPath},  // flags after the file
		{"-key", pubPath, "--", trail},
	} {
		out, err := runOut(t, append([]string{"audit", "verify"}, args...)...)
		if err != nil {
			t.Fatalf("verify %q: %v", args, err)
		}
		// 7 requests, checkpoints after 3 and 6, final: 11 events.
		for _, want := range []string{"CHAIN", chain, "gw-test", " 11 ", "0-10", " 3 ", " 9 ", "yes",
			"ok: 1 chain verified with key " + keyID, "duplicates skipped: 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("verify %q printed\n%s\nwant %q in it", args, out, want)
			}
		}
	}

	// Two files (a rotated trail), the second on stdin, with a duplicate.
	first := filepath.Join(dir, "audit-1.jsonl")
	writeLines(t, first, lines[:5])
	stdin = strings.NewReader(strings.Join(append([]string{lines[4]}, lines[5:]...), "\n"))
	defer func() { stdin = os.Stdin }()
	out, err = runOut(t, "audit", "verify", "-key", pubPath, "-require-final", first, "-")
	if err != nil || !strings.Contains(out, "duplicates skipped: 1") {
		t.Fatalf("verify of two parts: %q, %v", out, err)
	}

	// A cut trail verifies, but says what is not signed; -require-final
	// refuses it.
	writeLines(t, trail, lines[:6])
	out, err = runOut(t, "audit", "verify", "-key", pubPath, trail)
	if err != nil || !strings.Contains(out, " no ") || !strings.Contains(out, "note: not signed yet: 1 event after the last checkpoint") {
		t.Fatalf("verify of a cut trail: %q, %v", out, err)
	}
	_, err = runOut(t, "audit", "verify", "-key", pubPath, "-require-final", trail)
	if err == nil || !strings.Contains(err.Error(), trail+": line 6: chain "+chain+": no final checkpoint") {
		t.Fatalf("-require-final on a cut trail: %v", err)
	}
}

func TestAuditVerifyFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := runOut(t, "audit", "keygen", "-out", dir); err != nil {
		t.Fatal(err)
	}
	priv, err := auditchain.LoadPrivateKey(filepath.Join(dir, "audit.key"))
	if err != nil {
		t.Fatal(err)
	}
	pubPath := filepath.Join(dir, "audit.pub")
	const chain = "fedcba9876543210"
	lines := writeTrail(t, priv, chain, 7)
	trail := filepath.Join(dir, "audit.jsonl")

	// A denial rewritten as an allowed request: line 3 is seq 2.
	altered := append([]string(nil), lines...)
	altered[2] = strings.Replace(altered[2], `"status":200`, `"status":403`, 1)
	writeLines(t, trail, altered)
	out, err := runOut(t, "audit", "verify", "-key", pubPath, trail)
	var ve *auditchain.VerifyError
	if !errors.As(err, &ve) || ve.Line != 3 || ve.Seq != 2 {
		t.Fatalf("verify of an altered trail: %v (output %q); want a VerifyError for line 3, seq 2", err, out)
	}
	want := trail + ": line 3: chain " + chain + ": seq 2 altered: hash does not match content"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q\nwant it to start with %q", err, want)
	}

	// A deleted line.
	writeLines(t, trail, append(append([]string(nil), lines[:4]...), lines[5:]...))
	_, err = runOut(t, "audit", "verify", "-key", pubPath, trail)
	if err == nil || err.Error() != trail+": line 5: chain "+chain+": seq 4 missing (line 5 has seq 5)" {
		t.Errorf("verify with a deleted line: %v", err)
	}

	// Another key.
	other := filepath.Join(dir, "other")
	if _, err := runOut(t, "audit", "keygen", "-out", other); err != nil {
		t.Fatal(err)
	}
	writeLines(t, trail, lines)
	_, err = runOut(t, "audit", "verify", "-key", filepath.Join(other, "audit.pub"), trail)
	if err == nil || !strings.Contains(err.Error(), "line 1: chain "+chain+": the chain was started for key") {
		t.Errorf("verify with another key: %v", err)
	}
}

func TestAuditUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit"}, "audit needs keygen, verify, tail or count"},
		{[]string{"audit", "sign"}, `unknown audit command "sign"`},
		{[]string{"audit", "keygen"}, "usage: gatewayctl audit keygen -out DIR"},
		{[]string{"audit", "verify", "x.jsonl"}, "usage: gatewayctl audit verify -key"},
		{[]string{"audit", "verify", "-key", filepath.Join(dir, "k.pem")}, "usage: gatewayctl audit verify -key"},
		{[]string{"audit", "verify", "-key", filepath.Join(dir, "k.pem"), "x.jsonl"}, "no such file"},
		{[]string{"audit", "verify", "-bogus"}, "flag provided but not defined: -bogus"},
	} {
		if _, err := runOut(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error containing %q", c.args, err, c.want)
		}
	}
	out, err := runOut(t, "audit", "help")
	if err != nil || !strings.Contains(out, "-require-final") || !strings.Contains(out, "Exit status") {
		t.Errorf("audit help: %q, %v", out, err)
	}
}
