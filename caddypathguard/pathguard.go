package caddypathguard

import (
	"bytes"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// The reasons a path is refused, as the 400's body, the audit event and
// the {http.error.message} placeholder name them. They name the class of
// the path, never its bytes.
const (
	// ReasonDotSegment: a "." or ".." segment (reject mode), or a segment
	// of only dots and spaces that is neither ("...", ".. ": Windows drops
	// trailing dots and spaces from a name), in either mode.
	ReasonDotSegment = "dot segment"
	// ReasonEncodedDot: a "." or ".." segment written with %2e (reject mode).
	ReasonEncodedDot = "encoded dot segment"
	// ReasonDotParams: a dot segment with ";" parameters ("..;", "..;x=1"),
	// which a servlet container reads as "..".
	ReasonDotParams = "dot segment with parameters"
	// ReasonEmptyParams: a segment of ";" parameters alone ("/;x/admin"),
	// which a servlet container reads as an empty segment and drops.
	ReasonEmptyParams = "empty segment with parameters"
	// ReasonParams: ";" parameters on any segment (option reject_params).
	ReasonParams = "path parameters"
	// ReasonBackslash: "\" or %5C, which IIS and some frameworks read as "/".
	ReasonBackslash = "backslash"
	// ReasonEncodedSlash: %2F, or (with keep_encoded_slash) a %2F that
	// makes an empty or dot segment, or sits beside a dot segment in
	// normalize mode.
	ReasonEncodedSlash = "encoded slash"
	// ReasonDoubleEncoding: %25 encoding a byte that would be refused
	// once decoded again ("%252e%252e", "%255c", "%2500").
	ReasonDoubleEncoding = "double encoding"
	// ReasonControl: a NUL or another control byte (%00-%1F, %7F).
	ReasonControl = "control character"
	// ReasonUTF8: decoded bytes that are not valid UTF-8, overlong forms
	// such as %c0%ae included.
	ReasonUTF8 = "invalid UTF-8"
	// ReasonEscape: a "%" not followed by two hex digits.
	ReasonEscape = "invalid percent-encoding"
	// ReasonUnicode: a full-width or other look-alike of "/" or "\", or a
	// segment of look-alike dots, which Unicode (NFKC) and Windows
	// best-fit mappings turn into the ASCII character.
	ReasonUnicode = "unicode dot or slash"
)

// maxLevels is how many percent-decodings a segment is examined through
// (a triple-decoding application is covered; a fourth level still holding
// an escape is refused as double encoding).
const maxLevels = 4

// Rules are path_guard's settings. The zero value is the default.
type Rules struct {
	// KeepEncodedSlash lets %2F (and %2f) stand inside a segment
	// ("group%2Fproject"), as long as the parts it separates are ordinary
	// segments: not empty, not dot segments.
	KeepEncodedSlash bool
	// RejectParams refuses ";" parameters on every segment, not only on
	// dot segments: a servlet container reads "/admin;x/y" as "/admin/y".
	RejectParams bool
}

// Forwarded returns the path an upstream receives for a request URL
// whose RawPath and Path are given, as url.URL.EscapedPath computes it,
// without allocating: RawPath when it is a valid encoding of Path, else
// Path itself, with decoded true (the upstream then receives Path with
// the default escaping, which changes no byte that matters here).
func Forwarded(rawPath, path string) (p string, decoded bool) {
	if rawPath != "" && validEncoded(rawPath) && decodesTo(rawPath, path) {
		return rawPath, false
	}
	return path, true
}

// Check reports why the escaped path p (what the upstream receives) is
// refused in reject mode, or "" when it is normal.
func (ru Rules) Check(p string) string { return ru.check(p, false) }

// CheckDecoded is Check for a decoded path (url.URL.Path, when Forwarded
// says decoded).
func (ru Rules) CheckDecoded(path string) string { return ru.check(path, true) }

// Normalize returns the escaped path p normalized: percent-encoded
// unreserved characters decoded, slashes merged and dot segments removed
// (RFC 3986 5.2.4), every other byte as it was. It returns p itself
// (no allocation) when p is already normal, and a reason instead when p
// cannot be normalized safely.
func (ru Rules) Normalize(p string) (string, string) { return ru.normalize(p, false) }

// NormalizeDecoded is Normalize for a decoded path: it merges slashes and
// removes dot segments.
func (ru Rules) NormalizeDecoded(path string) (string, string) { return ru.normalize(path, true) }

// CheckURL is Check for the path a request URL forwards, given its
// RawPath and Path (see Forwarded).
func (ru Rules) CheckURL(rawPath, path string) string {
	p, decoded := Forwarded(rawPath, path)
	return ru.check(p, decoded)
}

// NormalizeURL is Normalize for the path a request URL forwards, given
// its RawPath and Path: out is the normalized path, escaped (a RawPath)
// or, when decoded, a Path to be escaped the default way; changed is
// false when the path was already normal (out is then the input, not a
// copy).
func (ru Rules) NormalizeURL(rawPath, path string) (out string, decoded, changed bool, reason string) {
	p, decoded := Forwarded(rawPath, path)
	out, reason = ru.normalize(p, decoded)
	return out, decoded, reason == "" && out != p, reason
}

func (ru Rules) check(p string, decoded bool) string {
	if !attention(p) {
		return ""
	}
	for rest, more := p, true; more; {
		var seg string
		seg, rest, more = cutSegment(rest)
		sc := ru.segment(seg, decoded)
		switch {
		case sc.reason != "":
			return sc.reason
		case sc.dot != 0 && sc.encoded:
			return ReasonEncodedDot
		case sc.dot != 0:
			return ReasonDotSegment
		}
	}
	return ""
}

func (ru Rules) normalize(p string, decoded bool) (string, string) {
	if !attention(p) && !strings.Contains(p, "//") {
		return p, ""
	}
	var dots, empty, unreserved, keptSlash bool
	n := 0
	for rest, more := p, true; more; n++ {
		var seg string
		seg, rest, more = cutSegment(rest)
		sc := ru.segment(seg, decoded)
		if sc.reason != "" {
			return "", sc.reason
		}
		dots = dots || sc.dot != 0
		unreserved = unreserved || sc.unreserved
		keptSlash = keptSlash || sc.slash
		if seg == "" && n > 0 && more {
			empty = true // "//" (a trailing "/" is an empty last segment, kept)
		}
	}
	if dots && keptSlash {
		// The matchers read %2F as "/": a dot segment would be resolved
		// over other segments than the ones forwarded.
		return "", ReasonEncodedSlash
	}
	if !dots && !empty && !unreserved {
		return p, ""
	}
	var b strings.Builder
	b.Grow(len(p))
	if strings.HasPrefix(p, "/") {
		b.WriteByte('/')
	}
	wrote := false
	for rest, more := p, true; more; {
		var seg string
		seg, rest, more = cutSegment(rest)
		if seg != "" {
			if wrote {
				b.WriteByte('/')
			}
			if decoded {
				b.WriteString(seg)
			} else {
				writeDecodedUnreserved(&b, seg)
			}
			wrote = true
		}
	}
	if wrote && strings.HasSuffix(p, "/") {
		b.WriteByte('/')
	}
	return RemoveDotSegments(b.String()), ""
}

// cutSegment returns the first segment of s (up to a "/") and what
// follows that "/"; more is false for the last segment. A leading "/"
// makes an empty first segment.
func cutSegment(s string) (seg, rest string, more bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// attention reports whether p has a byte that a segment check must look
// at; most paths have none and are passed by this loop alone.
func attention(p string) bool {
	for i := 0; i < len(p); i++ {
		if attentionByte[p[i]] {
			return true
		}
	}
	return false
}

// attentionByte: ".", ";", "%", "\", control bytes and non-ASCII bytes.
var attentionByte = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c < 0x20 || c >= 0x7f || c == '.' || c == ';' || c == '%' || c == '\\'
	}
	return t
}()

// segClass is what one segment holds.
type segClass struct {
	reason     string
	dot        int8 // 1: ".", 2: ".." (after decoding)
	encoded    bool // the dot segment was written with %2e
	unreserved bool // an escape of an unreserved character (normalize decodes it)
	slash      bool // a %2F kept (keep_encoded_slash)
}

// segment classifies one segment: raw (as the upstream receives it) or,
// when decoded, already percent-decoded once.
func (ru Rules) segment(seg string, decoded bool) segClass {
	var sc segClass
	plain := true
	for i := 0; i < len(seg); i++ {
		if c := seg[i]; attentionByte[c] && c != '.' && c != ';' || c == ';' && ru.RejectParams {
			plain = false
			break
		}
	}
	if plain {
		// only dots and parameters can matter: "." / ".." / "...", "..;x", ";x"
		sc.dot, sc.reason = dotClass(seg)
		return sc
	}
	if ru.RejectParams && strings.IndexByte(seg, ';') >= 0 {
		return segClass{reason: ReasonParams}
	}
	d1 := seg
	if !decoded {
		var buf [128]byte // (decoded mode does not pay for zeroing it)
		var ok bool
		for i := 0; i < len(seg); i++ {
			switch c := seg[i]; {
			case c == '\\':
				return segClass{reason: ReasonBackslash}
			case c < 0x20 || c == 0x7f:
				return segClass{reason: ReasonControl}
			}
		}
		var dec []byte
		dec, ok, sc.unreserved, sc.slash = decodeStrict(buf[:0], seg)
		if !ok {
			return segClass{reason: ReasonEscape}
		}
		if sc.slash && !ru.KeepEncodedSlash {
			return segClass{reason: ReasonEncodedSlash}
		}
		if ru.RejectParams && bytes.IndexByte(dec, ';') >= 0 {
			return segClass{reason: ReasonParams}
		}
		// a view of dec, which nothing writes to from here on (no copy:
		// a normal path with escapes costs no allocation)
		d1 = unsafe.String(unsafe.SliceData(dec), len(dec))
		sc.encoded = strings.IndexByte(seg, '%') >= 0
	}
	if reason := levelCheck(d1); reason != "" {
		return segClass{reason: reason}
	}
	if sc.slash {
		// keep_encoded_slash: each part must be an ordinary segment
		for rest, more := d1, true; more; {
			var part string
			part, rest, more = cutSegment(rest)
			if dot, reason := dotClass(part); part == "" || dot != 0 || reason != "" {
				return segClass{reason: ReasonEncodedSlash}
			}
		}
	} else {
		sc.dot, sc.reason = dotClass(d1)
		if sc.reason != "" {
			return segClass{reason: sc.reason}
		}
	}
	// what an application that decodes again would see
	cur := d1
	for level := 2; hasEscape(cur); level++ {
		if level > maxLevels {
			return segClass{reason: ReasonDoubleEncoding}
		}
		var buf2 [128]byte
		next := string(decodeLenient(buf2[:0], cur))
		if levelCheck(next) != "" || strings.Count(next, "/") != strings.Count(cur, "/") || !ordinaryParts(next) {
			return segClass{reason: ReasonDoubleEncoding}
		}
		cur = next
	}
	return sc
}

// ordinaryParts reports whether no "/"-separated part of a decoded
// segment is a dot segment (or dot-like, or a dot segment with parameters).
func ordinaryParts(s string) bool {
	for rest, more := s, true; more; {
		var part string
		part, rest, more = cutSegment(rest)
		if dot, reason := dotClass(part); dot != 0 || reason != "" {
			return false
		}
	}
	return true
}

// levelCheck checks one decoded form of a segment for bytes no level may
// hold: control bytes, backslashes, invalid UTF-8, and Unicode look-alikes
// of "/" and "\" (and segments of look-alike dots).
func levelCheck(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return ReasonControl
		case c == '\\':
			return ReasonBackslash
		case c >= 0x80:
			ascii = false
		}
	}
	if ascii {
		return ""
	}
	if !utf8.ValidString(s) {
		return ReasonUTF8
	}
	// Look-alikes of "/" and "\" are refused wherever they are; look-alike
	// dots only where they make a dot segment (alone, with spaces and
	// ASCII dots, or before ";" parameters).
	onlyDots, lookalikeDot := true, false
	for _, r := range s {
		switch r {
		case '\uFF0F', '\u2215', '\u2044', '\uFF3C', '\uFE68', '\u29F5', '\u2216':
			// full-width, division and fraction slash; full-width and
			// small reverse solidus, reverse solidus operator, set minus
			return ReasonUnicode
		case '\uFF0E', '\uFE52', '\u2024': // full-width, small full stop, one dot leader
			lookalikeDot = true
		case '.', ' ':
		case ';':
			if onlyDots && lookalikeDot {
				return ReasonUnicode
			}
			onlyDots = false
		default:
			onlyDots = false
		}
	}
	if onlyDots && lookalikeDot {
		return ReasonUnicode
	}
	return ""
}

// dotClass classifies a decoded segment: 1 for ".", 2 for "..", and a
// reason for other segments of only dots and spaces, for a dot segment
// with ";" parameters and for a segment of parameters alone.
func dotClass(s string) (int8, string) {
	switch s {
	case ".":
		return 1, ""
	case "..":
		return 2, ""
	}
	if dotLike(s) {
		return 0, ReasonDotSegment
	}
	if i := strings.IndexByte(s, ';'); i == 0 {
		return 0, ReasonEmptyParams
	} else if i > 0 && dotLike(s[:i]) {
		return 0, ReasonDotParams
	}
	return 0, ""
}

// dotLike reports whether s is dots and spaces with at least one dot.
func dotLike(s string) bool {
	dot := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			dot = true
		case ' ':
		default:
			return false
		}
	}
	return dot
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hasEscape reports whether s holds a "%" followed by two hex digits.
func hasEscape(s string) bool {
	for i := strings.IndexByte(s, '%'); i >= 0 && i+2 < len(s); {
		if _, ok := unhex(s[i+1]); ok {
			if _, ok := unhex(s[i+2]); ok {
				return true
			}
		}
		j := strings.IndexByte(s[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// decodeStrict percent-decodes a raw segment into dst; ok is false for a
// "%" without two hex digits. It also reports whether an unreserved
// character was escaped and whether a %2F was.
func decodeStrict(dst []byte, s string) (out []byte, ok, unreserved, slash bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			dst = append(dst, c)
			continue
		}
		if i+2 >= len(s) {
			return dst, false, false, false
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return dst, false, false, false
		}
		b := hi<<4 | lo
		unreserved = unreserved || isUnreserved(b)
		slash = slash || b == '/'
		dst = append(dst, b)
		i += 2
	}
	return dst, true, unreserved, slash
}

// decodeLenient percent-decodes s into dst as a permissive application
// does: a "%" without two hex digits stays as it is.
func decodeLenient(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				dst = append(dst, hi<<4|lo)
				i += 2
				continue
			}
		}
		dst = append(dst, c)
	}
	return dst
}

// isUnreserved: ALPHA / DIGIT / "-" / "." / "_" / "~" (RFC 3986 2.3).
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// writeDecodedUnreserved writes a valid raw segment with the escapes of
// unreserved characters decoded and every other byte as it was.
func writeDecodedUnreserved(b *strings.Builder, seg string) {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' && i+2 < len(seg) {
			hi, _ := unhex(seg[i+1])
			lo, _ := unhex(seg[i+2])
			if d := hi<<4 | lo; isUnreserved(d) {
				b.WriteByte(d)
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
}

// RemoveDotSegments is remove_dot_segments of RFC 3986 5.2.4.
func RemoveDotSegments(in string) string {
	if !strings.Contains(in, ".") {
		return in
	}
	out := make([]byte, 0, len(in))
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			out = dropLastSegment(out)
		case in == "/..":
			in = "/"
			out = dropLastSegment(out)
		case in == "." || in == "..":
			in = ""
		default:
			i := 0
			if in[0] == '/' {
				i = 1
			}
			if j := strings.IndexByte(in[i:], '/'); j >= 0 {
				i += j
			} else {
				i = len(in)
			}
			out = append(out, in[:i]...)
			in = in[i:]
		}
	}
	return string(out)
}

// dropLastSegment removes the output buffer's last segment and the "/"
// before it, if any.
func dropLastSegment(out []byte) []byte {
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] == '/' {
			return out[:i]
		}
	}
	return out[:0]
}

// validEncoded reports whether s is a valid encoded path as
// url.URL.EscapedPath requires of RawPath: only the bytes its escaping
// leaves as they are, and "%" (whose escapes are checked by decodesTo).
func validEncoded(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' ||
			c == '+' || c == ',' || c == ';' || c == '=' || c == ':' || c == '@' || c == '[' || c == ']':
		case c == '%':
		case isUnreserved(c) || c == '/':
		default:
			return false
		}
	}
	return true
}

// decodesTo reports whether raw percent-decodes to exactly path.
func decodesTo(raw, path string) bool {
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' {
			if i+2 >= len(raw) {
				return false
			}
			hi, ok1 := unhex(raw[i+1])
			lo, ok2 := unhex(raw[i+2])
			if !ok1 || !ok2 {
				return false
			}
			c = hi<<4 | lo
			i += 2
		}
		if j >= len(path) || path[j] != c {
			return false
		}
		j++
	}
	return j == len(path)
}
