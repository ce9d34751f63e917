package apikeys

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNewAndCheck(t *testing.T) {
	key, hash, err := New("ci-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "gk_ci-1_") || len(key) != len("gk_ci-1_")+64 {
		t.Fatalf("key %q: want gk_ci-1_<64 hex>", key)
	}
	other, otherHash, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	otherID, err := SplitKey(other)
	if err != nil {
		t.Fatalf("random-id key does not split: %v", err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	file := fmt.Sprintf(`[
		{"id":"ci-1","hash":%q,"sub":"ci","roles":["deploy"],"scope":"a b","plan":"pro"},
		{"id":%q,"hash":%q,"sub":"old","expires":"2026-11-30T00:00:00Z"}
	]`, hash, otherID, otherHash)
	set, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	e, err := set.Check(key, now)
	if err != nil || e.Sub != "ci" || e.ID != "ci-1" || e.Plan != "pro" {
		t.Fatalf("valid key: %v %+v", err, e)
	}
	// the same id with another secret
	forged := key[:len(key)-1] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", key[len(key)-1])+1)%16])
	// what is malformed is said, with the format, and the key is not
	// quoted
	tests := []struct {
		name string
		key  string
		want error
		says string
	}{
		{"wrong secret", forged, ErrUnknown, "unknown key"},
		{"unknown id", strings.Replace(key, "ci-1", "ci-2", 1), ErrUnknown, "unknown key"},
		{"expired", other, ErrExpired, "key expired"},
		{"no prefix", strings.TrimPrefix(key, "gk_"), ErrMalformed, "malformed key: does not start with gk_ (a key is gk_<id>_<secret>)"},
		{"short secret", "gk_ci-1_abc", ErrMalformed, "malformed key: the <secret> is shorter than 32 characters (a key is gk_<id>_<secret>)"},
		{"bad id", "gk_c!i_" + strings.Repeat("a", 64), ErrMalformed, "malformed key: the <id> is not 1 to 64 letters, digits, '-' or '.' followed by _ (a key is gk_<id>_<secret>)"},
		{"no secret", "gk_ci-1", ErrMalformed, "the <id> is not"},
		{"bad secret char", key[:len(key)-1] + "%", ErrMalformed, "malformed key: the <secret> has a character other than a letter, digit or '-' (a key is gk_<id>_<secret>)"},
		{"too long", "gk_ci-1_" + strings.Repeat("a", MaxKeyLen), ErrMalformed, "malformed key: longer than 512 characters (a key is gk_<id>_<secret>)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := set.Check(tc.key, now)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.says)
			}
			if len(tc.key) > 20 && strings.Contains(err.Error(), tc.key[8:20]) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	h := Hash("gk_x_" + strings.Repeat("a", 64))
	tests := []struct {
		name, file, want string
	}{
		{"not json", `[{`, "not a JSON array"},
		{"syntax error, with its place", "[\n  {\"id\":\"a\",}\n]", "line 2, column 14"},
		{"empty", " \n", "empty: a keys file is a JSON array"},
		{"not an array", `"a"`, "does not start with ["},
		{"a pasted single object", `{"id":"a","hash":"` + h + `","sub":"s"}`, "single object: put it in [ ]"},
		{"unknown field", `[{"id":"a","hash":"` + h + `","sub":"s","secret":"x"}]`, `entry 1 (id "a"): unknown field "secret" (the fields are id, hash, sub, roles, scope, expires, plan)`},
		{"misspelled field", `[{"id":"a","hash":"` + h + `","sub":"s"},{"id":"b","hash":"` + h + `","sub":"s","role":["x"]}]`, `entry 2 (id "b"): unknown field "role" (did you mean "roles"?)`},
		{"roles as a string", `[{"id":"a","hash":"` + h + `","sub":"s","roles":"admin"}]`, `entry 1 (id "a"): field roles: want an array of strings, got a JSON string`},
		{"id as a number", `[{"id":7,"hash":"` + h + `","sub":"s"}]`, `entry 1 (no id): field id: want a string, got a JSON number`},
		{"entry not an object", `[{"id":"a","hash":"` + h + `","sub":"s"}, "b"]`, `entry 2: not an object`},
		{"trailing", `[] []`, "data after the array"},
		{"null entry", `[null]`, "entry 1: null"},
		{"bad id", `[{"id":"a_b","hash":"` + h + `","sub":"s"}]`, `entry 1 (id "a_b"): invalid id`},
		{"duplicate", `[{"id":"a","hash":"` + h + `","sub":"s"},{"id":"a","hash":"` + h + `","sub":"t"}]`, `entry 2 (id "a"): duplicate id`},
		{"plain hash", `[{"id":"a","hash":"abc","sub":"s"}]`, "invalid hash"},
		{"short hash", `[{"id":"a","hash":"sha256:abcd","sub":"s"}]`, "invalid hash"},
		{"non-hex hash", `[{"id":"a","hash":"sha256:` + strings.Repeat("z", 64) + `","sub":"s"}]`, "invalid hash"},
		{"no sub", `[{"id":"a","hash":"` + h + `"}]`, "sub is empty"},
		{"role with comma", `[{"id":"a","hash":"` + h + `","sub":"s","roles":["a,b"]}]`, `invalid role "a,b"`},
		{"bad expires", `[{"id":"a","hash":"` + h + `","sub":"s","expires":"tomorrow"}]`, `invalid expires "tomorrow"`},
		{"bad plan", `[{"id":"a","hash":"` + h + `","sub":"s","plan":"pro plan"}]`, `invalid plan "pro plan"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if set, err := Parse([]byte(`[]`)); err != nil || set.Len() != 0 {
		t.Fatalf("empty array: %v", err)
	}
}

func FuzzCheck(f *testing.F) {
	key, hash, _ := New("f")
	set, err := Parse([]byte(`[{"id":"f","hash":"` + hash + `","sub":"s"}]`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(key)
	f.Add("gk__")
	f.Fuzz(func(t *testing.T, k string) {
		e, err := set.Check(k, time.Now())
		if err == nil && k != key {
			t.Fatalf("accepted %q", k)
		}
		_ = e
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"id":"a","hash":"sha256:00","sub":"s"}]`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = Parse(b) })
}

// TestAppend: Append adds an entry at the end of a keys file's array,
// keeping what was there as it was written; a new file is made; a
// duplicate id or a file that does not load is refused.
func TestAppend(t *testing.T) {
	_, h1, _ := New("one")
	_, h2, _ := New("two")
	two := Entry{ID: "two", Hash: h2, Sub: "svc", Roles: []string{"reader"}}
	tests := []struct {
		name, before, after, err string
	}{
		{"no file yet", "", "[\n  " + `{"id":"two","hash":"` + h2 + `","sub":"svc","roles":["reader"]}` + "\n]\n", ""},
		{"empty array", "[]\n", "[\n  " + `{"id":"two","hash":"` + h2 + `","sub":"svc","roles":["reader"]}` + "\n]\n", ""},
		{"kept as written", "[\n    {\"id\": \"one\", \"hash\": \"" + h1 + "\", \"sub\": \"a\"}  ]  \n",
			"[\n    {\"id\": \"one\", \"hash\": \"" + h1 + "\", \"sub\": \"a\"},\n  " + `{"id":"two","hash":"` + h2 + `","sub":"svc","roles":["reader"]}` + "\n]\n", ""},
		{"duplicate id", `[{"id":"two","hash":"` + h1 + `","sub":"a"}]`, "", `id "two" is already in the keys file`},
		{"broken file", `[{"id":"one","hash":"` + h1 + `","sub":"a","role":["x"]}]`, "", `entry 1 (id "one"): unknown field "role"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Append([]byte(tc.before), two)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.after {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tc.after)
			}
			if _, err := Parse(got); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := Append(nil, Entry{ID: "bad_id", Hash: h1, Sub: "s"}); err == nil || !strings.Contains(err.Error(), "invalid id") {
		t.Fatalf("an entry that does not load: %v", err)
	}
}
