package caddyopenapi

import (
	"regexp/syntax"
	"strconv"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A pattern whose characters are all ASCII ("^[a-z_]+(,[a-z_]+)*$",
// "^ORD-[0-9]{6,10}$") is compiled at load into a table of states, one
// row of 256 next states per state: matching is one load a byte
// (classPattern takes a test and a branch a character, regexp some 200
// instructions). It matches as regexp does: no character of such a
// pattern matches a rune past ASCII (nor U+FFFD, which regexp reads an
// invalid byte as), so a byte of 0x80 or more ends every way through the
// pattern that would read it, and the text's other bytes are its
// characters.

// maxByteStates bounds a table: 128 states of 256 bytes each.
const maxByteStates = 128

// Two states every table has: dead (no way through the pattern goes on)
// and matched (the pattern matched a prefix of the text and asks nothing
// of what follows, as "^x" does: MatchString is true whatever comes).
const (
	byteDead    = 0
	byteMatched = 1
)

// bytePattern is a pattern compiled to a table of states over bytes.
type bytePattern struct {
	src   jsonschema.Regexp // the pattern as the library compiled it
	next  [][256]uint8      // next[state][byte]: the state after reading byte
	atEnd []bool            // atEnd[state]: the pattern matches when the text ends here
	start uint8
	// asciiOnly: every text the pattern matches is ASCII, the pattern
	// reading all of it (no byte past ASCII leads anywhere but dead,
	// and no state is matched before the text's end)
	asciiOnly bool
}

func (p *bytePattern) String() string { return p.src.String() }

// MatchString reports whether s matches, as regexp would.
func (p *bytePattern) MatchString(s string) bool {
	st, next := p.start, p.next
	for i := 0; i < len(s); i++ {
		// dead and matched lead to themselves: a text that leaves
		// the pattern early reads on to its end without a branch
		st = next[st][s[i]]
	}
	return p.atEnd[st]
}

// newBytePattern compiles re into a table, or returns nil when it is not
// one: a character past ASCII, case folding, an assertion other than ^
// and $ (\A, \z), or more than maxByteStates states.
func newBytePattern(re jsonschema.Regexp) *bytePattern {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil || !asciiProg(prog) {
		return nil
	}
	b := byteBuilder{prog: prog, index: map[string]uint8{}, p: &bytePattern{src: re}}
	b.p.next = append(b.p.next, [256]uint8{}, [256]uint8{})
	b.p.atEnd = append(b.p.atEnd, false, true)
	for c := range b.p.next[byteMatched] {
		b.p.next[byteMatched][c] = byteMatched
	}
	// each position in the text may start a match (regexp searches);
	// an anchored pattern's ways from there need ^ and end at once
	b.restart = b.closure(nil, []uint32{uint32(prog.Start)}, false)
	first := b.closure(nil, []uint32{uint32(prog.Start)}, true)
	start, ok := b.state(first, true)
	if !ok {
		return nil
	}
	b.p.start = start
	for len(b.todo) > 0 {
		t := b.todo[0]
		b.todo = b.todo[1:]
		for c := 0; c < 256; c++ {
			// past ASCII only the matches starting after it go on
			var out []uint32
			for _, pc := range t.set {
				if in := &prog.Inst[pc]; c < utf8.RuneSelf && isRuneInst(in.Op) && in.MatchRune(rune(c)) {
					out = append(out, in.Out)
				}
			}
			set := append(b.closure(nil, out, false), b.restart...)
			n, ok := b.state(set, false)
			if !ok {
				return nil
			}
			b.p.next[t.id][c] = n
		}
	}
	b.p.asciiOnly = b.p.readsAll()
	return b.p
}

// readsAll reports whether a text the pattern matches is ASCII.
func (p *bytePattern) readsAll() bool {
	if p.start == byteMatched {
		return false
	}
	for st := byteMatched + 1; st < len(p.next); st++ {
		for c, n := range p.next[st] {
			if n == byteMatched || c >= utf8.RuneSelf && n != byteDead {
				return false
			}
		}
	}
	return true
}

// asciiProg reports whether every instruction of prog reads an ASCII
// character only and every assertion is ^ or $.
func asciiProg(prog *syntax.Prog) bool {
	for i := range prog.Inst {
		in := &prog.Inst[i]
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1:
			if syntax.Flags(in.Arg)&syntax.FoldCase != 0 {
				return false
			}
			for _, r := range in.Rune {
				if r >= utf8.RuneSelf {
					return false
				}
			}
		case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			return false
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&^(syntax.EmptyBeginText|syntax.EmptyEndText) != 0 {
				return false
			}
		}
	}
	return true
}

func isRuneInst(op syntax.InstOp) bool {
	return op == syntax.InstRune || op == syntax.InstRune1
}

type byteBuilder struct {
	prog    *syntax.Prog
	p       *bytePattern
	index   map[string]uint8 // a set's key: its state
	todo    []byteState
	restart []uint32 // the ways from a position past the first
}

type byteState struct {
	id  uint8
	set []uint32
}

// closure appends to set the instructions reached from pcs without
// reading a character: those that read one, the match, and the $
// assertions (decided at the text's end). begin says the text's start,
// where ^ holds.
func (b *byteBuilder) closure(set []uint32, pcs []uint32, begin bool) []uint32 {
	seen := make(map[uint32]bool)
	for _, pc := range set {
		seen[pc] = true
	}
	var walk func(pc uint32)
	walk = func(pc uint32) {
		if seen[pc] {
			return
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			walk(in.Out)
			walk(in.Arg)
		case syntax.InstNop, syntax.InstCapture:
			walk(in.Out)
		case syntax.InstEmptyWidth:
			op := syntax.EmptyOp(in.Arg)
			switch {
			case op&syntax.EmptyBeginText != 0 && !begin:
			case op&syntax.EmptyEndText != 0:
				set = append(set, pc)
			default:
				walk(in.Out)
			}
		case syntax.InstMatch, syntax.InstRune, syntax.InstRune1:
			set = append(set, pc)
		}
	}
	for _, pc := range pcs {
		walk(pc)
	}
	return set
}

// state returns the state of a set of instructions, adding it when it is
// new; false when the table would grow past maxByteStates.
func (b *byteBuilder) state(set []uint32, begin bool) (uint8, bool) {
	set = sortedUnique(set)
	if len(set) == 0 {
		return byteDead, true
	}
	if b.matches(set, begin, false) {
		return byteMatched, true
	}
	key := keyOf(set, begin)
	if id, ok := b.index[key]; ok {
		return id, true
	}
	if len(b.p.next) >= maxByteStates {
		return 0, false
	}
	id := uint8(len(b.p.next))
	b.index[key] = id
	b.p.next = append(b.p.next, [256]uint8{})
	b.p.atEnd = append(b.p.atEnd, b.matches(set, begin, true))
	b.todo = append(b.todo, byteState{id: id, set: set})
	return id, true
}

// matches reports whether set reaches the match without reading a
// character, with $ holding when end is set.
func (b *byteBuilder) matches(set []uint32, begin, end bool) bool {
	var pcs []uint32
	for _, pc := range set {
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstEmptyWidth:
			if end {
				pcs = append(pcs, in.Out)
			}
		}
	}
	if len(pcs) == 0 {
		return false
	}
	// past a $ only assertions and the match can follow without
	// reading: follow them with $ holding
	seen := map[uint32]bool{}
	for len(pcs) > 0 {
		pc := pcs[len(pcs)-1]
		pcs = pcs[:len(pcs)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			pcs = append(pcs, in.Out, in.Arg)
		case syntax.InstNop, syntax.InstCapture:
			pcs = append(pcs, in.Out)
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&syntax.EmptyBeginText == 0 || begin {
				pcs = append(pcs, in.Out)
			}
		}
	}
	return false
}

func sortedUnique(set []uint32) []uint32 {
	for i := 1; i < len(set); i++ {
		for j := i; j > 0 && set[j] < set[j-1]; j-- {
			set[j], set[j-1] = set[j-1], set[j]
		}
	}
	out := set[:0]
	for i, pc := range set {
		if i == 0 || pc != set[i-1] {
			out = append(out, pc)
		}
	}
	return out
}

func keyOf(set []uint32, begin bool) string {
	key := make([]byte, 0, 4*len(set)+1)
	if begin {
		key = append(key, 'b')
	}
	for _, pc := range set {
		key = strconv.AppendUint(key, uint64(pc), 10)
		key = append(key, ',')
	}
	return string(key)
}
