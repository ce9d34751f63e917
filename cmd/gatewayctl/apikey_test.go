package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/caddyapikey/apikeys"
)

// TestAPIKeyNew: the printed key authenticates against a keys file made of
// the printed entry, read by the code the api_key handler uses, with the
// subject, roles, scope and expiry asked for.
func TestAPIKeyNew(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"apikey", "new", "--sub", "ci-bot", "--roles", "deploy,read", "--scope", "orders:read orders:write", "--expires", "720h", "--id", "ci-1"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "key (shown once; give it to the client): ") {
		t.Fatalf("output:\n%s", out.String())
	}
	key := strings.TrimPrefix(lines[0], "key (shown once; give it to the client): ")
	entry := lines[2]
	if strings.Contains(entry, key[len("gk_ci-1_"):]) {
		t.Fatal("the keys file entry holds the key's secret")
	}
	set, err := apikeys.Parse([]byte("[" + entry + "]"))
	if err != nil {
		t.Fatalf("entry %s does not load: %v", entry, err)
	}
	now := time.Now()
	e, err := set.Check(key, now)
	if err != nil {
		t.Fatalf("printed key refused: %v", err)
	}
	if e.ID != "ci-1" || e.Sub != "ci-bot" || strings.Join(e.Roles, ",") != "deploy,read" || e.Scope != "orders:read orders:write" {
		t.Fatalf("entry %+v", e)
	}
	if d := e.ExpiresAt().Sub(now); d < 719*time.Hour || d > 721*time.Hour {
		t.Fatalf("expires in %s, want 720h", d)
	}
	if _, err := set.Check(key, now.Add(721*time.Hour)); err != apikeys.ErrExpired {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestAPIKeyNewErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no sub", []string{"new"}, "--sub is required"},
		{"bad expires", []string{"new", "--sub", "s", "--expires", "soon"}, `invalid --expires "soon"`},
		{"bad id", []string{"new", "--sub", "s", "--id", "a_b"}, `invalid key id "a_b"`},
		{"extra arg", []string{"new", "--sub", "s", "x"}, `unexpected argument "x"`},
		{"unknown command", []string{"old"}, `unknown apikey command "old"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(append([]string{"apikey"}, tc.args...), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
