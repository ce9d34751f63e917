package caddyopenapi

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

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
	lib func(any) error
	int int // 32 or 64: OpenAPI's int32, int64 (numbers only)
}

func formatOf(f *jsonschema.Format) *formatCheck {
	switch f.Name {
	case "int32":
		return &formatCheck{int: 32}
	case "int64":
		return &formatCheck{int: 64}
	}
	return &formatCheck{str: byteFormats[f.Name], lib: f.Validate}
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

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

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
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

// isDate: YYYY-MM-DD, a day of the month (time.Parse's "2006-01-02").
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' || !isDigits(s[:4]) || !isDigits(s[5:7]) || !isDigits(s[8:]) {
		return false
	}
	y, _ := strconv.Atoi(s[:4])
	m, _ := strconv.Atoi(s[5:7])
	d, _ := strconv.Atoi(s[8:])
	if m < 1 || m > 12 || d < 1 {
		return false
	}
	return d <= time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// isTime: RFC 3339's full-time, as the library reads it.
func isTime(str string) bool {
	if len(str) < 9 || str[2] != ':' || str[5] != ':' {
		return false
	}
	var hms [3]int
	rest := str[:8]
	for k := 0; k < 3; k++ {
		tok := rest
		if k < 2 {
			i := strings.IndexByte(rest, ':')
			tok, rest = rest[:i], rest[i+1:]
		}
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 {
			return false
		}
		hms[k] = n
	}
	h, m, sec := hms[0], hms[1], hms[2]
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
		zhs, zms, _ := strings.Cut(str, ":")
		zh, err := strconv.Atoi(zhs)
		if err != nil || zh < 0 {
			return false
		}
		zm, err := strconv.Atoi(zms)
		if err != nil || zm < 0 {
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
			c := local[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			case strings.IndexByte(".!#$%&'*+-/=?^_`{|}~", c) >= 0:
			default:
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
	for {
		label, rest, more := strings.Cut(s, ".")
		if len(label) < 1 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
		if !more {
			return true
		}
		s = rest
	}
}

// isIPv4: four decimals 0-255 without leading zeros.
func isIPv4(s string) bool {
	if strings.Count(s, ".") != 3 {
		return false
	}
	for range 4 {
		group, rest, _ := strings.Cut(s, ".")
		if len(group) > 1 && group[0] == '0' {
			return false
		}
		n, err := strconv.Atoi(group)
		if err != nil || n < 0 || n > 255 {
			return false
		}
		s = rest
	}
	return true
}

// isIPv6: an IPv6 address without a zone.
func isIPv6(s string) bool {
	if strings.IndexByte(s, ':') < 0 {
		return false
	}
	addr, err := netip.ParseAddr(s)
	return err == nil && addr.Zone() == ""
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
