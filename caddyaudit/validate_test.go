package caddyaudit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// TestValidateLeavesTheTrailAlone runs what `caddy validate` runs (adapt,
// then caddy.Validate: provision and clean up, no start) on a config with
// a chained file sink, a second file sink and a spool directory: the
// existing trail is byte for byte unchanged, and no file or directory is
// created.
func TestValidateLeavesTheTrailAlone(t *testing.T) {
	dir := t.TempDir()
	_, keyFile := writeChainKey(t, dir, "audit-key.pem")
	trail := filepath.Join(dir, "audit.jsonl")
	before := []byte(`{"kind":"an earlier run's event"}` + "\n")
	if err := os.WriteFile(trail, before, 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "new", "other.jsonl")
	spool := filepath.Join(dir, "spool")
	caddyfile := fmt.Sprintf(`{
	admin off
	audit {
		spool_dir %s
		chain %s {
			checkpoint_interval 10ms
		}
		sink file %s {
			flush_interval 10ms
		}
		sink file %s
	}
}

:19409 {
	audit validated
	respond "ok"
}
`, spool, keyFile, trail, other)
	cfgJSON, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Logf("adapt warnings: %v", warnings)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := caddy.Validate(&cfg); err != nil {
			t.Fatalf("validate: %v", err)
		}
	}
	after, err := os.ReadFile(trail)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Errorf("validate changed the audit trail:\nbefore: %q\nafter:  %q", before, after)
	}
	for _, p := range []string{other, filepath.Dir(other), spool} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("validate created %s (stat: %v)", p, err)
		}
	}

	// A config that does not validate (a missing chain key) says why.
	bad := cfg
	cfgJSON2, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(bytes.Replace([]byte(caddyfile), []byte(keyFile), []byte(keyFile+".missing"), 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cfgJSON2, &bad); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&bad); err == nil || !bytes.Contains([]byte(err.Error()), []byte("chain key")) {
		t.Errorf("validate with a missing chain key: %v, want an error naming the chain key", err)
	}
}
