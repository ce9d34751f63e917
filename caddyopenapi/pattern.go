package caddyopenapi

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Most patterns in API descriptions are a run of character classes
// anchored at the start ("^[A-Z]{3}-[0-9]+$", "^[a-z0-9-]+$"). Go's
// regexp takes some 200 instructions a character for them; classPattern
// matches such a pattern with one test a character, as regexp does
// (runes, invalid UTF-8 as U+FFFD), where a greedy match is the match:
// each class that repeats a variable number of times shares no character
// with the classes that may follow it. Other patterns stay regexp's.

// classPattern is a pattern of character classes, each repeated min to
// max times (max -1: no bound), from the start of the text, up to its end
// when end is set.
type classPattern struct {
	src   jsonschema.Regexp // the pattern as the library compiled it
	parts []classPart
	end   bool
}

type classPart struct {
	ascii    [2]uint64 // the class's characters below 128
	ranges   []rune    // the class as lo, hi pairs (from regexp/syntax)
	min, max int
}

func (p *classPart) has(r rune) bool {
	if r < utf8.RuneSelf {
		return p.ascii[r>>6]&(1<<(r&63)) != 0
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

// fastPattern returns a classPattern for re when it is one, else re.
func fastPattern(re jsonschema.Regexp) jsonschema.Regexp {
	if re == nil {
		return nil
	}
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return re
	}
	subs := []*syntax.Regexp{tree}
	if tree.Op == syntax.OpConcat {
		subs = tree.Sub
	}
	if len(subs) == 0 || subs[0].Op != syntax.OpBeginText {
		return re
	}
	p := &classPattern{src: re}
	subs = subs[1:]
	if n := len(subs); n > 0 && subs[n-1].Op == syntax.OpEndText {
		p.end = true
		subs = subs[:n-1]
	}
	for _, sub := range subs {
		if !p.add(sub) {
			return re
		}
	}
	// a variable part must share no character with what may follow it
	for i, a := range p.parts {
		if a.min == a.max {
			continue
		}
		for _, b := range p.parts[i+1:] {
			if overlap(a.ranges, b.ranges) {
				return re
			}
			if b.min > 0 {
				break
			}
		}
	}
	return p
}

// add appends the parts of one node of the pattern; false when it is
// not a class, a literal or a repeat of one.
func (p *classPattern) add(n *syntax.Regexp) bool {
	if n.Flags&syntax.FoldCase != 0 {
		return false
	}
	switch n.Op {
	case syntax.OpEmptyMatch:
		return true
	case syntax.OpCapture:
		if n.Sub[0].Op == syntax.OpConcat {
			for _, s := range n.Sub[0].Sub {
				if !p.add(s) {
					return false
				}
			}
			return true
		}
		return p.add(n.Sub[0])
	case syntax.OpLiteral:
		for _, r := range n.Rune {
			p.parts = append(p.parts, newPart([]rune{r, r}, 1, 1))
		}
		return true
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		p.parts = append(p.parts, newPart(classOf(n), 1, 1))
		return true
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub := n.Sub[0]
		if sub.Flags&syntax.FoldCase != 0 {
			return false
		}
		var ranges []rune
		switch {
		case sub.Op == syntax.OpLiteral && len(sub.Rune) == 1:
			ranges = []rune{sub.Rune[0], sub.Rune[0]}
		case sub.Op == syntax.OpCharClass || sub.Op == syntax.OpAnyChar || sub.Op == syntax.OpAnyCharNotNL:
			ranges = classOf(sub)
		default:
			return false
		}
		lo, hi := n.Min, n.Max
		switch n.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		p.parts = append(p.parts, newPart(ranges, lo, hi))
		return true
	}
	return false
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
	p := classPart{ranges: ranges, min: lo, max: hi}
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1] && r < utf8.RuneSelf; r++ {
			p.ascii[r>>6] |= 1 << (r & 63)
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
	i := 0
	for k := range p.parts {
		part := &p.parts[k]
		n := 0
		for (part.max < 0 || n < part.max) && i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				if part.ascii[c>>6]&(1<<(c&63)) == 0 {
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
			return false
		}
	}
	return !p.end || i == len(s)
}
