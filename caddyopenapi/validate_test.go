package caddyopenapi

import (
	"io"
	"math/big"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestParseDecimal: a number of at most 19 digits (read as a uint64)
// and one read digit by digit have the value big.Rat gives them, in
// lowest terms (no trailing zero in the mantissa).
func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "-0", "0.0", "7", "-7", "10", "1200", "0.5", "-0.50", "1234.56", "199.99",
		"0.01", "9999999999999999999", "999999999999999999", "-999999999999999999", "10000000000000000000",
		"1.000000000000000000", "1e2", "-1.5E-3", "123456789012345678901234567890", "0.000000000000000001"} {
		d := parseDecimal([]byte(s))
		if !d.fits {
			if len(s) < 20 {
				t.Errorf("%s: does not fit", s)
			}
			continue
		}
		if d.mant != 0 && d.mant%10 == 0 {
			t.Errorf("%s: mantissa %d has a trailing zero", s, d.mant)
		}
		got := new(big.Rat).SetInt(new(big.Int).SetUint64(d.mant))
		p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(max(d.exp, -d.exp)), nil))
		if d.exp < 0 {
			got.Quo(got, p)
		} else {
			got.Mul(got, p)
		}
		if d.neg {
			got.Neg(got)
		}
		if want := ratOf([]byte(s)); got.Cmp(want) != 0 {
			t.Errorf("%s: %s, want %s", s, got.RatString(), want.RatString())
		}
	}
}

// TestDecimals: numbers compare and divide exactly, where a float64
// would not (0.15 is a multiple of 0.01; 0.1 + 0.2 is 0.3).
func TestDecimals(t *testing.T) {
	dec := func(s string) decimal { return parseDecimal([]byte(s)) }
	for _, tc := range []struct {
		a, m string
		want bool
	}{
		{"0.15", "0.01", true},
		{"0.3", "0.1", true},
		{"1.05", "0.05", true},
		{"19.99", "0.01", true},
		{"0.155", "0.01", false},
		{"4.5e1", "1.5", true},
		{"1e300", "3", false},
		{"3e300", "3", true},
		{"0", "0.7", true},
		{"-0.15", "0.05", true},
		{"0.0001", "1e-7", true},
		{"1e-8", "1e-7", false},
		{"123456789012345678", "2", true},
	} {
		if got := multipleOf(dec(tc.a), dec(tc.m)); got != tc.want {
			t.Errorf("%s multipleOf %s: %v, want %v", tc.a, tc.m, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"0.3", "0.30", 0}, {"1", "1.0", 0}, {"1e2", "100", 0}, {"-0", "0", 0},
		{"0.1", "0.09999999999999999", 1}, {"-1", "-2", 1}, {"-1", "0", -1}, {"1e400", "1e308", 1},
		{"9007199254740993", "9007199254740992", 1}, {"1.5", "2", -1}, {"-0.5", "-0.25", -1},
		// 20-digit mantissas: 2 aligned to 18446744073709551615 is past a uint64
		{"2e19", "18446744073709551615", 1}, {"18446744073709551615", "2e19", -1},
		{"-2e19", "-18446744073709551615", -1}, {"18446744073709551615", "18446744073709551614", 1},
	} {
		if got := cmpDec(dec(tc.a), dec(tc.b)); got != tc.want {
			t.Errorf("cmp(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for s, want := range map[string]bool{"1": true, "1.0": true, "1e2": true, "1.5": false, "1.5e1": true, "1e-1": false,
		"-0": true, "100.000": true, "123456789012345678901234567890": true, "12345678901234567890123.5": false} {
		if got := dec(s).isInt(); got != want {
			t.Errorf("%s isInt %v, want %v", s, got, want)
		}
	}
}

// TestScanner: what is not JSON or not I-JSON is refused with where and
// why; a valid text's values are on the tape.
func TestScanner(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		ok         bool
		loc, kw    string
		msg        string
	}{
		{"object", `{"a": [1, -2.5e3, "x\u00e9\ud83d\ude00", true, false, null, {}], "b": {"c": []}}`, true, "", "", ""},
		{"duplicate key", `{"kind":"a","kind":"b"}`, false, "body/kind", "duplicate_key", "only member"},
		{"duplicate key, escaped", `{"a":1,"\u0061":2}`, false, "body/a", "duplicate_key", ""},
		{"duplicate key, nested", `{"items":[{"x":1},{"x":1,"y":2,"x":3}]}`, false, "body/items/1/x", "duplicate_key", ""},
		{"duplicate key, many members", `{` + manyMembers(70) + `,"k5":0}`, false, "body/k5", "duplicate_key", ""},
		{"the same name in two objects", `{"a":{"a":1},"b":{"a":2}}`, true, "", "", ""},
		{"invalid UTF-8", "{\"a\":\"R\xffx\"}", false, "body/a", "json", "invalid UTF-8 at byte 7"},
		{"invalid UTF-8 in a key", "{\"\xc3\x28\":1}", false, "body", "json", "invalid UTF-8"},
		{"encoded surrogate", "[\"\xed\xa0\x80\"]", false, "body/0", "json", "invalid UTF-8"},
		{"lone high surrogate", `{"a":"R\ud800x"}`, false, "body/a", "json", "lone surrogate"},
		{"lone low surrogate", `["\udc00"]`, false, "body/0", "json", "lone surrogate"},
		{"high surrogate, then not a low one", `["\ud800\u0041"]`, false, "body/0", "json", "lone surrogate"},
		{"syntax", `{"a":}`, false, "body", "json", "syntax error at byte 5"},
		{"trailing data", `{} {}`, false, "body", "json", "syntax error"},
		{"unexpected end", `{"a":[1,2`, false, "body", "json", "unexpected end"},
		{"control character", "[\"a\tb\"]", false, "body", "json", "syntax error"},
		{"leading zero", `[01]`, false, "body", "json", "syntax error"},
		{"bad escape", `["\x"]`, false, "body", "json", "syntax error"},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), false, "body", "json", "nested too deep"},
		{"deep enough", strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), true, "", "", ""},
		{"a BOM", "\xef\xbb\xbf{}", false, "body", "json", "syntax error"},
		{"empty", ``, false, "body", "json", "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scanner
			ok := s.scan([]byte(tc.text))
			if ok != tc.ok {
				t.Fatalf("scan %v, want %v (%v)", ok, tc.ok, s.violation("body"))
			}
			if ok {
				return
			}
			v := s.violation("body")
			if v.Location != tc.loc || v.Keyword != tc.kw || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("violation %+v, want %s %s %q", v, tc.loc, tc.kw, tc.msg)
			}
		})
	}
	var s scanner
	if !s.scan([]byte(`{"a":"x\n\u00e9","b":[1,{"c":null}]}`)) {
		t.Fatal(s.violation("body"))
	}
	if got := s.value(0).(map[string]any)["a"]; got != "x\né" {
		t.Errorf("a decoded as %q", got)
	}
	if n := len(s.tape); n != 9 || s.tape[0].next != 9 || s.tape[0].end != 2 {
		t.Errorf("tape of %d tokens, root %+v", n, s.tape[0])
	}
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `":0`)
	}
	return strings.ReplaceAll(b.String(), `"k05"`, `"k5"`)
}

// formatCases pin the formats checked on the bytes: each case is what
// the JSON Schema library says too (TestFormats checks both).
var formatCases = map[string]map[string]bool{
	"uuid":      {"6ba7b810-9dad-11d1-80b4-00c04fd430c8": true, "6BA7B810-9DAD-11D1-80B4-00C04FD430C8": true, "6ba7b8109dad11d180b400c04fd430c8": false, "6ba7b810-9dad-11d1-80b4-00c04fd430cg": false},
	"date":      {"2024-02-29": true, "2023-02-29": false, "2024-13-01": false, "2024-1-01": false, "0000-01-01": true},
	"time":      {"12:00:00Z": true, "23:59:60Z": true, "22:59:60Z": false, "23:59:60+01:00": false, "22:59:60-01:00": true, "12:00:00.5+05:30": true, "12:00:00": false, "24:00:00Z": false},
	"date-time": {"2024-01-01T00:00:00Z": true, "2024-01-01t00:00:00z": true, "2024-01-01 00:00:00Z": false, "2024-02-30T00:00:00Z": false},
	"email":     {"a@b.co": true, `"q r"@x.org`: true, "a..b@c.com": false, "a@[1.2.3.4]": true, "a@[IPv6:::1]": true, "a@[": false, "é@x.org": false, "@x.org": true},
	"hostname":  {"example.com": true, "example.com.": true, "-bad.com": false, "a..b": false, strings.Repeat("a", 64) + ".com": false},
	"ipv4": {"1.2.3.4": true, "01.2.3.4": false, "256.1.1.1": false, "1.2.3": false, "+1.2.3.4": true,
		"255.255.255.255": true, "0.0.0.0": true, "1.2.3.256": false, "1.2.3.1000": false, "1.2.3.99999": false, "1.2.3.04": false,
		"-0.1.2.3": true, "1.-1.2.3": false, "1.+0255.2.3": true, "1.+256.2.3": false, "1..2.3": false, "1.2.3.": false, "1.2.3.4.5": false, "1.2.3.4a": false, "1.2.+.4": false},
	"ipv6":     {"::1": true, "fe80::1%eth0": false, "1.2.3.4": false, "2001:db8::8a2e:370:7334": true},
	"duration": {"P1D": true, "PT": false, "P1W": true, "PT1H2M": true, "P1Y2M3DT4H5M6S": true, "P1M2Y": false, "P": false},
}

// TestFormats: the formats checked on the bytes answer the pinned cases
// as the library does.
func TestFormats(t *testing.T) {
	for name, cases := range formatCases {
		check := byteFormats[name]
		if check == nil {
			t.Fatalf("no check of %s", name)
		}
		lib := libFormat(t, name)
		for s, want := range cases {
			if got := check(s); got != want {
				t.Errorf("%s %q: %v, want %v", name, s, got, want)
			}
			if got, panicked := libVerdict(lib, s); got != want && !panicked {
				t.Errorf("%s %q: the library says %v, the pinned case %v", name, s, got, want)
			}
		}
	}
}

func libFormat(t testing.TB, name string) *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem:///f.json", map[string]any{"format": name}); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem:///f.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// FuzzFormats compares each format checked on the bytes with the
// library's check of the same format.
func FuzzFormats(f *testing.F) {
	for name, cases := range formatCases {
		for s := range cases {
			f.Add(name, s)
		}
	}
	libs := map[string]*jsonschema.Schema{}
	for name := range byteFormats {
		libs[name] = libFormat(f, name)
	}
	f.Fuzz(func(t *testing.T, name, s string) {
		check := byteFormats[name]
		if check == nil {
			return
		}
		want, panicked := libVerdict(libs[name], s)
		if panicked {
			return // the library's own bug ("a@[")
		}
		if got := check(s); got != want {
			t.Fatalf("%s %q: %v, the library %v", name, s, got, want)
		}
	})
}

// plainURICases: what plainURI accepts (true) and leaves to the
// library (false, whatever the library then says).
var plainURICases = map[string]bool{
	"https://shop.example.com/hooks/orders?src=gateway": true,
	"http://a": true, "HTTP://a.b:8080": true, "urn+x.y-z://h/p%20q#frag/?x": true, "https://h/?a=b?c#f": true,
	"https://h:": true, "https://h/a:b@c;d=e,f!g$h&i'j(k)l*m+n~o": true,
	"https://h/%2": false, "https://h/%zz": false, "https://h#a#b": false, "https://[::1]/": false,
	"https://u@h/": false, "https://h/a b": false, "https://h/\\x": false, "https://h/é": false,
	"/relative": false, "mailto:a@b.c": false, "1http://h": false, "https://": false, "https://h:80x": false,
	"https://h\x00": false, "://h": false, "https://h/\x7f": false,
}

// TestPlainURI: the uri format's check without allocation accepts the
// plain absolute URIs, each one the library accepts too, and leaves the
// rest to the library.
func TestPlainURI(t *testing.T) {
	lib := libFormat(t, "uri")
	for s, want := range plainURICases {
		if got := plainURI(s); got != want {
			t.Errorf("plainURI(%q) = %v, want %v", s, got, want)
		}
		if valid, _ := libVerdict(lib, s); want && !valid {
			t.Errorf("plainURI accepts %q, which the library refuses", s)
		}
	}
	if n := testing.AllocsPerRun(100, func() { plainURI("https://shop.example.com/hooks/orders?src=gateway") }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// FuzzPlainURI: every string plainURI accepts, the library's uri check
// accepts.
func FuzzPlainURI(f *testing.F) {
	for s := range plainURICases {
		f.Add(s)
	}
	lib := libFormat(f, "uri")
	f.Fuzz(func(t *testing.T, s string) {
		if !plainURI(s) {
			return
		}
		if valid, panicked := libVerdict(lib, s); !valid && !panicked {
			t.Fatalf("plainURI accepts %q, which the library refuses", s)
		}
	})
}

// FuzzClassPattern compares the patterns matched without regexp with
// regexp on the same text.
func FuzzClassPattern(f *testing.F) {
	for _, p := range fuzzPatterns {
		f.Add(p, "abc-12")
		f.Add(p, "ABC-1é\xff")
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		cp := newClassPattern(re)
		if cp == nil {
			return
		}
		if got, want := cp.MatchString(s), re.MatchString(s); got != want {
			t.Fatalf("%q on %q: %v, regexp %v", pattern, s, got, want)
		}
	})
}

// TestClassPatterns: which patterns are matched without regexp.
func TestClassPatterns(t *testing.T) {
	for p, want := range map[string]bool{
		"^[a-z0-9-]+$": true, "^[A-Z]{3}-[0-9]+$": true, "^\\d{3}$": true, "^(ab)+$": true, "a|b": false,
		"^[a-z_]+(,[a-z_]+)*$": true, "^[a-z,]+(,[a-z]+)*$": false, "^(a+b?)*$": false, "^((ab)*c)*$": false,
		"^(a[bc]?)*$": true, "^(a?b)*$": false,
		"^[a-z]+[a-z0-9]$": false, "^[a-z]*[0-9]?$": true, "^x": true, "b$": false, "(?i)^a+$": false,
	} {
		got := newClassPattern(regexp.MustCompile(p)) != nil
		if got != want {
			t.Errorf("%s: without regexp %v, want %v", p, got, want)
		}
	}
}

// TestFormatNames: the formats the gateway says it checks are the ones
// the JSON Schema library (and this package) check, and the library
// knows none of the annotation formats (it would check them otherwise).
func TestFormatNames(t *testing.T) {
	for _, name := range assertedFormats {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		for _, f := range openAPIFormats {
			c.RegisterFormat(f)
		}
		if err := c.AddResource("mem:///f.json", map[string]any{"format": name}); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("mem:///f.json")
		if err != nil {
			t.Fatal(err)
		}
		if sch.Format == nil {
			t.Errorf("the library does not check format %q", name)
		}
	}
	for _, name := range annotationFormats {
		if sch := libFormat(t, name); sch.Format != nil {
			t.Errorf("the library checks format %q, listed as an annotation", name)
		}
	}
}

// TestLibraryChecks: an operation whose body schema uses what the
// compiled checks do not cover is listed with the reason (and logged at
// each load, so `caddy validate` says it); the others are not.
func TestLibraryChecks(t *testing.T) {
	doc := `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /fast:
    post:
      operationId: fast
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {a: {type: integer}}}
      responses: {'200': {description: ok}}
  /slow:
    post:
      operationId: slow
      requestBody:
        content:
          application/json:
            schema: {$ref: '#/components/schemas/Strict'}
      responses: {'200': {description: ok}}
  /slowparts:
    get:
      operationId: slowparts
      parameters:
        - {name: q, in: query, content: {application/json: {schema: {$ref: '#/components/schemas/Strict'}}}}
      responses:
        '200':
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Strict'}
components:
  schemas:
    Strict:
      allOf: [{properties: {a: {type: integer}}}]
      unevaluatedProperties: false
`
	path := writeDoc(t, "api.yaml", map[string]string{"api.yaml": doc})
	s, err := Load(path, "", "")
	if err != nil {
		t.Fatal(err)
	}
	reason := "unevaluatedProperties at " + path + "#/components/schemas/Strict"
	want := []LibraryCheck{
		{"slow", "request body application/json", reason},
		{"slowparts", "query parameter q", reason},
		{"slowparts", "response 200 body application/json", reason},
	}
	if !slices.Equal(s.LibraryChecks, want) {
		t.Fatalf("library checks\n%+v\nwant\n%+v", s.LibraryChecks, want)
	}
	core, logs := observer.New(zap.InfoLevel)
	logLibraryChecks(zap.New(core), path, s)
	if e := logs.All(); len(e) != 3 || e[0].ContextMap()["operation"] != "slow" || !strings.Contains(e[0].ContextMap()["reason"].(string), "unevaluatedProperties") {
		t.Errorf("logged %+v", e)
	}
	// both still validate
	for _, tc := range []struct {
		path, body string
		want       verdict
	}{{"/fast", `{"a":1}`, verdictPass}, {"/fast", `{"a":"x"}`, verdictInvalid}, {"/slow", `{"a":1}`, verdictPass}, {"/slow", `{"a":1,"b":2}`, verdictInvalid}} {
		r := httptest.NewRequest("POST", tc.path, strings.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		if v, vs := check(t, s, r); v != tc.want {
			t.Errorf("%s %s: verdict %d %v", tc.path, tc.body, v, vs)
		}
	}
}

// TestUndeclaredBody: a body on an operation that declares none (a GET)
// is refused, with a Content-Length or chunked; none, or an empty chunked
// one, passes; an operation that declares a body is checked as usual.
func TestUndeclaredBody(t *testing.T) {
	doc := `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /items:
    get:
      responses: {'200': {description: ok}}
    post:
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses: {'200': {description: ok}}
`
	s, err := Load(writeDoc(t, "api.yaml", map[string]string{"api.yaml": doc}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	chunked := func(body string) io.Reader { return io.MultiReader(strings.NewReader(body)) } // no length: sent chunked
	for _, tc := range []struct {
		name, method string
		body         io.Reader
		length       int64
		want         verdict
	}{
		{"GET, no body", "GET", nil, 0, verdictPass},
		{"GET, JSON body", "GET", strings.NewReader(`{"a":1}`), 7, verdictInvalid},
		{"GET, chunked body", "GET", chunked(`{"a":1}`), -1, verdictInvalid},
		{"GET, empty chunked body", "GET", chunked(""), -1, verdictPass},
		{"POST, declared body", "POST", strings.NewReader(`{"a":1}`), 7, verdictPass},
	} {
		r := httptest.NewRequest(tc.method, "/items", tc.body)
		r.ContentLength = tc.length
		r.Header.Set("Content-Type", "application/json")
		v, vs := check(t, s, r)
		if v != tc.want {
			t.Errorf("%s: verdict %d, want %d (%+v)", tc.name, v, tc.want, vs)
			continue
		}
		if v == verdictInvalid && (len(vs) != 1 || vs[0].Location != "body" || vs[0].Keyword != "requestBody") {
			t.Errorf("%s: violations %+v", tc.name, vs)
		}
	}
}
