package caddyopenapi

import (
	"math"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Most patterns in API descriptions are a run of character classes
// anchored at the start ("^[A-Z]{3}-[0-9]+$", "^[a-z0-9-]+$"), or such a
// run with a group of classes repeated ("^[a-z_]+(,[a-z_]+)*$"). Go's
// regexp takes some 200 instructions a character for them; classPattern
// matches such a pattern with one test a character, as regexp does
// (runes, invalid UTF-8 as U+FFFD), where a greedy match is the match:
// each class or group that repeats a variable number of times shares no
// character with what may follow it, so the next character alone says
// whether it goes on. A pattern of ASCII characters only is a bytePattern
// first (bytepattern.go); other patterns stay regexp's.

// classPattern is a pattern of character classes and groups of them,
// each repeated min to max times (max math.MaxInt: no bound), from the
// start of the text, up to its end when end is set.
type classPattern struct {
	src   jsonschema.Regexp // the pattern as the library compiled it
	parts []classPart
	end   bool
}

// classPart is a character class, or (group set) a group of classes,
// repeated min to max times. A group's first class is repeated at least
// once: each repetition reads a character.
type classPart struct {
	ascii    [utf8.RuneSelf]bool // the class's characters below 128: a lookup is one load
	ranges   []rune              // the class as lo, hi pairs (from regexp/syntax)
	min, max int
	group    []classPart
}

func (p *classPart) has(r rune) bool {
	if r < utf8.RuneSelf {
		return p.ascii[r]
	}
	for i := 0; i+1 < len(p.ranges); i += 2 {
		if r < p.ranges[i] {
			return false
		}
		if r <= p.ranges[i+1] {
			return true
		}
	}
	return false
}

// fastPattern returns a bytePattern for re when it is one, else a
// classPattern when it is one, else re.
func fastPattern(re jsonschema.Regexp) jsonschema.Regexp {
	if re == nil {
		return nil
	}
	if bp := newBytePattern(re); bp != nil {
		return bp
	}
	if cp := newClassPattern(re); cp != nil {
		return cp
	}
	return re
}

// newClassPattern returns re as a classPattern, or nil when it is not one.
func newClassPattern(re jsonschema.Regexp) *classPattern {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	subs := []*syntax.Regexp{tree}
	if tree.Op == syntax.OpConcat {
		subs = tree.Sub
	}
	if len(subs) == 0 || subs[0].Op != syntax.OpBeginText {
		return nil
	}
	p := &classPattern{src: re}
	subs = subs[1:]
	if n := len(subs); n > 0 && subs[n-1].Op == syntax.OpEndText {
		p.end = true
		subs = subs[:n-1]
	}
	for _, sub := range subs {
		if !p.add(sub) {
			return nil
		}
	}
	if !greedy(p.parts, nil) {
		return nil
	}
	return p
}

// greedy reports whether every part that repeats a variable number of
// times shares no character with what may follow it (in parts, then
// after: the parts after a group, with the group's own first class), so
// that reading as much as it can is the only way to match.
func greedy(parts []classPart, after []classPart) bool {
	for i := range parts {
		a := &parts[i]
		if a.group != nil {
			// after the group's last part: its first part again, or
			// what follows the group
			follow := append(append([]classPart{a.group[0]}, parts[i+1:]...), after...)
			if !greedy(a.group, follow) {
				return false
			}
		}
		if a.min == a.max {
			continue
		}
		first := a.first()
		for _, b := range append(parts[i+1:len(parts):len(parts)], after...) {
			if overlap(first, b.first()) {
				return false
			}
			if b.min > 0 {
				break
			}
		}
	}
	return true
}

// first is the class a part's match starts with.
func (p *classPart) first() []rune {
	if p.group != nil {
		return p.group[0].ranges
	}
	return p.ranges
}

// add appends the parts of one node of the pattern; false when it is
// not a class, a literal, a group of them or a repeat of one.
func (p *classPattern) add(n *syntax.Regexp) bool {
	parts, ok := addParts(p.parts, n, true)
	p.parts = parts
	return ok
}

// addParts appends to parts the parts of n; groups (a repeated
// sequence of classes) only when groups is set.
func addParts(parts []classPart, n *syntax.Regexp, groups bool) ([]classPart, bool) {
	if n.Flags&syntax.FoldCase != 0 {
		return parts, false
	}
	switch n.Op {
	case syntax.OpEmptyMatch:
		return parts, true
	case syntax.OpCapture:
		return addSeq(parts, n.Sub[0], groups)
	case syntax.OpLiteral:
		for _, r := range n.Rune {
			parts = append(parts, newPart([]rune{r, r}, 1, 1))
		}
		return parts, true
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return append(parts, newPart(classOf(n), 1, 1)), true
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := n.Min, n.Max
		switch n.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		sub := n.Sub[0]
		if sub.Flags&syntax.FoldCase != 0 {
			return parts, false
		}
		switch {
		case sub.Op == syntax.OpLiteral && len(sub.Rune) == 1:
			return append(parts, newPart([]rune{sub.Rune[0], sub.Rune[0]}, lo, hi)), true
		case sub.Op == syntax.OpCharClass || sub.Op == syntax.OpAnyChar || sub.Op == syntax.OpAnyCharNotNL:
			return append(parts, newPart(classOf(sub), lo, hi)), true
		}
		if !groups {
			return parts, false
		}
		body, ok := addSeq(nil, sub, false)
		if !ok || len(body) == 0 || body[0].min == 0 {
			return parts, false
		}
		if hi < 0 {
			hi = math.MaxInt
		}
		return append(parts, classPart{group: body, min: lo, max: hi}), true
	}
	return parts, false
}

// addSeq appends the parts of n, a concatenation or a single node.
func addSeq(parts []classPart, n *syntax.Regexp, groups bool) ([]classPart, bool) {
	if n.Op != syntax.OpConcat {
		return addParts(parts, n, groups)
	}
	if n.Flags&syntax.FoldCase != 0 {
		return parts, false
	}
	for _, s := range n.Sub {
		var ok bool
		if parts, ok = addParts(parts, s, groups); !ok {
			return parts, false
		}
	}
	return parts, true
}

func classOf(n *syntax.Regexp) []rune {
	switch n.Op {
	case syntax.OpAnyChar:
		return []rune{0, unicode.MaxRune}
	case syntax.OpAnyCharNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}
	}
	return n.Rune
}

func newPart(ranges []rune, lo, hi int) classPart {
	if hi < 0 {
		hi = math.MaxInt
	}
	p := classPart{ranges: ranges, min: lo, max: hi}
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1] && r < utf8.RuneSelf; r++ {
			p.ascii[r] = true
		}
	}
	return p
}

func overlap(a, b []rune) bool {
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			if a[i] <= b[j+1] && b[j] <= a[i+1] {
				return true
			}
		}
	}
	return false
}

func (p *classPattern) String() string { return p.src.String() }

// MatchString reports whether s matches, as regexp would.
func (p *classPattern) MatchString(s string) bool {
	i, ok := matchParts(p.parts, s, 0)
	return ok && (!p.end || i == len(s))
}

// matchParts matches parts from s[i:]; it returns where the match ends.
func matchParts(parts []classPart, s string, i int) (int, bool) {
	for k := range parts {
		part := &parts[k]
		n := 0
		if part.group != nil {
			// a repetition that does not match ends them where it
			// started: what follows does not start with its first
			// character (greedy), so regexp's backtracking would
			// find no other match
			for n < part.max {
				j, ok := matchParts(part.group, s, i)
				if !ok {
					break
				}
				i = j
				n++
			}
			if n < part.min {
				return i, false
			}
			continue
		}
		for n < part.max && i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				if !part.ascii[c] {
					break
				}
				i++
			} else {
				r, size := utf8.DecodeRuneInString(s[i:])
				if !part.has(r) {
					break
				}
				i += size
			}
			n++
		}
		if n < part.min {
			return i, false
		}
	}
	return i, true
}
