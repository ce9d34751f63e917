package auditchain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string in canonical (RFC 8785) form:
// only '"', '\\' and control characters are escaped. Invalid UTF-8 becomes
// U+FFFD, as a JSON decoder would read it.
func AppendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = utf8.AppendRune(buf, utf8.RuneError)
			i++
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// AppendNumber appends f as RFC 8785 (ECMAScript) writes a number.
func AppendNumber(buf []byte, f float64) []byte {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return append(buf, "null"...) // not valid JSON numbers; never produced
	case f == 0:
		return append(buf, '0')
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(buf, f, 'f', -1, 64)
	}
	// Exponent form: Go writes e-07 / e+21, ECMAScript e-7 / e+21.
	start := len(buf)
	buf = strconv.AppendFloat(buf, f, 'e', -1, 64)
	e := bytes.IndexByte(buf[start:], 'e') + start
	digits := e + 2
	for digits < len(buf)-1 && buf[digits] == '0' {
		buf = append(buf[:digits], buf[digits+1:]...)
	}
	return buf
}

// Canonical returns the RFC 8785 form of a JSON value. A member name that
// appears twice in one object is an error: a verifier must not pick one of
// two values silently.
func Canonical(raw []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	buf, err := appendValue(nil, d)
	if err != nil {
		return nil, err
	}
	// Only white space may follow the value: a decoder error here is
	// trailing garbage (`{"a":1}}`), not the end of the input.
	switch _, err := d.Token(); err {
	case io.EOF:
		return buf, nil
	case nil:
		return nil, fmt.Errorf("more than one JSON value")
	default:
		return nil, fmt.Errorf("after the JSON value: %w", err)
	}
}

func appendValue(buf []byte, d *json.Decoder) ([]byte, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			type member struct {
				key string
				val []byte
			}
			var ms []member
			seen := map[string]bool{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if seen[k] {
					return nil, fmt.Errorf("member %q appears twice", k)
				}
				seen[k] = true
				v, err := appendValue(nil, d)
				if err != nil {
					return nil, err
				}
				ms = append(ms, member{k, v})
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			slices.SortFunc(ms, func(a, b member) int { return compareUTF16(a.key, b.key) })
			buf = append(buf, '{')
			for i, m := range ms {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = AppendString(buf, m.key)
				buf = append(buf, ':')
				buf = append(buf, m.val...)
			}
			return append(buf, '}'), nil
		case '[':
			buf = append(buf, '[')
			for i := 0; d.More(); i++ {
				if i > 0 {
					buf = append(buf, ',')
				}
				if buf, err = appendValue(buf, d); err != nil {
					return nil, err
				}
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return append(buf, ']'), nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return AppendString(buf, t), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", t, err)
		}
		return AppendNumber(buf, f), nil
	case bool:
		return strconv.AppendBool(buf, t), nil
	case nil:
		return append(buf, "null"...), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// compareUTF16 orders member names by their UTF-16 code units, as RFC 8785
// requires.
func compareUTF16(a, b string) int {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}
