package identity

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ClaimPath is a parsed path into a claim set, such as realm_access.roles.
//
// Syntax: segments separated by dots. A backslash escapes the next
// character, so a claim name that contains a dot is written with `\.`
// (`https://example\.com/roles`). Slashes and every other character need
// no escaping. Lookup first tries the whole unparsed path as one top-level
// claim name, so namespaced claims such as `https://example.com/roles` work
// without escaping as long as no nested path with the same spelling exists.
type ClaimPath struct {
	raw      string
	segments []string
}

// MaxClaimPathLen bounds the length of a claim path.
const MaxClaimPathLen = 1024

// ParseClaimPath parses a dotted claim path. Empty segments (`a..b`, a
// leading or trailing dot) and a trailing lone backslash are errors.
func ParseClaimPath(s string) (ClaimPath, error) {
	if s == "" {
		return ClaimPath{}, fmt.Errorf("empty claim path")
	}
	if len(s) > MaxClaimPathLen {
		return ClaimPath{}, fmt.Errorf("claim path longer than %d bytes", MaxClaimPathLen)
	}
	var segs []string
	var cur strings.Builder
	escaped := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			cur.WriteByte(c)
			escaped = false
		case c == '\\':
			escaped = true
		case c == '.':
			if cur.Len() == 0 {
				return ClaimPath{}, fmt.Errorf("claim path %s: empty segment at byte %d", strconv.Quote(s), i)
			}
			segs = append(segs, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if escaped {
		return ClaimPath{}, fmt.Errorf("claim path %s: ends with a lone backslash", strconv.Quote(s))
	}
	if cur.Len() == 0 {
		return ClaimPath{}, fmt.Errorf("claim path %s: empty last segment", strconv.Quote(s))
	}
	segs = append(segs, cur.String())
	return ClaimPath{raw: s, segments: segs}, nil
}

// String returns the path as written.
func (p ClaimPath) String() string { return p.raw }

// Segments returns the unescaped path segments.
func (p ClaimPath) Segments() []string { return p.segments }

// Lookup returns the value at the path in claims. It does not allocate.
func (p ClaimPath) Lookup(claims map[string]any) (any, bool) {
	if claims == nil || len(p.segments) == 0 {
		return nil, false
	}
	if len(p.segments) > 1 {
		// a namespaced claim name written without escapes
		if v, ok := claims[p.raw]; ok {
			return v, true
		}
	}
	var cur any = claims
	for _, seg := range p.segments {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[seg]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

// EachString calls fn for every string in a claim value: each element of an
// array of strings, or each part of a string split on spaces and commas
// (OAuth `scope` style). It returns an error naming the type when the value
// is neither (a number, an object, an array holding a non-string). It does
// not allocate. fn returns false to stop early.
func EachString(v any, fn func(string) bool) error {
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		start := -1
		for i := 0; i <= len(t); i++ {
			if i == len(t) || t[i] == ' ' || t[i] == ',' || t[i] == '\t' {
				if start >= 0 {
					if !fn(t[start:i]) {
						return nil
					}
					start = -1
				}
				continue
			}
			if start < 0 {
				start = i
			}
		}
		return nil
	case []any:
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("element %d is %s, not a string", i, TypeName(e))
			}
			if !fn(s) {
				return nil
			}
		}
		return nil
	case []string:
		for _, s := range t {
			if !fn(s) {
				return nil
			}
		}
		return nil
	default:
		return fmt.Errorf("claim is %s, not a string or an array of strings", TypeName(v))
	}
}

// Strings returns the strings of a claim value as EachString walks them.
func Strings(v any) ([]string, error) {
	var out []string
	err := EachString(v, func(s string) bool { out = append(out, s); return true })
	return out, err
}

// TypeName names the JSON type of a decoded claim value, for error messages.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any, []string:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// Stringify renders a claim value for a placeholder or header: strings as
// they are, arrays joined with ",", numbers without exponent, objects as
// compact JSON.
func Stringify(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = Stringify(e)
		}
		return strings.Join(parts, ",")
	case []string:
		return strings.Join(t, ",")
	default:
		b, err := json.Marshal(t)
		if err != nil {
			return ""
		}
		return string(b)
	}
}

func errNotString(e any) error { return fmt.Errorf("roles claim holds %s", TypeName(e)) }
