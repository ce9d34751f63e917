package caddypermcache

import (
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestParseKeyTemplate(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		phs     []string
		wantErr string
	}{
		{"default", DefaultKey, []string{"http.auth.user.id", "http.request.method", "http.request.uri.path"}, ""},
		{"header", "{http.request.header.X-Tenant}:{http.request.uri.path}", []string{"http.request.header.X-Tenant", "http.request.uri.path"}, ""},
		{"escaped braces", `\{lit\} {http.request.method}`, []string{"http.request.method"}, ""},
		{"empty", "  ", nil, "empty key template"},
		{"no placeholder", "static", nil, "has no placeholder"},
		{"unclosed", "{http.request.method", nil, "unclosed placeholder"},
		{"empty placeholder", "a {} b", nil, "empty placeholder"},
		{"nested", "{a{b}}", nil, "invalid placeholder name"},
		{"stray close", "a} {b}", nil, "unmatched '}'"},
		{"too long", "{a}" + strings.Repeat("x", MaxKeyTemplateLen), nil, "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := ParseKeyTemplate(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tmpl.Placeholders(); !reflect.DeepEqual(got, tc.phs) {
				t.Fatalf("placeholders = %q, want %q", got, tc.phs)
			}
			if tmpl.String() != tc.in {
				t.Fatalf("String() = %q", tmpl.String())
			}
		})
	}
}

func TestKeyEncodingIsInjective(t *testing.T) {
	tmpl, err := ParseKeyTemplate(DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	// the naive concatenation of these is "bob GET /x GET /y" for both
	a := tmpl.Render("bob", "GET", "/x GET /y")
	b := tmpl.Render("bob GET /x", "GET", "/y")
	if a == b {
		t.Fatal("different subjects and paths share a key")
	}
	if !strings.HasPrefix(a, tmpl.Prefix("bob")) || strings.HasPrefix(b, tmpl.Prefix("bob")) {
		t.Fatal("Prefix(subject) does not select exactly that subject's keys")
	}
	noSep, _ := ParseKeyTemplate("{http.auth.user.id}{http.request.uri.path}")
	if noSep.Render("alice/admin", "/x") == noSep.Render("alice", "/admin/x") {
		t.Fatal("template without separator lets a subject collide with another")
	}
}

func TestHostOnlyMatchesSplitHostPort(t *testing.T) {
	for _, h := range []string{"", "example.com", "example.com:8080", "example.com:", "127.0.0.1:80",
		"[::1]:443", "[::1]", "::1", "a:b:c", "[a]b:1", "a]:80", "[::1]:80:90", "[[::1]]:80", "[::1]:"} {
		if got, want := hostOnly(h), caddyHost(h); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", h, got, want)
		}
	}
}

// caddyHost is Caddy's {http.request.host}.
func caddyHost(h string) string {
	host, _, err := net.SplitHostPort(h)
	if err != nil {
		return h
	}
	return host
}

func FuzzHostOnly(f *testing.F) {
	for _, s := range []string{"example.com:80", "[::1]:1", "a:b", "[x]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if got, want := hostOnly(h), caddyHost(h); got != want {
			t.Fatalf("hostOnly(%q) = %q, want %q", h, got, want)
		}
	})
}

func FuzzKeyTemplate(f *testing.F) {
	for _, s := range []string{DefaultKey, `\{x\} {a}`, "{a}{b}", "{", "}", "{}", "{a", "x{a}y{b}z"} {
		f.Add(s, "v1", "v2")
	}
	f.Fuzz(func(t *testing.T, s, v1, v2 string) {
		tmpl, err := ParseKeyTemplate(s)
		if err != nil {
			return
		}
		n := len(tmpl.Placeholders())
		if n == 0 {
			t.Fatalf("template %q parsed with no placeholder", s)
		}
		// rendering never panics; distinct values give distinct keys
		k1 := tmpl.Render(v1, v2)
		k2 := tmpl.Render(v2, v1)
		if v1 != v2 && n >= 1 && k1 == k2 {
			t.Fatalf("template %q: values %q/%q and %q/%q share key %q", s, v1, v2, v2, v1, k1)
		}
		if !strings.HasPrefix(k1, tmpl.Prefix(v1)) {
			t.Fatalf("template %q: Prefix(%q) is not a prefix of its key", s, v1)
		}
		// the parsed form round-trips: re-parsing gives the same segments
		again, err := ParseKeyTemplate(tmpl.String())
		if err != nil || !reflect.DeepEqual(again.segs, tmpl.segs) {
			t.Fatalf("template %q does not re-parse identically: %v", s, err)
		}
	})
}
