package caddyopenapi

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Formats are checked on a string's bytes, without allocating, for the
// formats APIs use most; each check answers as the JSON Schema library's
// own (FuzzFormats compares them). The other formats the library asserts
// (uri, uri-reference, uri-template, iri, iri-reference, json-pointer,
// relative-json-pointer, regex, period, semver) are the library's own
// check, given the string.

// byteFormats are the formats checked here.
var byteFormats = map[string]func(string) bool{
	"uuid":      isUUID,
	"date":      isDate,
	"time":      isTime,
	"date-time": isDateTime,
	"email":     isEmail,
	"hostname":  isHostname,
	"ipv4":      isIPv4,
	"ipv6":      isIPv6,
	"duration":  isDuration,
}

// formatCheck is a format keyword, compiled for the tape.
type formatCheck struct {
	str func(string) bool // nil: lib
	// fast accepts, without allocating, a part of what lib accepts; lib
	// decides the rest
	fast func(string) bool
	lib  func(any) error
	int  int // 32 or 64: OpenAPI's int32, int64 (numbers only)
}

func formatOf(f *jsonschema.Format) *formatCheck {
	switch f.Name {
	case "int32":
		return &formatCheck{int: 32}
	case "int64":
		return &formatCheck{int: 64}
	case "uri":
		return &formatCheck{fast: plainURI, lib: f.Validate}
	}
	return &formatCheck{str: byteFormats[f.Name], lib: f.Validate}
}

// plainURI accepts the absolute URIs APIs send most, of the form
// scheme://host[:port][/path][?query][#fragment] where the host is
// letters, digits, dots and hyphens, the port digits, and the rest
// unreserved and sub-delimiter characters, ':', '@', '/' ('?' after the
// path) and valid %XX escapes. The library's uri check (net/url.Parse,
// absolute, an IPv6 host in brackets) accepts every such string
// (FuzzPlainURI); any other string, valid or not, is the library's to
// decide.
func plainURI(s string) bool {
	i := 0
	for i < len(s) && (isAlpha(s[i]) || i > 0 && (isDigit(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')) {
		i++
	}
	if i == 0 || !strings.HasPrefix(s[i:], "://") {
		return false
	}
	i += 3
	host := i
	for i < len(s) && (isAlpha(s[i]) || isDigit(s[i]) || s[i] == '.' || s[i] == '-') {
		i++
	}
	if i == host {
		return false
	}
	if i < len(s) && s[i] == ':' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && s[i] != '/' && s[i] != '?' && s[i] != '#' {
		return false
	}
	fragment := false
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		case c == '#':
			if fragment {
				return false
			}
			fragment = true
		case uriChars[c]:
		default:
			return false
		}
	}
	return true
}

func (f *formatCheck) valid(s *scanner, tk *token) bool {
	switch tk.kind {
	case kString:
		if f.int != 0 {
			return true
		}
		v := s.str(tk)
		if f.str != nil {
			return f.str(v)
		}
		if f.fast != nil && f.fast(v) {
			return true
		}
		return f.lib(v) == nil
	case kNumber:
		if f.int != 0 {
			return intInRange(parseDecimal(s.bytes(tk)), f.int)
		}
	}
	return true // the library's formats are of strings
}

var (
	int32Min, int32Max = decimalOfInt(-1 << 31), decimalOfInt(1<<31 - 1)
	int64Min, int64Max = decimal{mant: 9223372036854775808, neg: true, fits: true}, decimalOfInt(1<<63 - 1)
)

func decimalOfInt(i int64) decimal {
	return parseDecimal([]byte(strconv.FormatInt(i, 10)))
}

// intInRange: OpenAPI's int32 and int64 formats. A number that is not an
// integer is the type keyword's to refuse; an integer (1, 1.0, 1e2) must
// be in the range.
func intInRange(d decimal, size int) bool {
	if !d.isInt() {
		return true
	}
	if !d.fits {
		return false // more than 19 significant digits: past int64
	}
	lo, hi := int64Min, int64Max
	if size == 32 {
		lo, hi = int32Min, int32Max
	}
	return cmpDec(d, lo) >= 0 && cmpDec(d, hi) <= 0
}

// byteSet is a set of bytes, one entry per byte: a lookup is one load.
type byteSet [256]bool

func setOf(chars string) *byteSet {
	var b byteSet
	for i := 0; i < len(chars); i++ {
		b[chars[i]] = true
	}
	return &b
}

func (b *byteSet) has(c byte) bool { return b[c] }

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

var (
	// uriChars: what plainURI takes in a path, query or fragment
	uriChars = setOf(alnum + "/?-._~!$&'()*+,;=:@")
	// atomChars: the characters of an email's dot-atom local part
	atomChars = setOf(alnum + ".!#$%&'*+-/=?^_`{|}~")
	hexChars  = setOf("0123456789abcdefABCDEF")
	hostChars = setOf(alnum + "-")
)

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return hexChars.has(c) }

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isUUID: five groups of 8, 4, 4, 4 and 12 hex digits, joined by dashes.
func isUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	return isHexRun(s[:8]) && isHexRun(s[9:13]) && isHexRun(s[14:18]) && isHexRun(s[19:23]) && isHexRun(s[24:])
}

func isHexRun(s string) bool {
	for i := 0; i < len(s); i++ {
		if !hexChars.has(s[i]) {
			return false
		}
	}
	return true
}

// isDate: YYYY-MM-DD, a day of the month (time.Parse's "2006-01-02").
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' || !isDigits(s[:4]) || !isDigits(s[5:7]) || !isDigits(s[8:]) {
		return false
	}
	y := int(s[0]-'0')*1000 + int(s[1]-'0')*100 + int(s[2]-'0')*10 + int(s[3]-'0')
	m := int(s[5]-'0')*10 + int(s[6]-'0')
	d := int(s[8]-'0')*10 + int(s[9]-'0')
	if m < 1 || m > 12 || d < 1 {
		return false
	}
	return d <= daysIn(y, m)
}

// daysIn is the number of days of month m (1-12) of year y (proleptic
// Gregorian, as package time has it).
func daysIn(y, m int) int {
	if m == 2 {
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	}
	return 30 + (m+m/8)%2
}

// atoi reads a decimal as strconv.Atoi does (a sign, then digits); ok
// is false where Atoi fails. Values past a million read as a million:
// the callers bound them far below.
func atoi(s string) (n int, ok bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1e6 {
			n = n*10 + int(c-'0')
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// twoDigits reads a field of two characters as the library does
// (strconv.Atoi, then at least 0): two digits, or a sign and a digit.
func twoDigits(s string) (int, bool) {
	if isDigit(s[0]) && isDigit(s[1]) {
		return int(s[0]-'0')*10 + int(s[1]-'0'), true
	}
	n, ok := atoi(s)
	return n, ok && n >= 0
}

// isTime: RFC 3339's full-time, as the library reads it.
func isTime(str string) bool {
	if len(str) < 9 || str[2] != ':' || str[5] != ':' {
		return false
	}
	// HH:MM:SS (a colon inside a field fails it, as the library's
	// split at the first colon fails it)
	h, ok1 := twoDigits(str[0:2])
	m, ok2 := twoDigits(str[3:5])
	sec, ok3 := twoDigits(str[6:8])
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	if h > 23 || m > 59 || sec > 60 {
		return false
	}
	str = str[8:]
	if rem, ok := strings.CutPrefix(str, "."); ok {
		n := 0
		for n < len(rem) && rem[n] >= '0' && rem[n] <= '9' {
			n++
		}
		if n == 0 {
			return false
		}
		str = rem[n:]
	}
	if str != "z" && str != "Z" {
		if len(str) != 6 {
			return false
		}
		var sign int
		switch str[0] {
		case '+':
			sign = -1
		case '-':
			sign = +1
		default:
			return false
		}
		str = str[1:]
		if str[2] != ':' {
			return false
		}
		zh, ok := twoDigits(str[:2])
		if !ok {
			return false
		}
		zm, ok := twoDigits(str[3:])
		if !ok {
			return false
		}
		if zh > 23 || zm > 59 {
			return false
		}
		hm := (h*60 + m) + sign*(zh*60+zm)
		if hm < 0 {
			hm += 24 * 60
		}
		h, m = hm/60, hm%60
	}
	return sec < 60 || h == 23 && m == 59
}

// isDateTime: RFC 3339's date-time.
func isDateTime(s string) bool {
	return len(s) >= 20 && (s[10] == 't' || s[10] == 'T') && isDate(s[:10]) && isTime(s[11:])
}

// isEmail: an address as the library reads it (a local part of at most
// 64 characters, quoted or dot-atom; a hostname or a bracketed IP).
func isEmail(s string) bool {
	if len(s) > 254 {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	if at == -1 {
		return false
	}
	local, domain := s[:at], s[at+1:]
	if len(local) > 64 {
		return false
	}
	if len(local) > 1 && local[0] == '"' && local[len(local)-1] == '"' {
		q := local[1 : len(local)-1]
		if strings.IndexByte(q, '\\') != -1 || strings.IndexByte(q, '"') != -1 {
			return false
		}
	} else {
		if strings.HasPrefix(local, ".") || strings.HasSuffix(local, ".") || strings.Contains(local, "..") {
			return false
		}
		for i := 0; i < len(local); i++ {
			if !atomChars.has(local[i]) {
				return false
			}
		}
	}
	if len(domain) >= 2 && domain[0] == '[' && domain[len(domain)-1] == ']' {
		domain = domain[1 : len(domain)-1]
		if rem, ok := strings.CutPrefix(domain, "IPv6:"); ok {
			return isIPv6(rem)
		}
		return isIPv4(domain)
	}
	return isHostname(domain)
}

// isHostname: labels of 1 to 63 letters, digits and hyphens (not first
// or last), at most 253 characters (a trailing dot apart).
func isHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if len(s) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			if !hostChars.has(s[i]) {
				return false
			}
			continue
		}
		if n := i - start; n < 1 || n > 63 || s[start] == '-' || s[i-1] == '-' {
			return false
		}
		start = i + 1
	}
	return true
}

// isIPv4: four decimals 0-255 without leading zeros (a sign the library
// lets through: strconv.Atoi reads it).
func isIPv4(s string) bool {
	groups, start, n, odd := 0, 0, 0, false
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			// a group's digits read as they come
			if d := s[i] - '0'; d <= 9 && n < 1000 {
				n = n*10 + int(d)
			} else {
				odd = true
			}
			continue
		}
		if groups++; groups > 4 {
			return false
		}
		group := s[start:i]
		if len(group) == 0 || len(group) > 1 && group[0] == '0' {
			return false
		}
		if odd {
			// a sign (strconv.Atoi's, as the library reads a group), or
			// more digits than n keeps
			if m, ok := atoi(group); !ok || m < 0 || m > 255 {
				return false
			}
		} else if n > 255 {
			return false
		}
		start, n, odd = i+1, 0, false
	}
	return groups == 4
}

// isIPv6: an IPv6 address without a zone.
func isIPv6(s string) bool {
	if hexIPv6(s) {
		return true
	}
	if strings.IndexByte(s, ':') < 0 {
		return false
	}
	addr, err := netip.ParseAddr(s)
	return err == nil && addr.Zone() == ""
}

// hexIPv6 accepts, without net/netip, the IPv6 addresses written in hex
// groups only: eight groups of 1 to 4 hex digits joined by colons, or
// fewer with one "::" standing for at least one group of zeros. Each is
// an address netip.ParseAddr accepts; the other forms (an IPv4 tail, a
// zone) and every string it refuses are netip's to decide.
func hexIPv6(s string) bool {
	groups, ellipsis, i := 0, false, 0
	if strings.HasPrefix(s, "::") {
		ellipsis, i = true, 2
		if i == len(s) {
			return true
		}
	}
	for {
		n := 0
		for i < len(s) && n < 5 && hexChars.has(s[i]) {
			i++
			n++
		}
		if n == 0 || n > 4 {
			return false
		}
		groups++
		if i == len(s) {
			break
		}
		if s[i] != ':' || i+1 == len(s) {
			return false
		}
		i++
		if s[i] == ':' {
			if ellipsis {
				return false
			}
			ellipsis = true
			if i++; i == len(s) {
				break
			}
		}
	}
	if ellipsis {
		return groups <= 7
	}
	return groups == 8
}

// isDuration: RFC 3339's duration (P1Y2M3DT4H5M6S, P2W).
func isDuration(s string) bool {
	s, ok := strings.CutPrefix(s, "P")
	if !ok || s == "" {
		return false
	}
	if w, ok := strings.CutSuffix(s, "W"); ok {
		return w != "" && isDigits(w)
	}
	allUnits := [2]string{"YMD", "HMS"}
	for i := 0; ; i++ {
		part, rest, more := strings.Cut(s, "T")
		if i != 0 && part == "" {
			return false
		}
		if i >= len(allUnits) {
			return false
		}
		units := allUnits[i]
		for part != "" {
			n := 0
			for n < len(part) && part[n] >= '0' && part[n] <= '9' {
				n++
			}
			if n == 0 {
				return false
			}
			part = part[n:]
			if part == "" {
				return false
			}
			j := strings.IndexByte(units, part[0])
			if j == -1 {
				return false
			}
			units = units[j+1:]
			part = part[1:]
		}
		if !more {
			return true
		}
		s = rest
	}
}
