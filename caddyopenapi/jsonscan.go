package caddyopenapi

import (
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// A JSON body is read once, by scanner.scan: it checks that the text is
// JSON (RFC 8259) and I-JSON (RFC 7493: UTF-8 only, no lone surrogate
// escape, no member name twice in an object), and records each value on
// a tape, in document order, with where its bytes are. Validation then
// walks the tape (validate.go): nothing is decoded into Go values, and a
// scanner is reused from request to request, so a body that is valid
// costs no allocation.

// tokKind is the kind of a value on the tape.
type tokKind uint8

const (
	kNull tokKind = iota + 1
	kFalse
	kTrue
	kNumber
	kString
	kArray
	kObject
)

// token is one value on the tape. An object is followed by its members,
// each a key (a kString token) and then its value; an array by its items.
type token struct {
	// start and end are the bytes of a string (its content once its
	// escapes are decoded: in the text, or in the scanner's dec buffer
	// when dec is set) or of a number (its text). For an array or an
	// object, end is the number of items or members.
	start, end uint32
	// next is the index of the token after this value and everything
	// in it.
	next uint32
	kind tokKind
	dec  bool
	// fp is a key's fingerprint, while its object is read; on a number
	// the scanner read, plainInt when its text is an integer (no
	// fraction, no exponent)
	fp uint16
}

const plainInt = 1

// The ways a text is not I-JSON.
type scanError uint8

const (
	scanOK scanError = iota
	scanSyntax
	scanEnd
	scanDepth
	scanUTF8
	scanSurrogate
	scanDuplicate
)

// maxDepth is how deeply values may nest (encoding/json's limit).
const maxDepth = 10000

// scanner reads JSON texts onto a tape. Its buffers are kept from one
// text to the next.
type scanner struct {
	src  []byte  // the text
	dec  []byte  // the content of strings that had escapes
	tape []token // the values

	open []frame // the arrays and objects being read, outermost first
	hash []keyHash

	err     scanError
	errAt   int    // the byte where the text went wrong
	errPath string // the JSON pointer of the value it went wrong in
}

// frame is an array or object being read. Its tape token's end (the
// number of items or members) is written when it closes.
type frame struct {
	tok   uint32 // the array or object
	kind  tokKind
	count uint32 // its items or members so far
	last  uint32 // an object's last key so far
	// seen has the bit of each key's fingerprint, while an object has
	// at most 64 keys; dup is the first key that repeats one before it
	// (-1: none), refused when the object closes. 1024 bits: an object
	// of 22 keys shares a bit between two of them one time in five (256
	// bits: most times), and a shared bit costs a walk of the keys.
	seen [16]uint64
	dup  int
}

type keyHash struct {
	h   uint64
	tok uint32
}

var keySeed = maphash.MakeSeed()

// reset prepares the scanner for a new text (or a value built by hand).
func (s *scanner) reset(src []byte) {
	s.src = src
	s.dec = s.dec[:0]
	s.tape = s.tape[:0]
	s.open = s.open[:0]
	s.err, s.errAt, s.errPath = scanOK, 0, ""
}

// bytes returns the content of a string token or the text of a number.
func (s *scanner) bytes(t *token) []byte {
	if t.dec {
		return s.dec[t.start:t.end]
	}
	return s.src[t.start:t.end]
}

// str returns bytes(t) as a string without copying it: it is valid
// until the scanner reads its next text.
func (s *scanner) str(t *token) string {
	b := s.bytes(t)
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skip returns where the white space at i ends. Most texts have none
// between their tokens: one test then.
func skip(src []byte, i int) int {
	for i < len(src) && src[i] <= ' ' && isSpace(src[i]) {
		i++
	}
	return i
}

func (s *scanner) fail(e scanError, at int) bool {
	s.err, s.errAt = e, at
	s.errPath = s.pointer(-1)
	return false
}

// scan reads src; it reports whether src is one I-JSON value (with
// white space around it). On false, err, errAt and errPath say why.
func (s *scanner) scan(src []byte) bool {
	s.reset(src)
	i := skip(src, 0)
	for {
		// a value starts at i
		if i >= len(src) {
			return s.fail(scanEnd, i)
		}
		if n := len(s.open); n > 0 {
			if top := &s.open[n-1]; top.kind == kArray {
				top.count++
			}
		}
		idx := uint32(len(s.tape))
		switch c := src[i]; {
		case c == '"':
			var ok bool
			if i, ok = s.string(i); !ok {
				return false
			}
		case c == '{' || c == '[':
			if len(s.open) >= maxDepth {
				return s.fail(scanDepth, i)
			}
			kind := kArray
			if c == '{' {
				kind = kObject
			}
			s.tape = append(s.tape, token{kind: kind})
			s.open = append(s.open, frame{tok: idx, kind: kind, dup: -1})
			i = skip(src, i+1)
			if i < len(src) && (src[i] == '}' && kind == kObject || src[i] == ']' && kind == kArray) {
				s.close()
				i++
				break
			}
			if kind == kObject {
				var ok bool
				if i, ok = s.member(i); !ok {
					return false
				}
			}
			continue
		case c == '-' || c >= '0' && c <= '9':
			j, integer, ok := s.number(i)
			if !ok {
				return false
			}
			s.tape = append(s.tape, token{kind: kNumber, start: uint32(i), end: uint32(j), next: idx + 1, fp: integer})
			i = j
		case c == 't' && strings.HasPrefix(unsafeString(src[i:]), "true"):
			s.tape = append(s.tape, token{kind: kTrue, next: idx + 1})
			i += 4
		case c == 'f' && strings.HasPrefix(unsafeString(src[i:]), "false"):
			s.tape = append(s.tape, token{kind: kFalse, next: idx + 1})
			i += 5
		case c == 'n' && strings.HasPrefix(unsafeString(src[i:]), "null"):
			s.tape = append(s.tape, token{kind: kNull, next: idx + 1})
			i += 4
		default:
			return s.fail(scanSyntax, i)
		}
		// after a value: a separator, the end of its container, or the
		// end of the text
		for {
			i = skip(src, i)
			n := len(s.open)
			if n == 0 {
				if i != len(src) {
					return s.fail(scanSyntax, i)
				}
				return true
			}
			if i >= len(src) {
				return s.fail(scanEnd, i)
			}
			top := s.open[n-1].kind
			c := src[i]
			if c == ',' {
				if i++; i < len(src) && src[i] <= ' ' {
					i = skip(src, i)
				}
				if top == kObject {
					var ok bool
					if i, ok = s.member(i); !ok {
						return false
					}
				}
				break
			}
			if top == kObject && c == '}' || top == kArray && c == ']' {
				if top == kObject && !s.checkKeys() {
					return false
				}
				s.close()
				i++
				continue
			}
			return s.fail(scanSyntax, i)
		}
	}
}

// member reads an object member's key and colon at i; the value follows.
// A key whose fingerprint an earlier key of the object has is compared
// with those keys: the first that repeats one is the object's dup.
func (s *scanner) member(i int) (int, bool) {
	if i >= len(s.src) {
		return i, s.fail(scanEnd, i)
	}
	if s.src[i] != '"' {
		return i, s.fail(scanSyntax, i)
	}
	key := uint32(len(s.tape))
	i, ok := s.string(i)
	if !ok {
		return i, false
	}
	f := &s.open[len(s.open)-1]
	f.count++
	f.last = key
	if f.count <= 64 {
		kt := &s.tape[key]
		a := s.bytes(kt)
		fp := fingerprint(a)
		kt.fp = fp
		if f.seen[fp>>6]&(1<<(fp&63)) != 0 && f.dup < 0 {
			// the earlier keys: each after the value before it
			for k, j := uint32(1), f.tok+1; k < f.count; k, j = k+1, s.tape[j+1].next {
				if s.tape[j].fp == fp && string(a) == string(s.bytes(&s.tape[j])) {
					f.dup = int(key)
					break
				}
			}
		}
		f.seen[fp>>6] |= 1 << (fp & 63)
	}
	// most texts have no white space around the colon: one test then
	if i < len(s.src) && s.src[i] == ':' {
		if i++; i < len(s.src) && s.src[i] > ' ' {
			return i, true
		}
		return skip(s.src, i), true
	}
	i = skip(s.src, i)
	if i >= len(s.src) {
		return i, s.fail(scanEnd, i)
	}
	if s.src[i] != ':' {
		return i, s.fail(scanSyntax, i)
	}
	return skip(s.src, i+1), true
}

// close ends the innermost array or object.
func (s *scanner) close() {
	f := &s.open[len(s.open)-1]
	t := &s.tape[f.tok]
	t.end = f.count
	t.next = uint32(len(s.tape))
	s.open = s.open[:len(s.open)-1]
}

// checkKeys refuses an object (the innermost) that has a member name
// twice: parsers disagree on which value counts. Up to 64 keys, member
// found any repeat; past that, the keys are sorted by a hash.
func (s *scanner) checkKeys() bool {
	f := &s.open[len(s.open)-1]
	dup := f.dup
	if f.count > 64 {
		dup = -1
		s.hash = s.hash[:0]
		for k, j := uint32(0), f.tok+1; k < f.count; k, j = k+1, s.tape[j+1].next {
			s.hash = append(s.hash, keyHash{maphash.Bytes(keySeed, s.bytes(&s.tape[j])), j})
		}
		slices.SortFunc(s.hash, func(a, b keyHash) int {
			switch {
			case a.h < b.h:
				return -1
			case a.h > b.h:
				return 1
			}
			return int(a.tok) - int(b.tok)
		})
	large:
		for i := 1; i < len(s.hash); i++ {
			for j := i - 1; j >= 0 && s.hash[j].h == s.hash[i].h; j-- {
				if string(s.bytes(&s.tape[s.hash[i].tok])) == string(s.bytes(&s.tape[s.hash[j].tok])) {
					dup = int(s.hash[i].tok)
					break large
				}
			}
		}
	}
	if dup < 0 {
		return true
	}
	s.err, s.errAt = scanDuplicate, int(s.tape[dup].start)
	s.errPath = s.pointer(dup)
	return false
}

// fingerprint is one of 1024 values for a key, from its length and three
// of its bytes.
func fingerprint(b []byte) uint16 {
	h := uint64(len(b))
	if len(b) > 0 {
		h = h<<24 | uint64(b[0])<<16 | uint64(b[len(b)/2])<<8 | uint64(b[len(b)-1])
	}
	return uint16((h * 0x9e3779b97f4a7c15) >> 54)
}

// string reads the string at i (its opening quote) as a token.
func (s *scanner) string(i int) (int, bool) {
	idx := uint32(len(s.tape))
	j, start, end, dec, ok := s.readString(i)
	if ok {
		s.tape = append(s.tape, token{kind: kString, start: uint32(start), end: uint32(end), next: idx + 1, dec: dec})
	}
	return j, ok
}

// readString reads the string at i (its opening quote): it returns where
// the string ends and where its content is: src[start:end], or
// dec[start:end] when dec (the string had an escape, decoded there).
func (s *scanner) readString(i int) (j, start, end int, dec, ok bool) {
	src := s.src
	start = i + 1
	j = start
	for j < len(src) {
		// eight bytes at a time while none needs a look: a quote, a
		// backslash, a control character or a byte of a multi-byte
		// character
		for j+8 <= len(src) {
			if m := specialBytes(binary.LittleEndian.Uint64(src[j : j+8])); m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			j += 8
		}
		if j >= len(src) {
			break
		}
		c := src[j]
		switch {
		case c == '"':
			return j + 1, start, j, false, true
		case c == '\\':
			return s.escaped(start, j)
		case c < 0x20:
			return j, 0, 0, false, s.fail(scanSyntax, j)
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size <= 1 {
				return j, 0, 0, false, s.fail(scanUTF8, j)
			}
			j += size
		}
	}
	return j, 0, 0, false, s.fail(scanEnd, j)
}

// escaped reads the rest of a string that has an escape at j, decoding
// it into dec.
func (s *scanner) escaped(start, j int) (int, int, int, bool, bool) {
	src := s.src
	d0 := len(s.dec)
	s.dec = append(s.dec, src[start:j]...)
	for j < len(src) {
		c := src[j]
		switch {
		case c == '"':
			return j + 1, d0, len(s.dec), true, true
		case c == '\\':
			if j+1 >= len(src) {
				return j, 0, 0, false, s.fail(scanEnd, j)
			}
			switch e := src[j+1]; e {
			case '"', '\\', '/':
				s.dec = append(s.dec, e)
			case 'b':
				s.dec = append(s.dec, '\b')
			case 'f':
				s.dec = append(s.dec, '\f')
			case 'n':
				s.dec = append(s.dec, '\n')
			case 'r':
				s.dec = append(s.dec, '\r')
			case 't':
				s.dec = append(s.dec, '\t')
			case 'u':
				r, ok := hex4(src, j+2)
				if !ok {
					return j, 0, 0, false, s.fail(scanSyntax, j)
				}
				j += 6
				switch {
				case r >= 0xDC00 && r < 0xE000:
					return j, 0, 0, false, s.fail(scanSurrogate, j-6)
				case r >= 0xD800 && r < 0xDC00:
					lo, ok := rune(0), false
					if j+1 < len(src) && src[j] == '\\' && src[j+1] == 'u' {
						lo, ok = hex4(src, j+2)
					}
					if !ok || lo < 0xDC00 || lo >= 0xE000 {
						return j, 0, 0, false, s.fail(scanSurrogate, j-6)
					}
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					j += 6
				}
				s.dec = utf8.AppendRune(s.dec, r)
				continue
			default:
				return j, 0, 0, false, s.fail(scanSyntax, j)
			}
			j += 2
		case c < 0x20:
			return j, 0, 0, false, s.fail(scanSyntax, j)
		case c < utf8.RuneSelf:
			s.dec = append(s.dec, c)
			j++
		default:
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size <= 1 {
				return j, 0, 0, false, s.fail(scanUTF8, j)
			}
			s.dec = append(s.dec, src[j:j+size]...)
			j += size
		}
	}
	return j, 0, 0, false, s.fail(scanEnd, j)
}

// specialBytes marks (with its high bit) each of the eight bytes of x
// that is a quote, a backslash, below 0x20 or from 0x80; the lowest mark
// is exact (the classic bit tricks: a byte below n in x - n*0x01..01
// borrows into its high bit; a borrow only carries upwards).
func specialBytes(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	quote := x ^ ('"' * ones)
	slash := x ^ ('\\' * ones)
	return ((x - 0x20*ones) | (quote-ones)&^quote | (slash-ones)&^slash | x) & highs
}

func hex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads the number at i; it returns where it ends and plainInt
// when it is written as an integer (no fraction, no exponent).
func (s *scanner) number(i int) (int, uint16, bool) {
	src := s.src
	j := i
	if src[j] == '-' {
		j++
	}
	digits := func() int {
		k := j
		for j < len(src) && src[j] >= '0' && src[j] <= '9' {
			j++
		}
		return j - k
	}
	if j >= len(src) {
		return j, 0, s.fail(scanEnd, j)
	}
	if src[j] == '0' {
		j++
	} else if digits() == 0 {
		return j, 0, s.fail(scanSyntax, j)
	}
	integer := uint16(plainInt)
	if j < len(src) && src[j] == '.' {
		integer = 0
		j++
		if digits() == 0 {
			return j, 0, s.fail(scanSyntax, j)
		}
	}
	if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
		integer = 0
		j++
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if digits() == 0 {
			return j, 0, s.fail(scanSyntax, j)
		}
	}
	return j, integer, true
}

// pointer is the JSON pointer of the value being read: in the arrays
// and objects open, the current item or member; with dupKey >= 0, the
// innermost object's member of that key instead.
func (s *scanner) pointer(dupKey int) string {
	var b strings.Builder
	for n, f := range s.open {
		last := n == len(s.open)-1
		if f.kind == kArray {
			if f.count > 0 {
				b.WriteByte('/')
				b.WriteString(strconv.Itoa(int(f.count) - 1))
			}
			continue
		}
		key := -1
		switch {
		case last && dupKey >= 0:
			key = dupKey
		case !last:
			key = int(s.open[n+1].tok) - 1 // a member's value follows its key
		case f.count > 0:
			key = int(f.last)
		}
		if key >= 0 {
			b.WriteByte('/')
			b.WriteString(escapePointer(string(s.bytes(&s.tape[key]))))
		}
	}
	return b.String()
}

// violation is what is wrong with a text scan refused, for a body (or a
// JSON parameter) at location loc.
func (s *scanner) violation(loc string) Violation {
	at := " at byte " + strconv.Itoa(s.errAt)
	switch s.err {
	case scanDuplicate:
		return Violation{Location: loc + s.errPath, Keyword: "duplicate_key", Message: "must be the only member of its object with this name"}
	case scanUTF8:
		return Violation{Location: loc + s.errPath, Keyword: "json", Message: "must be I-JSON (RFC 7493): invalid UTF-8" + at}
	case scanSurrogate:
		return Violation{Location: loc + s.errPath, Keyword: "json", Message: "must be I-JSON (RFC 7493): a lone surrogate escape" + at}
	case scanDepth:
		return Violation{Location: loc, Keyword: "json", Message: "must be JSON text (nested too deep)"}
	case scanEnd:
		return Violation{Location: loc, Keyword: "json", Message: "must be JSON text (unexpected end)"}
	}
	return Violation{Location: loc, Keyword: "json", Message: "must be JSON text (syntax error" + at + ")"}
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// value builds the Go value of the value at t, as encoding/json decodes
// it with UseNumber: what the JSON Schema library validates when a
// value's violations are to be listed (the checks found it invalid) or
// when its schema is the library's alone.
func (s *scanner) value(t uint32) any {
	tk := &s.tape[t]
	switch tk.kind {
	case kNull:
		return nil
	case kTrue:
		return true
	case kFalse:
		return false
	case kNumber:
		return json.Number(string(s.bytes(tk)))
	case kString:
		return string(s.bytes(tk))
	case kArray:
		a := make([]any, 0, tk.end)
		for k, i := uint32(0), t+1; k < tk.end; k, i = k+1, s.tape[i].next {
			a = append(a, s.value(i))
		}
		return a
	}
	m := make(map[string]any, tk.end)
	for k, i := uint32(0), t+1; k < tk.end; k, i = k+1, s.tape[i+1].next {
		m[string(s.bytes(&s.tape[i]))] = s.value(i + 1)
	}
	return m
}

// scanners are reused from request to request; one that grew past
// maxPooledTape tokens (a body of many values) is left to the collector.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

const maxPooledTape = 1 << 16

// maxPooledDepth: a scanner that read a text nested deeper (a frame is
// 152 bytes) is left to the collector too.
const maxPooledDepth = 1 << 10

func getScanner() *scanner { return scanners.Get().(*scanner) }

func putScanner(s *scanner) {
	if cap(s.tape) > maxPooledTape || cap(s.dec) > 1<<20 || cap(s.open) > maxPooledDepth {
		return
	}
	s.reset(nil)
	scanners.Put(s)
}
