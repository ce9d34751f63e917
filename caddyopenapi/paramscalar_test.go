package caddyopenapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scalarSchemas are the schemas of TestCheckScalar's header parameters
// (X-P0, X-P1...): every keyword the scalar check decides, and bounds
// past an int64 of units.
var scalarSchemas = []string{
	`{type: integer, minimum: 1, maximum: 100}`,
	`{type: integer, minimum: 9223372036854775808}`,
	`{type: integer, maximum: -9223372036854775808}`,
	`{type: number, multipleOf: 0.01, exclusiveMinimum: 0}`,
	`{type: number, exclusiveMaximum: -1844674407370955162}`,
	`{type: integer, multipleOf: 1844674407370955162}`,
	`{type: integer, format: int32}`,
	`{type: string, maxLength: 3}`,
	`{type: string, minLength: 2, pattern: '^[a-z]+$'}`,
	`{type: string, format: uuid}`,
	`{type: string, format: date}`,
	`{type: string, enum: [a, b]}`,
	`{type: boolean}`,
	`{type: [integer, "null"]}`,
	`{enum: [1, a, true]}`,
	`{const: 5}`,
	`{type: number}`,
	`{$ref: '#/components/schemas/Small'}`,
}

var scalarValues = []string{"0", "1", "-1", "5", "1.0", "1.5", "1e2", "100", "101", "0.15", "0.155",
	"9223372036854775808", "-9223372036854775809", "-1844674407370955163", "3689348814741910324", "2147483648",
	"18446744073709551615", "2e19", "-2e19", "", "a", "ab", "abc", "abcd", "AB", "true", "false", "null",
	"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b810-9dad-11d1-80b4-00c04fd430cg", "2024-02-29", "2023-02-29",
	"é", "\xff", "a,b", "01", "+1", " 1"}

// TestCheckScalar holds the scalar check (paramscalar.go) to the
// decoding and the tape: it never accepts a value they refuse, for
// every schema of scalarSchemas and value of scalarValues; and it
// decides on its own the plain values it is there for (a valid integer,
// number, string, enum value, boolean), in a path segment, a query and a
// header, so that a change that sends them to the tape fails here
// rather than only costing time.
func TestCheckScalar(t *testing.T) {
	s, op := scalarSpec(t)
	pv := pathValues{n: 1, vals: [8]string{"7"}}
	for _, p := range op.params {
		if p.scalar == nil {
			t.Fatalf("%s: no scalar check", p.loc)
		}
		if p.in != inHeader {
			continue
		}
		for _, v := range scalarValues {
			r := httptest.NewRequest(http.MethodGet, "/s/7?q=a", nil)
			r.Header[p.name] = []string{v}
			if p.checkScalar(r, &pv) && !decoded(p, r, &pv) {
				t.Errorf("%s %q: the scalar check accepts what the tape refuses", p.loc, v)
			}
		}
	}
	header := func(i int) string { return fmt.Sprintf("X-P%d", i) }
	for _, tc := range []struct {
		name, target string
		header       map[string]string
		want         bool // the scalar checks accept every parameter
	}{
		{"path and query", "/s/7?q=name,price&n=9.5", nil, true},
		{"integer, number, strings, boolean, null", "/s/7?q=a", map[string]string{header(0): "100", header(3): "0.15", header(7): "abc",
			header(8): "ab", header(9): "6ba7b810-9dad-11d1-80b4-00c04fd430c8", header(11): "b", header(12): "false", header(13): "", header(14): "a"}, true},
		{"huge bounds met", "/s/7?q=a", map[string]string{header(1): "9223372036854775808", header(2): "-9223372036854775809", header(17): "3"}, true},
		{"path below minimum", "/s/0?q=a", nil, false},
		{"query pattern", "/s/7?q=A", nil, false},
		{"query escaped", "/s/7?q=a%2Cb", nil, false},
		{"query given twice", "/s/7?q=a&q=b", nil, false},
		{"required query missing", "/s/7", nil, false},
		{"number above maximum", "/s/7?q=a&n=11", nil, false},
		{"huge minimum", "/s/7?q=a", map[string]string{header(1): "0"}, false},
		{"huge negative maximum", "/s/7?q=a", map[string]string{header(2): "0"}, false},
		{"exclusive maximum that wraps", "/s/7?q=a", map[string]string{header(4): "-1"}, false},
		{"multipleOf that wraps", "/s/7?q=a", map[string]string{header(5): "8"}, false},
		{"int32", "/s/7?q=a", map[string]string{header(6): "2147483648"}, false},
		{"ref", "/s/7?q=a", map[string]string{header(17): "4"}, false},
		{"enum", "/s/7?q=a", map[string]string{header(11): "c"}, false},
		{"invalid UTF-8", "/s/7?q=a", map[string]string{header(7): "\xff"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			var pv pathValues
			_, op := s.match(r.Method, r.URL.Path, &pv)
			var refused []string
			for _, p := range op.params {
				if !p.checkScalar(r, &pv) {
					refused = append(refused, p.loc)
				}
			}
			if all := len(refused) == 0; all != tc.want {
				t.Errorf("the scalar checks accept all: %v (not %v), want %v", all, refused, tc.want)
			}
		})
	}
}

// TestQueryValue: queryValue finds a name's first value and count as
// queryPairs (and so decodeQuery and Request.URL.Query) does, or says it
// cannot tell (-1) where decoding would.
func TestQueryValue(t *testing.T) {
	raws := []string{"", "&", "&&a=1&&", "a", "a=", "a=1", "a=1&a=2", "b=1&a=2&a=3", "a=1;b=2", "a=1&x;=2&a=3",
		"a;=1&a=2", "a%3D=1", "a+b=1&a=2", "b=%zz&a=1", "a=%zz", "a=x+y", "=1", "a=1=2", "a=&a=x", "aa=1&a=2", "A=1", "a%=1",
		"fields=name,price", "fields=name,price&a=1", "a=name,price&a=2", "b=0123456789abcdef&a=01234567"}
	// each mark at each place in a word and past it (queries read
	// eight bytes at a time)
	for _, mark := range "&=;%+" {
		for i := 0; i < 20; i++ {
			raws = append(raws, "a="+strings.Repeat("x", i)+string(mark)+"y&b=1", "b="+strings.Repeat("x", i)+string(mark)+"&a=z")
		}
	}
	for _, raw := range raws {
		for _, name := range []string{"a", "b", "a b", ""} {
			if msg := queryValueDiffers(raw, name); msg != "" {
				t.Error(msg)
			}
		}
	}
}

// queryValueDiffers says how queryValue and queryPairs disagree on name
// in raw, or "".
func queryValueDiffers(raw, name string) string {
	var sc scanner
	var first string
	count := 0
	sc.queryPairs(raw, func(k, v string) bool {
		if k == name {
			if count == 0 {
				first = v
			}
			count++
		}
		return true
	})
	v, n := queryValue(raw, name)
	if n < 0 {
		if !strings.ContainsAny(raw, "%+") {
			return fmt.Sprintf("queryValue(%q, %q) cannot tell, with nothing escaped", raw, name)
		}
		return ""
	}
	if n != count || v != first {
		return fmt.Sprintf("queryValue(%q, %q) = %q, %d; queryPairs finds %q, %d", raw, name, v, n, first, count)
	}
	return ""
}

// FuzzQueryValue compares queryValue with queryPairs on any query.
func FuzzQueryValue(f *testing.F) {
	f.Add("fields=name,price", "fields")
	f.Add("b=0123456789abcdef&a=01234567;", "a")
	f.Add("a=x+y&a=1", "a")
	f.Fuzz(func(t *testing.T, raw, name string) {
		if msg := queryValueDiffers(raw, name); msg != "" {
			t.Fatal(msg)
		}
	})
}

// scalarSpec is TestCheckScalar's document: GET /s/{id} with a path, two
// query and a header parameter for each of scalarSchemas.
func scalarSpec(t testing.TB) (*Spec, *Operation) {
	t.Helper()
	var b strings.Builder
	b.WriteString("openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths:\n  /s/{id}:\n    get:\n      parameters:\n")
	b.WriteString("        - {name: id, in: path, required: true, schema: {type: integer, minimum: 1}}\n")
	b.WriteString("        - {name: q, in: query, required: true, schema: {type: string, maxLength: 16, pattern: '^[a-z,]+$'}}\n")
	b.WriteString("        - {name: n, in: query, schema: {type: number, maximum: 10}}\n")
	for i, sch := range scalarSchemas {
		fmt.Fprintf(&b, "        - {name: X-P%d, in: header, schema: %s}\n", i, sch)
	}
	b.WriteString("      responses: {'200': {description: ok}}\ncomponents:\n  schemas:\n    Small: {type: integer, maximum: 3}\n")
	s, err := Load(writeDoc(t, "api.yaml", map[string]string{"api.yaml": b.String()}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var pv pathValues
	_, op := s.match(http.MethodGet, "/s/7", &pv)
	if op == nil {
		t.Fatal("no operation")
	}
	return s, op
}

// decoded is the verdict of the decoding and the tape on p.
func decoded(p *param, r *http.Request, pv *pathValues) bool {
	sc := getScanner()
	defer putScanner(sc)
	found, viol := p.decode(sc, r, pv)
	return len(p.check(sc, found, viol, nil)) == 0
}

// FuzzCheckScalar fails when the scalar check accepts a value that the
// decoding and the tape refuse: the value in a header parameter of each
// of scalarSchemas, and written into the query (escapes and all) for the
// query parameters.
func FuzzCheckScalar(f *testing.F) {
	for _, v := range scalarValues {
		f.Add(v)
	}
	f.Add("a%2Cb&q=c")
	f.Add("1&n=2;&n=3")
	_, op := scalarSpec(f)
	pv := pathValues{n: 1, vals: [8]string{"7"}}
	f.Fuzz(func(t *testing.T, v string) {
		for _, p := range op.params {
			r := httptest.NewRequest(http.MethodGet, "/s/7", nil)
			switch p.in {
			case inHeader:
				r.Header[p.name] = []string{v}
			case inQuery:
				r.URL.RawQuery = p.name + "=" + v
			case inPath:
				pv.vals[0] = v
			}
			if p.checkScalar(r, &pv) && !decoded(p, r, &pv) {
				t.Fatalf("%s %q: the scalar check accepts what the tape refuses", p.loc, v)
			}
		}
	})
}
