package caddyopenapi

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// The one-pass check reads a JSON body and checks it against its
// schema's compiled checks at the same time: no tape, each member's
// value checked by its property's schema as it is read, property names
// found by the schema's nameTable, required members and repeated
// declared members counted in bit sets. It only ever accepts: a body it
// does not accept, because the body is invalid or because the one-pass
// check does not decide it (a format the library decides, a number of
// more than 19 digits, a string with an escape in a uniqueItems array,
// two undeclared member names with one fingerprint, ...), is read onto
// the tape and checked there (checkBytes), so the verdict and the
// violations stay those of the tape and the library. Only schemas whose
// keywords it covers get it (onePass); FuzzCompiledValidator holds it to
// the library: it must never accept what the library refuses.

// onePassDepth bounds the nesting the one-pass check follows; a deeper
// body goes to the tape.
const onePassDepth = 256

// onePassUnique bounds the items of a uniqueItems array the one-pass
// check compares; a longer array goes to the tape.
const onePassUnique = 16

// accepts reports whether src is one I-JSON value that c accepts. False
// says nothing: the tape decides.
func (s *scanner) accepts(c *schemaCheck, src []byte) bool {
	s.reset(src)
	i, ok := s.passValue(c, skip(src, 0), 0)
	return ok && skip(src, i) == len(src)
}

// onePass reports whether the one-pass check covers c and every schema
// it applies to a value inside its own.
func onePass(c *schemaCheck) bool {
	return c != nil && passable(c, map[*schemaCheck]bool{})
}

func passable(c *schemaCheck, seen map[*schemaCheck]bool) bool {
	if c == nil || c.always != 0 {
		return true
	}
	if ok, done := seen[c]; done {
		return ok // true while c is being looked at: a loop through a value
	}
	seen[c] = true
	ok := passableHere(c)
	if ok && c.via != nil {
		ok = passable(c.via, seen)
	}
	for _, p := range c.propList {
		ok = ok && passable(p.schema, seen)
	}
	for _, sub := range c.prefix {
		ok = ok && passable(sub, seen)
	}
	ok = ok && passable(c.addlSchema, seen) && passable(c.items, seen) && passable(c.addlItemsSc, seen)
	seen[c] = ok
	return ok
}

// passableHere reports whether the one-pass check covers c's own
// keywords (not the schemas it applies to what it holds).
func passableHere(c *schemaCheck) bool {
	if c.via != nil {
		return true
	}
	if c.refOnly || c.ref != nil || c.not != nil || len(c.allOf) > 0 || len(c.anyOf) > 0 ||
		len(c.oneOf) > 0 || c.ifS != nil {
		return false
	}
	if c.cnst != nil && !c.cnst.scalarsOnly || c.enum != nil && !c.enum.scalarsOnly {
		return false
	}
	if len(c.patProps) > 0 || len(c.deps) > 0 || c.propertyNames != nil || len(c.reqMore) > 0 ||
		c.props != nil && (c.propTab == nil || len(c.propList) > 64) {
		return false
	}
	return c.contains == nil
}

// passVia is the schema a schema that is only a $ref stands for; nil
// when it has other keywords.
func passVia(c *schemaCheck) *schemaCheck {
	if c.ref == nil || c.types != 0 || c.fmt != nil || c.cnst != nil || c.enum != nil ||
		c.objects || c.arrays || c.strings || c.numbers ||
		c.not != nil || len(c.allOf) > 0 || len(c.anyOf) > 0 || len(c.oneOf) > 0 || c.ifS != nil {
		return nil
	}
	return c.ref
}

// passValue checks the value at i against c (nil: any value).
func (s *scanner) passValue(c *schemaCheck, i, depth int) (int, bool) {
	for c != nil && c.via != nil {
		c = c.via
	}
	if c != nil && c.always != 0 {
		if c.always < 0 {
			return i, false
		}
		c = nil
	}
	src := s.src
	if i >= len(src) {
		return i, false
	}
	switch ch := src[i]; {
	case ch == '"':
		j, v, ok := s.passString(i)
		if !ok || c == nil {
			return j, ok
		}
		return j, c.passString(unsafeString(v))
	case ch == '{':
		if depth >= onePassDepth || c != nil && (c.types != 0 && c.types&tObject == 0 || c.cnst != nil || c.enum != nil) {
			return i, false
		}
		return s.passObject(c, i, depth)
	case ch == '[':
		if depth >= onePassDepth || c != nil && (c.types != 0 && c.types&tArray == 0 || c.cnst != nil || c.enum != nil) {
			return i, false
		}
		return s.passArray(c, i, depth)
	case ch == '-' || ch >= '0' && ch <= '9':
		if c != nil && c.unitsFirst() {
			// read as units and checked in the same pass
			if j, v, point, ok := unitsAt(src, i, c.scale); ok && (!point || c.types == 0 || c.types&tNumber != 0) {
				return j, c.unitsIn(v)
			}
		}
		j, integer, ok := s.number(i)
		if !ok {
			return j, false
		}
		return j, c == nil || c.passNumber(src[i:j], integer == plainInt)
	case ch == 't' && len(src)-i >= 4 && string(src[i:i+4]) == "true":
		return i + 4, c == nil || c.passLiteral(kTrue)
	case ch == 'f' && len(src)-i >= 5 && string(src[i:i+5]) == "false":
		return i + 5, c == nil || c.passLiteral(kFalse)
	case ch == 'n' && len(src)-i >= 4 && string(src[i:i+4]) == "null":
		return i + 4, c == nil || c.passLiteral(kNull)
	}
	return i, false
}

// passString reads the string at i: where it ends and its content. A
// string of plain ASCII (no escape) that ends eight bytes or more before
// the text does is read here; readString reads the others. A word is
// loaded from src[k:k+8], not src[k:]: the compiler then knows its
// length, and the loop's k+8 <= len(src) its bounds (about 8
// instructions a word fewer).
func (s *scanner) passString(i int) (int, []byte, bool) {
	src := s.src
	for k := i + 1; k+8 <= len(src); k += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(src[k : k+8])); m != 0 {
			if k += bits.TrailingZeros64(m) >> 3; src[k] == '"' {
				return k + 1, src[i+1 : k], true
			}
			break
		}
	}
	j, start, end, dec, ok := s.readString(i)
	if dec {
		return j, s.dec[start:end], ok
	}
	return j, src[start:end], ok
}

func (c *schemaCheck) passString(v string) bool {
	if c.types != 0 && c.types&tString == 0 {
		return false
	}
	if f := c.fmt; f != nil && f.int == 0 {
		switch {
		case f.str != nil:
			if !f.str(v) {
				return false
			}
		case f.fast == nil || !f.fast(v):
			return false // the library decides: on the tape
		}
	}
	if c.strings && !c.validString(v) {
		return false
	}
	return (c.cnst == nil || c.cnst.hasString(v)) && (c.enum == nil || c.enum.hasString(v))
}

func (c *schemaCheck) passNumber(b []byte, integer bool) bool {
	if c.unitsFirst() && (integer || c.types == 0 || c.types&tNumber != 0) {
		// a number of at most scale decimals (type integer and type
		// number both take an integer) against bounds in the same units
		if j, v, _, ok := unitsAt(b, 0, c.scale); ok && j == len(b) {
			return c.unitsIn(v)
		}
	}
	if c.types != 0 && c.types&tNumber == 0 &&
		(c.types&tInteger == 0 || !integer && !parseDecimal(b).isInt()) {
		return false
	}
	if c.fmt != nil && c.fmt.int != 0 && !intInRange(parseDecimal(b), c.fmt.int) {
		return false
	}
	if c.numbers && !c.validNumber(parseDecimal(b), b) {
		return false
	}
	if c.cnst == nil && c.enum == nil {
		return true
	}
	d := parseDecimal(b)
	return d.fits && (c.cnst == nil || c.cnst.hasScalar(kNumber, d)) && (c.enum == nil || c.enum.hasScalar(kNumber, d))
}

// unitsFirst: c's checks of a number are bounds and multipleOf that
// an int64 of units decides (unitsIn), nothing else.
func (c *schemaCheck) unitsFirst() bool {
	return c.numbers && c.ints && c.cnst == nil && c.enum == nil && (c.fmt == nil || c.fmt.int == 0)
}

// unitsIn checks a number of units against c's type, bounds and
// multipleOf (unitsFirst).
func (c *schemaCheck) unitsIn(v int64) bool {
	return (c.types == 0 || c.types&(tNumber|tInteger) != 0) &&
		v >= c.lo && v <= c.hi && (c.mulInt == 0 || v%c.mulInt == 0)
}

// unitsAt reads the JSON number at i as units of 10^-scale: where it
// ends and whether it has a fraction. False when the text at i is not
// a JSON number or has an exponent, more decimals than scale (but
// zeros), or 10^17 units or more.
func unitsAt(b []byte, i, scale int) (j int, v int64, point, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start, digits := i, 0
	for ; i < len(b) && b[i]-'0' <= 9; i++ {
		if v = v*10 + int64(b[i]-'0'); v != 0 {
			digits++
		}
	}
	if n := i - start; n == 0 || n > 1 && b[start] == '0' {
		return i, 0, false, false
	}
	decimals := 0
	if i < len(b) && b[i] == '.' {
		point = true
		i++
		k := i
		for ; i < len(b) && b[i]-'0' <= 9; i++ {
			d := b[i] - '0'
			if decimals == scale {
				if d != 0 {
					return i, 0, point, false
				}
				continue
			}
			decimals++
			if v = v*10 + int64(d); v != 0 {
				digits++
			}
		}
		if i == k {
			return i, 0, point, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') || digits+scale-decimals >= 17 {
		return i, 0, point, false
	}
	for ; decimals < scale; decimals++ {
		v *= 10
	}
	if neg {
		v = -v
	}
	return i, v, point, true
}

func (c *schemaCheck) passLiteral(k tokKind) bool {
	if c.types != 0 && c.types&kindBits[k] == 0 {
		return false
	}
	return (c.cnst == nil || c.cnst.hasScalar(k, decimal{})) && (c.enum == nil || c.enum.hasScalar(k, decimal{}))
}

func (e *enumCheck) hasString(v string) bool {
	if e.strTab != nil {
		return e.strTab.find(v) >= 0
	}
	_, ok := e.strs[v]
	return ok
}

// hasScalar: a number (d) or true, false, null among the enum's values.
func (e *enumCheck) hasScalar(k tokKind, d decimal) bool {
	for _, sc := range e.scalars {
		if sc.kind == k && (k != kNumber || sc.d == d) {
			return true
		}
	}
	return false
}

// passObject checks the object at i. A declared member's bit in seen
// finds it twice; an undeclared member's name has its fingerprint in
// other, and a name whose fingerprint is there already sends the body
// to the tape, which compares the names. The member expected next is
// the property declared after the last one found (propList's order):
// when the member's bytes are that name and its closing quote (one
// word compared for a name of at most 7 bytes, two for at most 15), the
// name is neither scanned nor looked up.
func (s *scanner) passObject(c *schemaCheck, i, depth int) (int, bool) {
	src := s.src
	var (
		seen, have uint64
		other      [16]uint64
		count      int
		next       int // the index in c.propList of the member expected
	)
	i = skip(src, i+1)
	if i < len(src) && src[i] == '}' {
		return i + 1, c == nil || c.passMembers(0, 0)
	}
	for {
		if i >= len(src) || src[i] != '"' {
			return i, false
		}
		count++
		var sub *schemaCheck // nil: any value
		var ok bool
		evaluated := false
		k, j := -1, 0
		if c != nil && next < len(c.propList) {
			p := c.propList[next]
			switch q := p.quoted; {
			case q == "":
			case len(q) <= 16 && len(src)-i > 16:
				if binary.LittleEndian.Uint64(src[i+1:i+9])&p.masks[0] == p.words[0] &&
					(len(q) <= 8 || binary.LittleEndian.Uint64(src[i+9:i+17])&p.masks[1] == p.words[1]) {
					k, j = next, i+1+len(q)
				}
			case len(src)-i > len(q) && string(src[i+1:i+1+len(q)]) == q:
				k, j = next, i+1+len(q)
			}
		}
		if k < 0 {
			var name []byte
			if j, name, ok = s.passString(i); !ok {
				return j, false
			}
			if c != nil && c.propTab != nil {
				k = c.propTab.find(unsafeString(name))
			}
			if k < 0 {
				fp := fingerprint(name)
				if other[fp>>6]&(1<<(fp&63)) != 0 {
					return j, false
				}
				other[fp>>6] |= 1 << (fp & 63)
			}
		}
		if k >= 0 {
			bit := uint64(1) << k
			if seen&bit != 0 {
				return j, false // a duplicate
			}
			seen |= bit
			p := c.propList[k]
			have |= p.bit
			sub, evaluated = p.schema, p.schema != nil
			next = k + 1
		}
		if !evaluated && c != nil {
			switch c.addl {
			case 1:
				return j, false
			case 2:
				sub = c.addlSchema
			}
		}
		// the colon, most often with no white space around it
		if j < len(src) && src[j] == ':' {
			j++
		} else {
			if j = skip(src, j); j >= len(src) || src[j] != ':' {
				return j, false
			}
			j++
		}
		// a string value with a schema of its own (most members) is
		// checked here, without passValue's look at the first byte
		if j = skip(src, j); j < len(src) && src[j] == '"' && sub != nil && sub.via == nil && sub.always == 0 {
			var v []byte
			if i, v, ok = s.passString(j); !ok || !sub.passString(unsafeString(v)) {
				return i, false
			}
		} else if i, ok = s.passValue(sub, j, depth+1); !ok {
			return i, false
		}
		if i < len(src) && src[i] <= ' ' {
			i = skip(src, i)
		}
		if i >= len(src) {
			return i, false
		}
		switch src[i] {
		case ',':
			i = skip(src, i+1)
			continue
		case '}':
			return i + 1, c == nil || c.passMembers(count, have)
		}
		return i, false
	}
}

// passMembers: the object's size and required members.
func (c *schemaCheck) passMembers(count int, have uint64) bool {
	return have&c.reqMask == c.reqMask &&
		(c.minProps < 0 || count >= c.minProps) && (c.maxProps < 0 || count <= c.maxProps)
}

// passArray checks the array at i. Items of a uniqueItems array are
// compared as text: only strings without an escape (distinct texts are
// distinct strings); any other item sends the body to the tape.
func (s *scanner) passArray(c *schemaCheck, i, depth int) (int, bool) {
	src := s.src
	var texts [onePassUnique][]byte
	count := 0
	i = skip(src, i+1)
	if i < len(src) && src[i] == ']' {
		return i + 1, c == nil || c.passItems(0)
	}
	for {
		var sub *schemaCheck
		if c != nil {
			switch {
			case count < len(c.prefix):
				sub = c.prefix[count]
			case c.items != nil:
				sub = c.items
			case c.addlItems == 1:
				return i, false
			case c.addlItems == 2:
				sub = c.addlItemsSc
			}
		}
		start := i
		var ok bool
		if i, ok = s.passValue(sub, i, depth+1); !ok {
			return i, false
		}
		if c != nil && c.unique {
			t := src[start:i]
			if count >= onePassUnique || t[0] != '"' || bytes.IndexByte(t, '\\') >= 0 {
				return i, false
			}
			for _, u := range texts[:count] {
				if string(u) == string(t) {
					return i, false
				}
			}
			texts[count] = t
		}
		count++
		if i < len(src) && src[i] <= ' ' {
			i = skip(src, i)
		}
		if i >= len(src) {
			return i, false
		}
		switch src[i] {
		case ',':
			i = skip(src, i+1)
			continue
		case ']':
			return i + 1, c == nil || c.passItems(count)
		}
		return i, false
	}
}

// passItems: the array's size.
func (c *schemaCheck) passItems(count int) bool {
	return (c.minItems < 0 || count >= c.minItems) && (c.maxItems < 0 || count <= c.maxItems)
}

// plainName reports whether a body writes name as its bytes, with no
// escape: valid UTF-8 without '"', '\\' or a control character.
func plainName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.ValidString(name)
}
