package caddyopenapi

import (
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestOnePass holds the one-pass check to what it must refuse (each
// keyword it covers, and texts that are not I-JSON) and to what it must
// accept on its own (a valid body that went to the tape would only cost
// time, which no other test sees).
func TestOnePass(t *testing.T) {
	const schema = `{
		"type": "object",
		"additionalProperties": false,
		"required": ["id", "n"],
		"properties": {
			"id": {"type": "string", "format": "uuid"},
			"n": {"type": "integer", "minimum": 1, "maximum": 10},
			"price": {"type": "number", "multipleOf": 0.01},
			"kind": {"enum": ["a", "b"]},
			"level": {"enum": [1, 2, null]},
			"on": {"type": "boolean"},
			"tags": {"type": "array", "uniqueItems": true, "maxItems": 3, "items": {"type": "string", "pattern": "^[a-z]+$"}},
			"pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false},
			"meta": {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string", "maxLength": 3}},
			"any": true,
			"even": {"type": "integer", "multipleOf": 2, "exclusiveMinimum": 0, "exclusiveMaximum": 100},
			"neg": {"type": "number", "minimum": -5},
			"amount": {"type": "number", "minimum": -1.5, "exclusiveMaximum": 10.25, "multipleOf": 0.25},
			"ref": {"$ref": "#/$defs/code"},
			"huge": {"minimum": 9223372036854775808},
			"wrapmin": {"minimum": 1844674407370955162},
			"hugeneg": {"maximum": -9223372036854775808},
			"wrapexmax": {"exclusiveMaximum": -1844674407370955162},
			"wrapmul": {"multipleOf": 1844674407370955162}
		},
		"$defs": {"code": {"type": "string", "minLength": 2}}
	}`
	checks := onePassChecks(t, schema)
	const id = `"id":"3f6c2a9e-8b1d-4c7a-9e2f-5d4b3a2c1e0f"`
	for _, tc := range []struct {
		name, text string
		want       bool
	}{
		{"minimal", `{` + id + `,"n":1}`, true},
		{"every property", ` { ` + id + ` , "n" : 10, "price": 0.15, "kind": "b", "level": null, "on": true, "tags": ["x", "y"], "pair": [1, "a"], "meta": {"a": "abc", "b": ""}, "any": [{"x": [1]}], "ref": "ab"} `, true},
		{"escaped name and value", `{"\u0069d":"3f6c2a9e-8b1d-4c7a-9e2f-5d4b3a2c1e0f","n":1,"ref":"\u00e9\ud83d\ude00"}`, true},
		{"integer written 2.0", `{` + id + `,"n":2.0}`, true},
		{"enum number written 1.0", `{` + id + `,"n":1,"level":1.0}`, true},
		{"integer bounds", `{` + id + `,"n":1,"even":98,"neg":-5}`, true},
		{"long plain string", `{` + id + `,"n":1,"meta":{"ab":""},"any":"` + strings.Repeat("x", 100) + `"}`, true},
		{"decimal bounds", `{` + id + `,"n":1,"amount":-1.5,"price":0.150}`, true},
		{"decimal below the maximum", `{` + id + `,"n":1,"amount":10.00}`, true},
		{"decimal multiple", `{` + id + `,"n":1,"amount":2.5}`, true},
		{"decimal below minimum", `{` + id + `,"n":1,"amount":-1.75}`, false},
		{"decimal exclusive maximum", `{` + id + `,"n":1,"amount":10.25}`, false},
		{"decimal that wraps an int64 to 0", `{` + id + `,"n":1,"amount":184467440737095516.16}`, false},
		{"decimal not a multiple", `{` + id + `,"n":1,"amount":0.3}`, false},
		{"odd", `{` + id + `,"n":1,"even":3}`, false},
		{"exclusive minimum", `{` + id + `,"n":1,"even":0}`, false},
		{"exclusive maximum", `{` + id + `,"n":1,"even":100}`, false},
		{"negative minimum", `{` + id + `,"n":1,"neg":-6}`, false},
		{"negative integer", `{` + id + `,"n":-1}`, false},
		{"control character", "{" + id + ",\"n\":1,\"ref\":\"a\x01b\"}", false},
		{"required missing", `{"n":1}`, false},
		{"declared member twice", `{` + id + `,"n":1,"n":2}`, false},
		{"declared member twice, escaped", `{` + id + `,"n":1,"\u006e":2}`, false},
		{"undeclared member twice", `{` + id + `,"n":1,"meta":{"a":"x","a":"y"}}`, false},
		{"member twice deep in any", `{` + id + `,"n":1,"any":{"k":[{"x":1,"x":1}]}}`, false},
		{"additional property", `{` + id + `,"n":1,"x":1}`, false},
		{"wrong type", `{` + id + `,"n":"1"}`, false},
		{"not an integer", `{` + id + `,"n":1.5}`, false},
		{"below minimum", `{` + id + `,"n":0}`, false},
		{"above maximum", `{` + id + `,"n":11}`, false},
		{"not a multiple", `{` + id + `,"n":1,"price":0.155}`, false},
		{"bad format", `{"id":"3f6c2a9e","n":1}`, false},
		{"string not in enum", `{` + id + `,"n":1,"kind":"c"}`, false},
		{"number not in enum", `{` + id + `,"n":1,"level":3}`, false},
		{"literal not in enum", `{` + id + `,"n":1,"level":true}`, false},
		{"boolean", `{` + id + `,"n":1,"on":null}`, false},
		{"pattern", `{` + id + `,"n":1,"tags":["A"]}`, false},
		{"items repeated", `{` + id + `,"n":1,"tags":["a","a"]}`, false},
		{"too many items", `{` + id + `,"n":1,"tags":["a","b","c","d"]}`, false},
		{"prefix item", `{` + id + `,"n":1,"pair":["1","a"]}`, false},
		{"items false", `{` + id + `,"n":1,"pair":[1,"a",2]}`, false},
		{"too many properties", `{` + id + `,"n":1,"meta":{"a":"","b":"","c":""}}`, false},
		{"additional schema", `{` + id + `,"n":1,"meta":{"a":"abcd"}}`, false},
		{"ref", `{` + id + `,"n":1,"ref":"a"}`, false},
		{"invalid UTF-8", "{" + id + ",\"n\":1,\"ref\":\"R\xffx\"}", false},
		{"lone surrogate", `{` + id + `,"n":1,"ref":"R\ud800x"}`, false},
		{"trailing comma", `{` + id + `,"n":1,}`, false},
		{"two values", `{` + id + `,"n":1} {}`, false},
		{"cut short", `{` + id + `,"n":1`, false},
		{"not an object", `[]`, false},
		// bounds past an int64 of units: 10 * 2^63 and 10 * 1844674407370955162
		// wrap (to 0 and 4), which made them small bounds
		{"huge minimum", `{` + id + `,"n":1,"huge":0}`, false},
		{"huge minimum met", `{` + id + `,"n":1,"huge":9223372036854775808}`, true},
		{"minimum that wraps", `{` + id + `,"n":1,"wrapmin":5}`, false},
		{"huge negative maximum", `{` + id + `,"n":1,"hugeneg":0}`, false},
		{"huge negative maximum met", `{` + id + `,"n":1,"hugeneg":-9223372036854775809}`, true},
		{"exclusive maximum that wraps", `{` + id + `,"n":1,"wrapexmax":-1}`, false},
		{"multipleOf that wraps", `{` + id + `,"n":1,"wrapmul":8}`, false},
		{"multipleOf that wraps met", `{` + id + `,"n":1,"wrapmul":3689348814741910324}`, true},
		// the member expected next is the property after the last one
		// found (here in sorted order: id, kind, level, meta, n, neg)
		{"members in order", `{` + id + `,"kind":"a","level":1,"meta":{},"n":1,"neg":0}`, true},
		{"expected member twice", `{"kind":"a",` + id + `,"kind":"b","n":1}`, false},
		{"expected name's prefix", `{` + id + `,"meta":{},"n":1,"ne":0}`, false},
		{"expected name longer", `{` + id + `,"meta":{},"nx":1,"n":1}`, false},
		{"expected name escaped", `{` + id + `,"kind":"a","\u006cevel":1,"n":1}`, true},
		{"expected name cut short", `{` + id + `,"kind":"a","lev`, false},
		{"expected name, no quote", `{` + id + `,"kind":"a","level`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scanner
			if got := s.accepts(checks, []byte(tc.text)); got != tc.want {
				t.Errorf("accepts(%s) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

// TestOnePassDraft4 holds the one-pass check to draft 4's boolean
// exclusiveMinimum and exclusiveMaximum (OpenAPI 3.0) on bounds past an
// int64 of units.
func TestOnePassDraft4(t *testing.T) {
	checks := onePassChecks(t, `{
		"$schema": "http://json-schema.org/draft-04/schema#",
		"type": "object",
		"properties": {
			"lo": {"minimum": 9223372036854775808, "exclusiveMinimum": true},
			"hi": {"maximum": -1844674407370955162, "exclusiveMaximum": true},
			"small": {"minimum": 1, "exclusiveMinimum": true}
		}
	}`)
	for _, tc := range []struct {
		name, text string
		want       bool
	}{
		{"exclusive minimum met", `{"lo":9223372036854775809,"hi":-1844674407370955163,"small":2}`, true},
		{"huge exclusive minimum", `{"lo":0}`, false},
		{"huge exclusive minimum at the bound", `{"lo":9223372036854775808}`, false},
		{"exclusive maximum that wraps", `{"hi":-1}`, false},
		{"exclusive maximum that wraps, at the bound", `{"hi":-1844674407370955162}`, false},
		{"small exclusive minimum", `{"small":1}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scanner
			if got := s.accepts(checks, []byte(tc.text)); got != tc.want {
				t.Errorf("accepts(%s) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

// onePassChecks compiles schema, which the one-pass check must cover.
func onePassChecks(t *testing.T, schema string) *schemaCheck {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("mem:///s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem:///s.json")
	if err != nil {
		t.Fatal(err)
	}
	checks, reason := compileChecks(sch, nil)
	if checks == nil || !onePass(checks) {
		t.Fatalf("the schema is not covered by the one-pass check (%s)", reason)
	}
	return checks
}

// TestOnePassExpected: the member expected next is compared as one word
// (a name of at most 7 bytes) or two (at most 15), when 16 or more bytes
// follow its quote, else as a string; either way it must be the whole
// name and its closing quote.
func TestOnePassExpected(t *testing.T) {
	checks := onePassChecks(t, `{"additionalProperties": false, "properties": {
		"a": {}, "abcdefgh": {}, "abcdefghij": {}, "abcdefghijklmnopq": {}, "b": {"type": "string"}}}`)
	pad := `"b":"` + strings.Repeat("x", 20) + `"}`
	for _, tc := range []struct {
		name, text string
		want       bool
	}{
		{"in order", `{"a":1,"abcdefghij":2,"abcdefghijklmnopq":3,` + pad, true},
		{"second word differs", `{"a":1,"abcdefghXY":2,` + pad, false},
		{"quote in the second word", `{"a":1,"abcdefgh":2,` + pad, true},
		{"no quote in the second word", `{"a":1,"abcdefghZ:2,` + pad, false},
		{"first word differs", `{"a":1,"Xbcdefghij":2,` + pad, false},
		{"name longer", `{"a":1,"abcdefghijk":2,` + pad, false},
		{"long name differs", `{"a":1,"abcdefghij":2,"abcdefghijklmnopX":3,` + pad, false},
		{"long name cut short", `{"a":1,"abcdefghij":2,"abcdefghijklmno`, false},
		{"near the end", `{"a":1,"abcdefghij":2,"abcdefghijklmnopq":3,"b":""}`, true},
		{"near the end, differs", `{"a":1,"abcdefghij":2,"abcdefghijklmnopq":3,"bX":""}`, false},
		{"expected twice", `{"abcdefghij":1,"a":2,"abcdefghij":3,` + pad, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scanner
			if got := s.accepts(checks, []byte(tc.text)); got != tc.want {
				t.Errorf("accepts(%s) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

// TestOnePassNeedsEscape: a property whose name a body must escape is
// never expected as its raw bytes, which would take text that is not
// JSON.
func TestOnePassNeedsEscape(t *testing.T) {
	checks := onePassChecks(t, `{"properties": {"a\"b": {}, "c\\d": {}, "e\u0001": {}}}`)
	for _, tc := range []struct {
		name, text string
		want       bool
	}{
		{"escaped", `{"a\"b":1,"c\\d":2,"e\u0001":3}`, true},
		{"quote raw", `{"a"b":1}`, false},
		{"backslash raw", `{"c\d":2}`, false},
		{"control character raw", "{\"e\x01\":3}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s scanner
			if got := s.accepts(checks, []byte(tc.text)); got != tc.want {
				t.Errorf("accepts(%s) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

// TestDeclaredOrder: a document's properties are listed (propList, the
// order the one-pass check expects a body's members in) as the document
// declares them, not sorted.
func TestDeclaredOrder(t *testing.T) {
	s, err := Load("../bench/configs/openapi.yaml", "", "")
	if err != nil {
		t.Fatal(err)
	}
	var pv pathValues
	_, op := s.match("POST", "/orders", &pv)
	c := op.body.media[0].checks
	for c.via != nil {
		c = c.via
	}
	var got []string
	for _, p := range c.propList[:4] {
		got = append(got, strings.TrimSuffix(p.quoted, `"`))
	}
	if want := []string{"id", "created", "delivery_date", "reference"}; !slices.Equal(got, want) {
		t.Errorf("first properties %q, want %q", got, want)
	}
}

// TestUnitsAt: a JSON number read as units of 10^-scale, with where it
// ends; false for what is not a JSON number and what the units cannot
// hold (the one-pass check then reads the number as before).
func TestUnitsAt(t *testing.T) {
	for _, tc := range []struct {
		text  string
		scale int
		end   int
		v     int64
		point bool
		ok    bool
	}{
		{"0", 0, 1, 0, false, true},
		{"-0", 0, 2, 0, false, true},
		{"12,", 0, 2, 12, false, true},
		{"-7}", 2, 2, -700, false, true},
		{"1234.56", 2, 7, 123456, true, true},
		{"0.01]", 2, 4, 1, true, true},
		{"1.50", 1, 4, 15, true, true},
		{"99999999999999999", 0, 17, 0, false, false}, // 10^17 units or more
		{"9999999999999999", 0, 16, 9999999999999999, false, true},
		{"9999999999999999", 1, 16, 0, false, false},
		{"1.5", 0, 3, 0, true, false},
		{"01", 0, 2, 0, false, false},
		{"-", 0, 1, 0, false, false},
		{"-a", 0, 1, 0, false, false},
		{"1.", 2, 2, 0, true, false},
		{"1.x", 2, 2, 0, true, false},
		{"1e2", 0, 1, 0, false, false},
		{"1.0E2", 1, 3, 0, true, false},
	} {
		j, v, point, ok := unitsAt([]byte(tc.text), 0, tc.scale)
		if ok != tc.ok || ok && (j != tc.end || v != tc.v || point != tc.point) {
			t.Errorf("unitsAt(%q, %d) = %d, %d, %v, %v; want %d, %d, %v, %v", tc.text, tc.scale, j, v, point, ok, tc.end, tc.v, tc.point, tc.ok)
		}
	}
}
