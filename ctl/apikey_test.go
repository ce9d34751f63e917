package ctl

import (
	"bytes"
	"os"
	"path/filepath"
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
	err := run([]string{"apikey", "new", "--sub", "ci-bot", "--roles", "deploy,read", "--scope", "orders:read orders:write", "--expires", "720h", "--id", "ci-1", "--plan", "pro"}, &out)
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
	if e.ID != "ci-1" || e.Sub != "ci-bot" || strings.Join(e.Roles, ",") != "deploy,read" || e.Scope != "orders:read orders:write" || e.Plan != "pro" {
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
		{"bad plan", []string{"new", "--sub", "s", "--plan", "pro plan"}, `invalid plan "pro plan"`},
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

// TestAPIKeyNewFile: --file creates the keys file, appends to it
// atomically keeping its mode, and each printed key authenticates
// against the file as the api_key handler reads it; an id already in the
// file, or a file that does not load, is refused with the file unchanged.
func TestAPIKeyNewFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.json")
	newKey := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(append([]string{"apikey", "new", "--file", file}, args...), &out)
		key, _, _ := strings.Cut(strings.TrimPrefix(out.String(), "key (shown once; give it to the client): "), "\n")
		return key, err
	}
	first, err := newKey("--sub", "ci-bot", "--roles", "deploy", "--id", "ci-1")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new keys file: %v, %v; want mode 0600", fi, err)
	}
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	second, err := newKey("--sub", "reports", "--scope", "orders:read")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	set, err := apikeys.Parse(data)
	if err != nil {
		t.Fatalf("keys file does not load: %v\n%s", err, data)
	}
	if set.Len() != 2 {
		t.Fatalf("%d keys in the file, want 2:\n%s", set.Len(), data)
	}
	for key, sub := range map[string]string{first: "ci-bot", second: "reports"} {
		if e, err := set.Check(key, time.Now()); err != nil || e.Sub != sub {
			t.Errorf("key of %s: %v, %+v", sub, err, e)
		}
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v after the append, want 0640 kept", fi.Mode().Perm())
	}

	for _, tc := range []struct {
		name string
		file string // "" keeps the file of the steps above
		args []string
		want string
	}{
		{"duplicate id", "", []string{"--sub", "x", "--id", "ci-1"}, `id "ci-1" is already in the keys file`},
		{"broken file", `[{"id":"a","hash":"sha256:` + strings.Repeat("0", 64) + `","sub":"s","role":["x"]}]`, []string{"--sub", "x"}, `entry 1 (id "a"): unknown field "role" (did you mean "roles"?)`},
		{"a single entry", `{"id":"a","hash":"sha256:` + strings.Repeat("0", 64) + `","sub":"s"}`, []string{"--sub", "x"}, `single object: put it in [ ]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file != "" {
				if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(file)
			key, err := newKey(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, file, tc.want)
			}
			if key != "" {
				t.Errorf("a key was printed for an entry that is not in the file: %q", key)
			}
			if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
				t.Errorf("the file changed:\n%s", after)
			}
		})
	}
}
