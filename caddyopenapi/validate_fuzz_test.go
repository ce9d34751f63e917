package caddyopenapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzCompiledValidator generates a schema and a value from the fuzzer's
// bytes and fails when the compiled checks (validate.go) and the JSON
// Schema library, the reference, disagree on whether the value is valid.
// The schemas use every keyword the checks cover, in drafts 2020-12 and
// 4; the values lean on the edges the checks decide differently from the
// library: decimals (0.15 and multipleOf 0.01), numbers past 19 digits,
// formats, patterns, escapes, equal values written apart (1 and 1.0).
func FuzzCompiledValidator(f *testing.F) {
	f.Add([]byte("\x05\x01\x02"), []byte("\x03\x04"), false)
	f.Add([]byte("\x0b\x02\x05\x07"), []byte("\x02\x01\x05"), false)
	f.Add([]byte("\x10\x03\x11\x05\x09"), []byte("\x05\x02\x01\x00\x03"), true)
	f.Add([]byte("\x08\x08\x09\x0a\x02"), []byte("\x04\x04\x04\x01\x02"), false)
	f.Add([]byte("\x0d\x0e\x0f\x10\x11\x12\x13"), []byte("\x05\x05\x05\x05\x05\x05"), false)
	f.Add([]byte("\x01\x0c\x16\x17\x18"), []byte("\x00\x07\x09\x0b\x0d"), true)
	f.Fuzz(func(t *testing.T, schemaSeed, valueSeed []byte, draft4 bool) {
		g := &gen{b: schemaSeed}
		schema := g.schema(0)
		if draft4 {
			schema = map[string]any{"$schema": "http://json-schema.org/draft-04/schema#", "allOf": []any{schema}, "definitions": map[string]any{"d": g.schema(1)}}
		} else {
			schema = map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "allOf": []any{schema}, "$defs": map[string]any{"d": g.schema(1)}}
		}
		compareGenerated(t, schemaSeed, valueSeed, draft4)
	})
}

// TestCompiledValidatorGenerated runs FuzzCompiledValidator's comparison
// on 3000 generated schemas and values of a fixed seed, and checks that
// most of them are compared (not skipped as invalid).
func TestCompiledValidatorGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(44, 44))
	compared := 0
	onePassCounts.valid, onePassCounts.accepted = 0, 0
	const n = 3000
	for range n {
		a, b := make([]byte, 4+rng.IntN(20)), make([]byte, 2+rng.IntN(12))
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if compareGenerated(t, a, b, rng.IntN(4) == 0) {
			compared++
		}
	}
	if compared < n/2 {
		t.Errorf("only %d of %d generated cases compared", compared, n)
	}
	t.Logf("%d of %d generated cases compared; the one-pass check accepts %d of the %d valid values of schemas it covers",
		compared, n, onePassCounts.accepted, onePassCounts.valid)
}

// compareGenerated makes a schema and a value of the seeds and compares
// the verdicts; it reports whether they were compared.
func compareGenerated(t *testing.T, schemaSeed, valueSeed []byte, draft4 bool) bool {
	g := &gen{b: schemaSeed}
	schema := g.schema(0)
	if draft4 {
		schema = map[string]any{"$schema": "http://json-schema.org/draft-04/schema#", "allOf": []any{schema}, "definitions": map[string]any{"d": g.schema(1)}}
	} else {
		schema = map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "allOf": []any{schema}, "$defs": map[string]any{"d": g.schema(1)}}
	}
	text, err := json.Marshal(schema)
	if err != nil {
		return false // a const or enum value that is not JSON
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(text)))
	if err != nil {
		return false
	}
	return compareVerdicts(t, doc, (&gen{b: valueSeed}).value(0))
}

// compareVerdicts fails when the checks and the library disagree on
// value (JSON text) against schema (a decoded schema).
func compareVerdicts(t *testing.T, schema any, value string) bool {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, f := range openAPIFormats {
		c.RegisterFormat(f)
	}
	if err := c.AddResource("mem:///s.json", schema); err != nil {
		return false
	}
	sch, err := c.Compile("mem:///s.json")
	if err != nil {
		return false // an invalid schema (a bad pattern): nothing to compare
	}
	checks, _ := compileChecks(sch, nil)
	if checks == nil {
		return false
	}
	var sc scanner
	if !sc.scan([]byte(value)) {
		return false
	}
	lib, panicked := libVerdict(sch, sc.value(0))
	if panicked {
		return false // the library cannot decide (a number big.Rat does not take)
	}
	if got := sc.valid(checks, 0); got != lib {
		s, _ := json.Marshal(schema)
		t.Fatalf("schema %s\nvalue %s\nthe checks say valid %v, the library %v", s, value, got, lib)
	}
	// the one-pass check (onepass.go) never accepts what the library
	// refuses: on the generated schema (the root's allOf) and on the root
	comparePass(t, schema, value, sch, checks)
	for i, sub := range sch.AllOf {
		if i < len(checks.allOf) {
			comparePass(t, schema, value, sub, checks.allOf[i])
		}
	}
	return true
}

// onePassCounts counts, for TestCompiledValidatorGenerated, the values
// the library finds valid against a schema the one-pass check covers,
// and those of them the one-pass check accepts.
var onePassCounts struct{ valid, accepted int }

func comparePass(t *testing.T, schema any, value string, sch *jsonschema.Schema, c *schemaCheck) {
	t.Helper()
	if !onePass(c) {
		return
	}
	var sc scanner
	if !sc.scan([]byte(value)) {
		return
	}
	lib, panicked := libVerdict(sch, sc.value(0))
	if panicked {
		return
	}
	acc := sc.accepts(c, []byte(value))
	if acc && !lib {
		s, _ := json.Marshal(schema)
		t.Fatalf("schema %s (at %s)\nvalue %s\nthe one-pass check accepts it, the library refuses it", s, sch.Location, value)
	}
	if lib {
		onePassCounts.valid++
		if acc {
			onePassCounts.accepted++
		}
	}
}

func libVerdict(sch *jsonschema.Schema, v any) (valid, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return sch.Validate(v) == nil, false
}

// gen makes schemas and values from bytes (0 when they run out).
type gen struct {
	b []byte
	i int
}

func (g *gen) next() int {
	if g.i >= len(g.b) {
		g.i++
		return 0
	}
	g.i++
	return int(g.b[g.i-1])
}

func (g *gen) pick(list ...string) string { return list[g.next()%len(list)] }

var (
	fuzzNumbers = []string{"0", "-0", "1", "1.0", "2", "-1", "0.15", "0.3", "0.1", "1e2", "-1.5", "100", "3.25",
		"9007199254740993", "12345678901234567890123", "1e-7", "2.5e3", "0.0001", "1e400", "-2147483649", "2147483647",
		"9223372036854775808", "255", "0.01", "1.5"}
	fuzzStrings = []string{"", "a", "abc", "ABC-12", "abc-123", "2024-02-29", "2023-02-29", "2024-13-01", "12:00:00Z",
		"23:59:60Z", "23:59:60+01:00", "12:00:00.5+05:30", "2024-01-01T00:00:00Z", "2024-01-01t00:00:00z", "a@b.co",
		"\"q\"@x.org", "a..b@c", "a@[1.2.3.4]", "a@[IPv6:::1]", "a@[", "::1", "1.2.3.4", "01.2.3.4", "+1.2.3.4",
		"256.1.1.1", "fe80::1%eth0", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b810-9dad-11d1-80b4-00c04fd430cg",
		"P1D", "PT", "P1W", "PT1H2M", "P1Y2M3DT4H5M6S", "P1M2Y", "http://x/y", "/rel", "ex.ample.com", "-bad.com",
		"é", "\u00e9\u0301", "x\ny", "a\u0000b", "red", "green", "ab", "ABC", "abcd", "1.0.0", "~0/~1", "/a~2"}
	fuzzPatterns = []string{"^[a-z0-9-]+$", "^[A-Z]{3}-[0-9]+$", "^a", "b$", "^[a-z]*[0-9]?$", "^.{2,3}$",
		"^[^a]+$", "^\\d{3}$", "^(ab)+$", "^[a-z]+[a-z0-9]$", "^é+$", "^[a-zA-Z_]\\w*$", "a|b", "^x?$", "^$", "^\\S+$",
		"^[a-z_]+(,[a-z_]+)*$", "^(ab)*c$", "^([0-9]{3}-)+x$", "^(a[bc]?)*$", "^(x[0-9]+)*", "^(a+b?)*$", "^(é.)?$"}
	fuzzFormats = []string{"date", "date-time", "time", "email", "hostname", "ipv4", "ipv6", "uuid", "duration",
		"uri", "uri-reference", "json-pointer", "regex", "int32", "int64", "semver", "idn-email"}
	fuzzKeys = []string{"a", "b", "c", "foo", "x-y", "é", "a\u0000"}
)

// schema makes a schema object of a few keywords.
func (g *gen) schema(depth int) any {
	if g.next()%11 == 10 {
		return g.next()%2 == 0 // a boolean schema
	}
	s := map[string]any{}
	n := 1 + g.next()%3
	for range n {
		g.keyword(s, depth)
	}
	return s
}

func (g *gen) sub(depth int) any {
	if depth >= 3 {
		return map[string]any{"type": g.pick("string", "number", "integer", "object", "array", "boolean", "null")}
	}
	return g.schema(depth + 1)
}

func num(s string) json.Number { return json.Number(s) }

func (g *gen) keyword(s map[string]any, depth int) {
	switch g.next() % 30 {
	case 0:
		s["type"] = g.pick("string", "number", "integer", "object", "array", "boolean", "null")
	case 1:
		s["type"] = []any{g.pick("string", "integer", "null"), g.pick("number", "object", "array")}
	case 2:
		s["minimum"] = num(g.pick(fuzzNumbers...))
	case 3:
		s["maximum"] = num(g.pick(fuzzNumbers...))
	case 4:
		s["exclusiveMinimum"] = num(g.pick(fuzzNumbers...))
	case 5:
		s["multipleOf"] = num(g.pick("0.01", "0.1", "0.5", "3", "1e-7", "2.5", "1", "0.0001", "12345678901234567890.5"))
	case 6:
		s["minLength"] = g.next() % 5
		s["maxLength"] = g.next() % 8
	case 7:
		s["pattern"] = g.pick(fuzzPatterns...)
	case 8:
		s["format"] = g.pick(fuzzFormats...)
	case 9:
		props := map[string]any{}
		for range 1 + g.next()%3 {
			props[g.pick(fuzzKeys...)] = g.sub(depth)
		}
		s["properties"] = props
	case 10:
		s["required"] = []any{g.pick(fuzzKeys...), g.pick(fuzzKeys...)}
	case 11:
		if g.next()%2 == 0 {
			s["additionalProperties"] = false
		} else {
			s["additionalProperties"] = g.sub(depth)
		}
	case 12:
		s["patternProperties"] = map[string]any{g.pick("^a", "o$", "^[a-z]+$", "é"): g.sub(depth)}
	case 13:
		s["items"] = g.sub(depth)
	case 14:
		s["prefixItems"] = []any{g.sub(depth), g.sub(depth)}
	case 15:
		s["contains"] = g.sub(depth)
		if g.next()%2 == 0 {
			s["minContains"] = g.next() % 3
			s["maxContains"] = g.next() % 3
		}
	case 16:
		s["uniqueItems"] = true
	case 17:
		s["minItems"] = g.next() % 3
		s["maxItems"] = g.next() % 5
	case 18:
		s["allOf"] = []any{g.sub(depth), g.sub(depth)}
	case 19:
		s["anyOf"] = []any{g.sub(depth), g.sub(depth)}
	case 20:
		s["oneOf"] = []any{g.sub(depth), g.sub(depth)}
	case 21:
		s["not"] = g.sub(depth)
	case 22:
		s["if"], s["then"], s["else"] = g.sub(depth), g.sub(depth), g.sub(depth)
	case 23:
		s["enum"] = []any{json.RawMessage(g.value(2)), g.pick(fuzzStrings...), num(g.pick(fuzzNumbers...)), nil}
	case 24:
		s["const"] = json.RawMessage(g.value(2))
	case 25:
		s["dependentRequired"] = map[string]any{g.pick(fuzzKeys...): []any{g.pick(fuzzKeys...)}}
		s["dependencies"] = map[string]any{g.pick(fuzzKeys...): g.sub(depth)}
	case 26:
		s["dependentSchemas"] = map[string]any{g.pick(fuzzKeys...): g.sub(depth)}
	case 27:
		s["propertyNames"] = g.sub(depth)
	case 28:
		s["minProperties"] = g.next() % 3
		s["maxProperties"] = g.next() % 4
	case 29:
		s["$ref"] = g.pick("#/$defs/d", "#/definitions/d", "#")
		if depth == 0 {
			s["$ref"] = g.pick("#/$defs/d", "#/definitions/d") // not "#" in place: a loop
		}
	}
}

// value makes a JSON text, written in the ways JSON allows (escapes,
// exponents, white space).
func (g *gen) value(depth int) string {
	k := g.next() % 9
	if depth >= 3 && k >= 6 {
		k = 0
	}
	switch k {
	case 0, 1:
		return g.pick(fuzzNumbers...)
	case 2, 3:
		v := g.pick(fuzzStrings...)
		b, _ := json.Marshal(v)
		if g.next()%3 == 0 && v != "" { // the first character escaped
			r := []rune(v)
			return fmt.Sprintf(`"\u%04x%s`, r[0], string(b[1+len(string(r[0])):]))
		}
		return string(b)
	case 4:
		return g.pick("true", "false", "null")
	case 5:
		return g.pick(`"\ud83d\ude00"`, `"a\/b"`, `"\t"`, `[1, 1.0]`, `[{"a":1,"b":2},{"b":2,"a":1.0}]`, `{"a":[]}`)
	case 6, 7:
		var b strings.Builder
		b.WriteByte('[')
		for i := range g.next() % 4 {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(g.value(depth + 1))
		}
		b.WriteByte(']')
		return b.String()
	}
	var b strings.Builder
	b.WriteByte('{')
	seen := map[string]bool{}
	for range g.next() % 4 {
		k := g.pick(fuzzKeys...)
		if seen[k] {
			continue
		}
		if len(seen) > 0 {
			b.WriteByte(',')
		}
		seen[k] = true
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(" : ")
		b.WriteString(g.value(depth + 1))
	}
	b.WriteByte('}')
	return b.String()
}

// TestNumberBoundEdges compares the checks, the one-pass check and the
// library on every number keyword (draft 4's boolean exclusive bounds
// and 2020-12's numeric ones) with bounds and values where a uint64 or
// an int64 of units runs out: near 10^17 units, 2^63, 2^64 and 2^64/10
// (whose tenfold wraps to 4), negative ones, 20-digit ones and ones
// written with an exponent. Where the int64 cannot decide, the decimal
// or the big.Rat must.
func TestNumberBoundEdges(t *testing.T) {
	edges := []string{"0", "1", "-1", "5", "8", "0.5", "99999999999999999", "100000000000000000",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"1844674407370955162", "-1844674407370955162", "18446744073709551615", "18446744073709551616",
		"-18446744073709551615", "2e19", "-2e19", "1e17", "1.5e17", "12345678901234567890123", "1e30", "0.0000001"}
	type keyword struct {
		name  string
		draft string
		make  func(bound string) string
	}
	const d4, d2020 = `"$schema":"http://json-schema.org/draft-04/schema#",`, `"$schema":"https://json-schema.org/draft/2020-12/schema",`
	var keywords []keyword
	for _, draft := range []string{d4, d2020} {
		for _, kw := range []string{"minimum", "maximum", "multipleOf"} {
			keywords = append(keywords, keyword{kw, draft, func(b string) string { return `{` + draft + `"` + kw + `":` + b + `}` }})
		}
	}
	for _, kw := range []string{"exclusiveMinimum", "exclusiveMaximum"} {
		keywords = append(keywords, keyword{kw + " true", d4, func(b string) string {
			return `{` + d4 + `"` + strings.Replace(kw, "exclusiveM", "m", 1) + `":` + b + `,"` + kw + `":true}`
		}})
		keywords = append(keywords, keyword{kw, d2020, func(b string) string { return `{` + d2020 + `"` + kw + `":` + b + `}` }})
	}
	for _, kw := range keywords {
		for _, b := range edges {
			if kw.name == "multipleOf" && (b == "0" || strings.HasPrefix(b, "-")) {
				continue // not a schema
			}
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(kw.make(b)))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range edges {
				if !compareVerdicts(t, doc, v) {
					t.Fatalf("%s: %s not compared", kw.make(b), v)
				}
			}
		}
	}
}
