package caddyopenapi

import (
	"encoding/binary"
	"math/bits"
	"net/http"
	"unicode/utf8"
	"unsafe"
)

// A parameter whose value is one scalar (an integer, a number, a string,
// a boolean: not an array, an object or JSON content) written plainly (a
// simple path segment, a form query value given once, a header given on
// one line) is checked on its text: its kind found as the tape would
// write it (scalarKind), then the one-pass check's scalar checks
// (onepass.go), with no scanner, no tape and no copy. Like the one-pass
// check it only accepts: a value it does not accept, or does not decide
// (escaped query text, a value given twice, a format the library
// decides), is decoded and checked as before, so a refusal's violations
// do not change.

// scalarCheck returns the checks of p's value when checkScalar may
// decide it: a scalar in a style that writes it as it is, whose schema
// the one-pass check covers.
func scalarCheck(p *param) *schemaCheck {
	if p.checks == nil || p.json || p.isArray() || p.isObject() || !onePass(p.checks) {
		return nil
	}
	switch {
	case p.in == inPath && p.style == "simple",
		p.in == inQuery && p.style != "deepObject",
		p.in == inHeader:
		return p.checks
	}
	return nil
}

// checkScalar reports whether p, a parameter with a scalar check, is
// valid on the request as it is: present and accepted by its checks, or
// absent and not required. False says nothing: the decoding and the
// tape decide.
func (p *param) checkScalar(r *http.Request, vals *pathValues) bool {
	var v string
	switch p.in {
	case inPath:
		v = vals.get(p.pathIdx)
	case inQuery:
		var n int
		if v, n = queryValue(r.URL.RawQuery, p.name); n < 0 || n > 1 {
			return false
		} else if n == 0 {
			return !p.required
		}
	case inHeader:
		vs := r.Header[p.name]
		if len(vs) == 0 {
			return !p.required
		}
		if len(vs) > 1 {
			return false
		}
		v = vs[0]
	}
	return acceptsScalar(p.scalar, v, p.shape)
}

// acceptsScalar reports whether the one-pass check accepts v, written
// as the JSON value scalarKind makes of it, against c.
func acceptsScalar(c *schemaCheck, v string, sh *shape) bool {
	for c.via != nil {
		c = c.via
	}
	if c.always != 0 {
		return c.always > 0
	}
	switch k := scalarKind(v, sh); k {
	case kNumber:
		return c.passNumber(unsafe.Slice(unsafe.StringData(v), len(v)), plainInteger(v))
	case kString:
		// the one-pass check reads strings that are UTF-8 (a body's);
		// a pattern that takes ASCII only refuses any other text
		return (c.asciiOnly || utf8.ValidString(v)) && c.passString(v)
	default:
		return c.passLiteral(k)
	}
}

// plainInteger reports whether JSON number text has no fraction and no
// exponent (the scanner's plainInt).
func plainInteger(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// queryMarks are the bytes queryValue looks at: the pair's end and
// what changes how a pair reads.
var queryMarks = setOf("&=;%+")

// queryValue finds the value of name in a raw query, as queryPairs and
// decodeQuery find it: n is how many pairs name it (the value is the
// first's), or -1 when a key or the value is escaped (% or +) and only
// decoding tells.
func queryValue(raw, name string) (v string, n int) {
	// one pass over the bytes: most queries are a few short pairs,
	// where a search per separator costs more than the bytes
	for i := 0; i < len(raw); i++ {
		start, eq := i, -1
		semicolon, escKey, escVal := false, false, false
		for ; ; i++ {
			if i = nextQueryMark(raw, i); i == len(raw) || raw[i] == '&' {
				break
			}
			switch raw[i] {
			case '=':
				if eq < 0 {
					eq = i
				}
			case ';':
				semicolon = true
			case '%', '+':
				if eq < 0 {
					escKey = true
				} else {
					escVal = true
				}
			}
		}
		if i == start || semicolon {
			continue // as queryPairs: left out
		}
		if escKey {
			return "", -1
		}
		k, val := raw[start:i], ""
		if eq >= 0 {
			k, val = raw[start:eq], raw[eq+1:i]
		}
		if k != name {
			continue
		}
		if escVal {
			return "", -1
		}
		if n == 0 {
			v = val
		}
		n++
	}
	return v, n
}

// nextQueryMark returns the position of the first of queryMarks in
// raw[i:], or len(raw). It tests eight bytes at a time: a query's
// pairs are mostly ordinary bytes, and a byte at a time cost some 8
// instructions each.
func nextQueryMark(raw string, i int) int {
	for ; i+8 <= len(raw); i += 8 {
		w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(raw[i:]), 8))
		if m := zeroBytes(w^bytesOf('&')) | zeroBytes(w^bytesOf('=')) | zeroBytes(w^bytesOf(';')) |
			zeroBytes(w^bytesOf('%')) | zeroBytes(w^bytesOf('+')); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(raw) && !queryMarks.has(raw[i]); i++ {
	}
	return i
}

// bytesOf is c in each byte of a word.
func bytesOf(c byte) uint64 { return 0x0101010101010101 * uint64(c) }

// zeroBytes has the high bit of each byte of w that is zero set, up to
// the first such byte; a byte above it may be marked as well (the
// subtraction's borrow), so only the lowest mark is exact.
func zeroBytes(w uint64) uint64 {
	return (w - 0x0101010101010101) &^ w & 0x8080808080808080
}
