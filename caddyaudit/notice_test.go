package caddyaudit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddyaudit/auditchain"
)

// TestRecordNotice: a notice (an event no request caused, as the docker
// app's canary rollback) reaches a file sink with its members at the top
// level, links into the chain (the trail verifies), shows in Recent, and
// malformed notices are refused.
func TestRecordNotice(t *testing.T) {
	dir := t.TempDir()
	pub, keyFile := writeChainKey(t, dir, "notice-key.pem")
	trail := filepath.Join(dir, "audit.jsonl")
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	app := &caddyaudit.App{
		Chain: &caddyaudit.ChainConfig{KeyFile: keyFile, CheckpointInterval: caddy.Duration(time.Hour)},
		Sinks: []caddyaudit.SinkConfig{{Type: "file", Path: trail, FlushInterval: caddy.Duration(10 * time.Millisecond)}},
	}
	if err := app.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	fields := map[string]any{"service": "orders", "canary_version": "v2", "stable_versions": []string{"v1"},
		"requests": 100, "error_rate": 100.0, "weight_before": 10}
	if err := app.RecordNotice("canary_rollback", "canary_rollback-abc", at, fields); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		kind   string
		fields map[string]any
	}{
		{"Canary Rollback", nil},
		{"checkpoint", nil},
		{"canary_rollback", map[string]any{"time": "x"}},
		{"canary_rollback", map[string]any{"nested": map[string]any{"a": 1}}},
		{"canary_rollback", map[string]any{"Bad-Name": 1}},
	} {
		if err := app.RecordNotice(bad.kind, "x", at, bad.fields); err == nil {
			t.Errorf("notice %q %v accepted", bad.kind, bad.fields)
		}
	}
	if got := caddyaudit.Recent(1); len(got) != 1 || got[0].Kind != "canary_rollback" || got[0].Notice["service"] != "orders" {
		t.Fatalf("Recent: %+v", got)
	}
	app.Cleanup() // the chain's last user: final checkpoint, sinks drained
	cancel()

	b, err := os.ReadFile(trail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auditchain.Verify(bytes.NewReader(b), pub, auditchain.VerifyOptions{RequireFinal: true}); err != nil {
		t.Fatalf("trail with a notice does not verify: %v\n%s", err, b)
	}
	var found map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if m["kind"] == "canary_rollback" {
			found = m
		}
	}
	if found == nil {
		t.Fatalf("no canary_rollback event in\n%s", b)
	}
	for k, want := range map[string]any{"service": "orders", "canary_version": "v2", "requests": 100.0,
		"error_rate": 100.0, "weight_before": 10.0, "time": "2026-12-01T10:00:00Z"} {
		if found[k] != want {
			t.Errorf("%s = %v, want %v (event %v)", k, found[k], want, found)
		}
	}
	if sv, _ := found["stable_versions"].([]any); len(sv) != 1 || sv[0] != "v1" {
		t.Errorf("stable_versions %v", found["stable_versions"])
	}
	if found["request_id"] == "" || found["hash"] == nil || found["seq"] == nil {
		t.Errorf("chain members missing: %v", found)
	}
}
