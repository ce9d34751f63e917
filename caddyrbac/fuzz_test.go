package caddyrbac

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/apigate/gateway/identity"
)

// FuzzParseClaimPath feeds arbitrary claim paths (from configs) and claim
// sets (from tokens) through the path parser, the lookup, the string walk
// and the policy check. None may panic; a parsed path must round-trip its
// raw form; a path made of the escaped segments must find the value stored
// under those segments.
func FuzzParseClaimPath(f *testing.F) {
	seeds := []struct{ path, claims string }{
		{"roles", `{"roles":["a","b"]}`},
		{"realm_access.roles", `{"realm_access":{"roles":["admin"]}}`},
		{"https://example.com/roles", `{"https://example.com/roles":"a b,c"}`},
		{`https://example\.com/roles`, `{"https://example.com/roles":["x"]}`},
		{`a\\b.c`, `{"a\\b":{"c":1}}`},
		{"a..b", `{}`},
		{`trailing\`, `{}`},
		{".", `{".":true}`},
		{"scope", `{"scope":" , ,"}`},
		{"x.y.z", `{"x":{"y":{"z":[1,"a",null]}}}`},
	}
	for _, s := range seeds {
		f.Add(s.path, s.claims)
	}
	f.Fuzz(func(t *testing.T, path, claimsJSON string) {
		p, err := identity.ParseClaimPath(path)
		if err != nil {
			return
		}
		if p.String() != path {
			t.Fatalf("String() = %q, want %q", p.String(), path)
		}
		segs := p.Segments()
		if len(segs) == 0 {
			t.Fatalf("parsed %q into no segments", path)
		}
		for _, s := range segs {
			if s == "" {
				t.Fatalf("parsed %q into an empty segment", path)
			}
		}

		// the escaped segments, re-joined, parse to the same segments
		esc := make([]string, len(segs))
		for i, s := range segs {
			esc[i] = strings.NewReplacer(`\`, `\\`, `.`, `\.`).Replace(s)
		}
		p2, err := identity.ParseClaimPath(strings.Join(esc, "."))
		if err != nil {
			t.Fatalf("re-escaped path of %q does not parse: %v", path, err)
		}
		if strings.Join(p2.Segments(), "\x00") != strings.Join(segs, "\x00") {
			t.Fatalf("segments %q != %q", p2.Segments(), segs)
		}

		// a claim set built along the segments is found
		var nested any = []any{"r1", "r2"}
		for i := len(segs) - 1; i >= 0; i-- {
			nested = map[string]any{segs[i]: nested}
		}
		v, ok := p.Lookup(nested.(map[string]any))
		if !ok {
			t.Fatalf("Lookup(%q) did not find the nested value", path)
		}
		if got, err := identity.Strings(v); err != nil || len(got) != 2 {
			// the raw-name shortcut may return something else only when
			// the raw path equals the first segment's key
			if len(segs) == 1 || path != segs[0] {
				t.Fatalf("Lookup(%q) = %v, %v", path, got, err)
			}
		}

		// arbitrary claims: lookup, walk and policy check never panic
		var claims map[string]any
		if json.Unmarshal([]byte(claimsJSON), &claims) != nil {
			return
		}
		if v, ok := p.Lookup(claims); ok {
			_ = identity.EachString(v, func(s string) bool { return s != "" })
		}
		rule, err := NewRule(All, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		pol, err := NewPolicy(path, path, []Rule{rule}, []Rule{rule})
		if err != nil {
			t.Fatalf("NewPolicy(%q): %v", path, err)
		}
		res, reason := pol.Check(claims)
		if (res == Allow) != (reason == "") {
			t.Fatalf("Check = %v with reason %q", res, reason)
		}
	})
}
