package auditchain

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAppendNumber checks the number serialization of RFC 8785 §3.2.2.3
// against its Appendix B (IEEE 754 bits -> ECMAScript string) and the
// examples of the text.
func TestAppendNumber(t *testing.T) {
	bits := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // -0
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, c := range bits {
		f := math.Float64frombits(c.bits)
		if got := string(AppendNumber(nil, f)); got != c.want {
			t.Errorf("AppendNumber(%#016x = %g) = %s, want %s", c.bits, f, got, c.want)
		}
	}
	values := []struct {
		f    float64
		want string
	}{
		{1e21, "1e+21"},
		{1e-7, "1e-7"},
		{0.000001, "0.000001"},
		{333333333.33333329, "333333333.3333333"},
		{math.Copysign(0, -1), "0"},
		{4.50, "4.5"},
		{2e-3, "0.002"},
		{1e30, "1e+30"},
		{1e-27, "1e-27"},
		{-1.5e-10, "-1.5e-10"},
		{123e20, "1.23e+22"},
		{100, "100"},
		{1e20, "100000000000000000000"},
		{-12.75, "-12.75"},
	}
	for _, c := range values {
		if got := string(AppendNumber([]byte("x"), c.f)); got != "x"+c.want {
			t.Errorf("AppendNumber(%g) = %s, want x%s", c.f, got, c.want)
		}
	}
}

// TestCanonicalRFC8785 checks Canonical against the examples of RFC 8785.
func TestCanonicalRFC8785(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{{
		// §3.2.2 (the sample of §3.2.3's serialization).
		name: "sample",
		in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
		want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
	}, {
		// §3.2.3: member names sort by their UTF-16 code units, so the
		// emoji (a surrogate pair, D83D DE00) sorts before U+FB33 although
		// its UTF-8 bytes sort after.
		name: "sorting",
		in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
		want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
			"\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\"," +
			"\"\U0001F600\":\"Emoji: Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}",
	}, {
		name: "string escapes",
		in:   `["\u0000\u0001\u001f\u0020\b\f\n\r\t\u007f\u2028\u2029<>&\/\"\\", "\uD834\uDD1E"]`,
		want: "[\"\\u0000\\u0001\\u001f \\b\\f\\n\\r\\t\u007f\u2028\u2029<>&/\\\"\\\\\",\"𝄞\"]",
	}, {
		name: "nested objects and white space",
		in:   " { \"b\" : [ 1 , { \"d\" : 1.0 , \"c\" : -0 } ] , \"a\" : { } , \"\" : [ ] } \n",
		want: `{"":[],"a":{},"b":[1,{"c":0,"d":1}]}`,
	}, {
		name: "scalars",
		in:   `[true,false,null,"",0,-0.0,1E2,1e-2]`,
		want: `[true,false,null,"",0,0,100,0.01]`,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonical([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			again, err := Canonical(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("canonical form is not stable: %s, %v", again, err)
			}
		})
	}
}

func TestCanonicalRejects(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"a":1}`,
		`{"a":1,"b":{"c":1,"c":2}}`,
		`[{"x":true,"x":false}]`,
		`{"\u0061":1,"a":2}`, // the same name, spelled differently
		``,
		`{"a":1`,
		`{"a":1}}`,
		`{"a":1} x`,
		`{"a":1}{"b":2}`,
		`[1,]`,
		`{"a":01}`,
		`{"a":1e400}`,
		`{"a":NaN}`,
		`{'a':1}`,
	} {
		if got, err := Canonical([]byte(in)); err == nil {
			t.Errorf("Canonical(%s) = %s, want an error", in, got)
		}
	}
	_, err := Canonical([]byte(`{"status":200,"status":403}`))
	if err == nil || !strings.Contains(err.Error(), `member "status" appears twice`) {
		t.Errorf("duplicate member: %v", err)
	}
}

// FuzzAppendString checks that AppendString writes a JSON string that a
// JSON decoder reads back (invalid UTF-8 as U+FFFD, as encoding/json reads
// it) and that is canonical: what Canonical makes of any encoding of the
// same string. `go test` runs the seed corpus.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "a", "plain ascii", "\x00\x01\x1f\x7f", "\"\\/", "\b\f\n\r\t", "<a&b>",
		"€ ö \U0001F600 \uFB33", "\u2028\u2029", "\ufffd", "\ufeff",
		"\xff", "a\xffb", "\xc3\x28", "\xe2\x82", "\xf0\x9f\x98", "\xed\xa0\x80", "\xed\xbf\xbf",
		"\xf4\x90\x80\x80", "\xc0\xaf", "\x80\x80\x80", "ok\xe2\x82\xacok\xe2\x82",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := AppendString(nil, s)
		if !utf8.Valid(enc) {
			t.Fatalf("AppendString(%q) = %q: not UTF-8", s, enc)
		}
		var back string
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("AppendString(%q) = %q: not a JSON string: %v", s, enc, err)
		}
		// What a decoder reads from encoding/json's own encoding of s.
		std, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var want string
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if back != want {
			t.Fatalf("AppendString(%q) reads back as %q, encoding/json's encoding as %q", s, back, want)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("AppendString(%q) reads back as %q", s, back)
		}
		if again := AppendString(nil, back); string(again) != string(enc) {
			t.Fatalf("AppendString of the decoded string %q = %q, want %q", back, again, enc)
		}
		for _, in := range [][]byte{enc, std} {
			canon, err := Canonical(in)
			if err != nil {
				t.Fatalf("Canonical(%q): %v", in, err)
			}
			if string(canon) != string(enc) {
				t.Fatalf("Canonical(%q) = %q, AppendString(%q) = %q", in, canon, s, enc)
			}
		}
	})
}
