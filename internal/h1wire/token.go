// Package h1wire holds the HTTP/1.1 wire code that both sides of the
// gateway share: the upstream transport (caddyh1) parsing responses and the
// fast path (fastpath) parsing requests. Both are strict in the same way
// (RFC 9112): tokens, field values, chunked framing and the read buffer
// that holds a whole head in place are one implementation.
package h1wire

import (
	"math/bits"
	"net/textproto"
	"strings"
)

// IsTokenByte reports whether c may appear in a token (RFC 9110 5.6.2).
func IsTokenByte(c byte) bool { return tokenTable[c] }

var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// ValidToken reports whether s is a non-empty token.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !IsTokenByte(s[i]) {
			return false
		}
	}
	return true
}

// TrimOWS trims optional whitespace (SP, HTAB) from both ends.
func TrimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// NextListItem splits a comma-separated list: the first item, trimmed, and
// the rest.
func NextListItem(v string) (item, rest string) {
	i := strings.IndexByte(v, ',')
	if i < 0 {
		return TrimOWS(v), ""
	}
	return TrimOWS(v[:i]), v[i+1:]
}

// HasToken reports whether the comma-separated list v holds token,
// ignoring ASCII case.
func HasToken(v, token string) bool {
	for v != "" {
		var item string
		item, v = NextListItem(v)
		if EqualFoldASCII(item, token) {
			return true
		}
	}
	return false
}

// EqualFoldASCII compares ignoring ASCII case only.
func EqualFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// ParseDigits parses a non-negative decimal of at most 18 digits, nothing
// else (no sign, no whitespace): a Content-Length value.
func ParseDigits(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// FieldName scans a field line up to its colon in one pass: it returns
// the name (line up to the colon) in canonical form, as CanonicalKey
// would, and the colon's index; or, at the first byte before any colon
// that a token may not hold, bad as that byte's index (colon -1). colon
// and bad are both -1 when the line has no colon and only token bytes.
func FieldName(line string) (name string, colon, bad int) {
	i := strings.IndexByte(line, ':')
	if i < 0 {
		return fieldNameSlow(line)
	}
	// one table load and two bit operations a byte: acc collects the
	// bytes no token holds, a lower-case letter at a word's start (after
	// the start or a '-') and an upper-case one elsewhere
	acc, prev := uint8(0), uint8(nameBitDash)
	for _, c := range []byte(line[:i]) {
		t := nameBits[c]
		acc |= t & (nameBitBad | nameBitUpper>>(prev>>3))
		prev = t
	}
	switch {
	case acc == 0:
		return line[:i], i, -1
	case acc&nameBitBad != 0:
		return fieldNameSlow(line)
	}
	return canonicalSlow(line[:i]), i, -1
}

// the bits of a byte in a field name (nameBits): nameBitUpper>>1 is
// nameBitLower, and nameBitDash is the highest
const (
	nameBitBad   = 1 << iota // not a token byte
	nameBitLower             // a-z
	nameBitUpper             // A-Z
	nameBitDash              // '-'
)

var nameBits = func() (t [256]uint8) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z':
			t[c] = nameBitLower
		case 'A' <= c && c <= 'Z':
			t[c] = nameBitUpper
		case c == '-':
			t[c] = nameBitDash
		case !tokenTable[c]:
			t[c] = nameBitBad
		}
	}
	return t
}()

// fieldNameSlow is FieldName a byte at a time, for the lines with no
// colon or with a byte no token holds before it.
func fieldNameSlow(line string) (name string, colon, bad int) {
	canonical, upper := true, true
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == ':' {
			if canonical {
				return line[:i], i, -1
			}
			return canonicalSlow(line[:i]), i, -1
		}
		switch nameBits[c] {
		case nameBitBad:
			return "", -1, i
		case nameBitLower:
			canonical = canonical && !upper
		case nameBitUpper:
			canonical = canonical && upper
		}
		upper = c == '-'
	}
	return "", -1, -1
}

// CanonicalKey returns the canonical form of a field name made of token
// bytes, as textproto.CanonicalMIMEHeaderKey would, without allocating
// when the name is already canonical or is a common one.
func CanonicalKey(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return canonicalSlow(name)
		}
		upper = c == '-'
	}
	return name
}

func canonicalSlow(name string) string {
	var buf [64]byte
	if len(name) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(name)
	}
	b := buf[:len(name)]
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
		upper = c == '-'
	}
	if k, ok := commonKeys[string(b)]; ok { // no allocation: a lookup by converted bytes
		return k
	}
	return string(b)
}

var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		// responses
		"Accept-Ranges", "Access-Control-Allow-Origin", "Age", "Cache-Control",
		"Connection", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Location", "Content-Range", "Content-Security-Policy",
		"Content-Type", "Date", "Etag", "Expires", "Keep-Alive", "Last-Modified",
		"Link", "Location", "Pragma", "Retry-After", "Server", "Set-Cookie",
		"Strict-Transport-Security", "Trailer", "Transfer-Encoding", "Vary",
		"Www-Authenticate", "X-Content-Type-Options", "X-Frame-Options",
		"X-Powered-By", "X-Request-Id",
		// requests
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cookie",
		"Expect", "Host", "If-Modified-Since", "If-None-Match", "Origin", "Range",
		"Referer", "Te", "Upgrade", "User-Agent", "X-Forwarded-For",
		"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
	} {
		m[k] = k
	}
	return m
}()

// HeadFault is what CountLines found wrong with a head's bytes.
type HeadFault uint8

const (
	HeadOK      HeadFault = iota
	BareCR                // a CR not followed by LF
	BareLF                // an LF not preceded by CR
	ControlByte           // a control byte other than HTAB
)

// CountLines checks every byte of a head once (a CR only in a CRLF pair, no
// other LF, no control byte but HTAB) and counts its CRLF-ended lines. It
// skips eight clean bytes at a time (skipClean).
func CountLines(b []byte) (int, HeadFault, byte) {
	lines := 0
	for i := skipClean(b, 0); i < len(b); i = skipClean(b, i) {
		switch c := b[i]; c {
		case '\t':
			i++
		case '\r':
			if i+1 >= len(b) || b[i+1] != '\n' {
				return lines, BareCR, c
			}
			i += 2
			lines++
		case '\n':
			return lines, BareLF, c
		default:
			return lines, ControlByte, c
		}
	}
	return lines, HeadOK, 0
}

// SkipClean returns the index of the first control byte (below 0x20,
// HTAB included, or DEL) of b at or after i, or len(b), eight bytes at a
// time.
func SkipClean(b []byte, i int) int { return skipClean(b, i) }

// ValidFieldValue reports whether v may be a field value on the wire: no
// control byte but HTAB (httpguts.ValidHeaderFieldValue's rule, eight
// bytes at a time).
func ValidFieldValue(v string) bool {
	for i := skipClean(v, 0); i < len(v); i = skipClean(v, i+1) {
		if v[i] != '\t' {
			return false
		}
	}
	return true
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// skipClean returns the index of the first control byte (below 0x20,
// HTAB included, or DEL) of b at or after i, or len(b). A word of eight
// bytes is tested at once: x - 0x20 borrows into a byte's top bit (with x's
// own top bit clear) exactly where the byte is below 0x20, and x ^ 0x7f is
// zero where it is DEL. A borrow only runs upward, so the lowest flagged
// byte is the first control byte.
func skipClean[T string | []byte](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		w := b[i : i+8] // (one bounds check for the eight loads, one MOVQ)
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		y := x ^ (lo8 * 0x7f)
		if m := ((x-lo8*0x20)&^x | (y-lo8)&^y) & hi8; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == 0x7f {
			return i
		}
	}
	return i
}
