package caddyopenapi

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzScan holds the scanner to encoding/json on any bytes: it accepts a
// text exactly when encoding/json finds it valid JSON that is also
// I-JSON (UTF-8, no lone surrogate escape, no member name twice in an
// object), and the values it reads off its tape are the values
// encoding/json decodes (UseNumber).
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a": [1, -2.5e3, "x\u00e9\ud83d\ude00", true, false, null, {}], "b": {"c": []}}`,
		`{"kind":"a","kind":"b"}`, `{"a":1,"\u0061":2}`, `{"ab":1,"ba":2,"abc":3,"a\"c":4}`,
		"[\"R\xffx\"]", `{"a":"R\ud800x"}`, `["\udc00"]`, `["\ud800\u0041"]`, `["\\ud800"]`,
		`{"a":}`, `[01]`, `[-0.0e+1, 1E2, 0.5]`, " [ 1 , {\t\"a\" :\r\n2 } ] ", `"plain string of more than eight bytes"`,
		`{"a":{},"a":1}`, `{"a":{"b":1},"b":2}`, `{"a":[{}],"b":{"a":{}},"c":0}`, `{"` + strings.Repeat("k", 70) + `":1}`, `{` + manyMembers(70) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		want := json.Valid(text) && utf8.Valid(text) && !loneSurrogate(text) && !duplicateKey(text)
		var s scanner
		got := s.scan(text)
		if got != want {
			t.Fatalf("scan(%q) = %v (%v), encoding/json and I-JSON say %v", text, got, s.violation("body"), want)
		}
		// the one-pass check with no schema accepts only I-JSON
		var p scanner
		if acc := p.accepts(nil, text); acc && !want {
			t.Fatalf("the one-pass check accepts %q, encoding/json and I-JSON refuse it", text)
		}
		if !got {
			return
		}
		d := json.NewDecoder(bytes.NewReader(text))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if tv := s.value(0); !reflect.DeepEqual(tv, v) {
			t.Fatalf("scan(%q) read %#v, encoding/json %#v", text, tv, v)
		}
	})
}

// loneSurrogate reports whether a valid JSON text has a \u escape of a
// surrogate that is not a high one followed by a low one.
func loneSurrogate(text []byte) bool {
	in := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '"':
			in = !in
		case in && c == '\\':
			if text[i+1] != 'u' {
				i++
				continue
			}
			r, _ := hex4(text, i+2)
			i += 5
			switch {
			case r >= 0xDC00 && r < 0xE000:
				return true
			case r >= 0xD800 && r < 0xDC00:
				if i+6 >= len(text) || text[i+1] != '\\' || text[i+2] != 'u' {
					return true
				}
				lo, _ := hex4(text, i+3)
				if lo < 0xDC00 || lo >= 0xE000 {
					return true
				}
				i += 6
			}
		}
	}
	return false
}

// duplicateKey reports whether a valid JSON text (UTF-8, no lone
// surrogate) has an object with a member name twice.
func duplicateKey(text []byte) bool {
	d := json.NewDecoder(bytes.NewReader(text))
	type level struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token of an object is a key
	}
	var open []*level
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return false // invalid: the caller's json.Valid decides
		}
		var top *level
		if len(open) > 0 {
			top = open[len(open)-1]
		}
		if top != nil && top.object && top.key {
			if delim, ok := tok.(json.Delim); !ok || delim != '}' {
				k := tok.(string)
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, &level{keys: map[string]bool{}, object: true, key: true})
		case json.Delim('['):
			open = append(open, &level{})
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
		// a value ended: an object's next token is a key
		if len(open) > 0 && tok != json.Delim('{') && tok != json.Delim('[') {
			if top := open[len(open)-1]; top.object {
				top.key = true
			}
		}
	}
}
