package caddypermcache

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Placeholder kinds that the handler resolves straight from the request,
// without going through Caddy's replacer (which boxes every value).
const (
	segLiteral = iota
	segPlaceholder
	segMethod // {http.request.method}
	segPath   // {http.request.uri.path}
	segHost   // {http.request.host}
	segUserID // {http.auth.user.id}
)

// MaxKeyTemplateLen bounds the length of a key template.
const MaxKeyTemplateLen = 4096

type keySegment struct {
	kind int
	text string // literal text, or the placeholder name
}

// KeyTemplate is a parsed cache key template: literal text and Caddy
// placeholders such as {http.auth.user.id}. A backslash before a brace
// (`\{`, `\}`) makes it literal, as in Caddy's replacer.
//
// A rendered key is not the plain concatenation of the values: each
// placeholder value is written as its length (uvarint) and then its bytes,
// so values that contain the template's literal text cannot make two
// different requests share a key (subject "a b" with path "/c" versus
// subject "a" with path "b /c").
type KeyTemplate struct {
	raw  string
	segs []keySegment
}

// ParseKeyTemplate parses a key template. Unclosed or empty placeholders,
// and a template without any placeholder, are errors.
func ParseKeyTemplate(s string) (*KeyTemplate, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty key template")
	}
	if len(s) > MaxKeyTemplateLen {
		return nil, fmt.Errorf("key template longer than %d bytes", MaxKeyTemplateLen)
	}
	t := &KeyTemplate{raw: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.segs = append(t.segs, keySegment{kind: segLiteral, text: lit.String()})
			lit.Reset()
		}
	}
	placeholders := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '{' || s[i+1] == '}'):
			lit.WriteByte(s[i+1])
			i++
		case c == '{':
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return nil, fmt.Errorf("key template %s: unclosed placeholder at byte %d", strconv.Quote(s), i)
			}
			name := s[i+1 : i+1+end]
			if name == "" {
				return nil, fmt.Errorf("key template %s: empty placeholder at byte %d", strconv.Quote(s), i)
			}
			if strings.ContainsAny(name, "{\\ \t\r\n") {
				return nil, fmt.Errorf("key template %s: invalid placeholder name %s", strconv.Quote(s), strconv.Quote(name))
			}
			flush()
			t.segs = append(t.segs, keySegment{kind: placeholderKind(name), text: name})
			placeholders++
			i += end + 1
		case c == '}':
			return nil, fmt.Errorf("key template %s: unmatched '}' at byte %d (write \\} for a literal brace)", strconv.Quote(s), i)
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	if placeholders == 0 {
		return nil, fmt.Errorf("key template %s has no placeholder: every request would share one decision", strconv.Quote(s))
	}
	return t, nil
}

func placeholderKind(name string) int {
	switch name {
	case "http.request.method":
		return segMethod
	case "http.request.uri.path":
		return segPath
	case "http.request.host":
		return segHost
	case "http.auth.user.id":
		return segUserID
	}
	return segPlaceholder
}

// String returns the template as written.
func (t *KeyTemplate) String() string { return t.raw }

// Placeholders returns the placeholder names in order.
func (t *KeyTemplate) Placeholders() []string {
	var out []string
	for _, s := range t.segs {
		if s.kind != segLiteral {
			out = append(out, s.text)
		}
	}
	return out
}

// appendValue appends one placeholder value in the key encoding.
func appendValue(dst []byte, v string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// Render builds the key for the given placeholder values, in template order
// (missing values are empty). It is the slow, allocating form of what the
// handler does per request, for tests and for invalidation.
func (t *KeyTemplate) Render(values ...string) string {
	return string(t.appendRender(nil, values, len(t.segs)))
}

// Prefix renders the key up to and including the literal text that
// follows the n-th placeholder given in values (n = len(values)); use it
// with Cache.InvalidatePrefix, e.g. Prefix("alice") for the default
// template drops every decision keyed on subject alice.
func (t *KeyTemplate) Prefix(values ...string) string {
	// stop before the placeholder after the last given value
	n, seen := len(t.segs), 0
	for i, s := range t.segs {
		if s.kind != segLiteral {
			if seen == len(values) {
				n = i
				break
			}
			seen++
		}
	}
	return string(t.appendRender(nil, values, n))
}

func (t *KeyTemplate) appendRender(dst []byte, values []string, n int) []byte {
	vi := 0
	for _, s := range t.segs[:n] {
		if s.kind == segLiteral {
			dst = append(dst, s.text...)
			continue
		}
		v := ""
		if vi < len(values) {
			v = values[vi]
		}
		vi++
		dst = appendValue(dst, v)
	}
	return dst
}

// hostOnly strips the port from a Host header value exactly like Caddy's
// {http.request.host} (net.SplitHostPort, else the value unchanged), but
// without allocating when there is no port.
func hostOnly(h string) string {
	if strings.ContainsAny(h, "[]") {
		// only the exact form [host]:port is split
		if len(h) > 0 && h[0] == '[' {
			end := strings.IndexByte(h, ']')
			if end > 0 && end+1 < len(h) && h[end+1] == ':' &&
				!strings.ContainsAny(h[end+2:], "[]:") && !strings.ContainsAny(h[1:end], "[") {
				return h[1:end]
			}
		}
		return h
	}
	i := strings.LastIndexByte(h, ':')
	if i < 0 || strings.IndexByte(h[:i], ':') >= 0 {
		return h
	}
	return h[:i]
}
