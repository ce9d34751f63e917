package caddyopenapi

import (
	"encoding/json"
	"hash/maphash"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A schema the JSON Schema library compiled (*jsonschema.Schema) is
// compiled once more, into a tree of checks (schemaCheck) that reads a value
// on a scanner's tape: the verdict is the library's (the library stays
// the reference: FuzzCompiledValidator compares the two on generated
// schemas and values, TestJSONSchemaTestSuite runs the suite through
// this path), at no allocation for a valid value. Only the verdict is
// computed here: a value found invalid is given to the library, whose
// errors say where and why (violation.go).
//
// What the checks do not cover makes compileChecks return a reason, and
// the operation's body (or parameter) is then validated by the library:
// $dynamicRef, $recursiveRef, unevaluatedProperties, unevaluatedItems,
// vocabulary extensions, content assertions, and $refs that lead back to
// their schema without descending into the value.

// schemaCheck is one schema, compiled.
type schemaCheck struct {
	always int8 // 1: the schema true; -1: false; 0: the keywords below
	draft  int
	// rare: a keyword of those valid checks last, off its common path
	// (const, enum, $ref, not, allOf, anyOf, oneOf, if)
	rare bool
	// refOnly: $ref before 2019-09, beside which only the type, const,
	// enum and format keywords are checked
	refOnly bool

	types uint8 // tString... (0: any)
	cnst  *enumCheck
	enum  *enumCheck
	fmt   *formatCheck
	ref   *schemaCheck

	// objects
	objects       bool // any keyword below applies to objects
	minProps      int  // -1: none
	maxProps      int
	props         map[string]*propCheck
	propTab       *nameTable   // props without hashing, when it has one
	propList      []*propCheck // by propTab's index
	reqMask       uint64
	reqMore       []string // required names past 64
	patProps      []patternCheck
	addl          int8 // 0: none; 1: false; 2: addlSchema
	addlSchema    *schemaCheck
	deps          []depCheck // dependencies (before 2019), dependentRequired, dependentSchemas
	propertyNames *schemaCheck

	// arrays
	arrays      bool
	minItems    int
	maxItems    int
	unique      bool
	items       *schemaCheck   // every item (items before 2020, items in 2020 after prefixItems)
	prefix      []*schemaCheck // the first items (items as an array before 2020, prefixItems)
	addlItems   int8           // before 2020, after items as an array: 0 none; 1 false; 2 addlItemsSch
	addlItemsSc *schemaCheck
	contains    *schemaCheck
	minContains int
	maxContains int

	// strings
	strings bool
	minLen  int
	maxLen  int
	pattern jsonschema.Regexp
	// asciiOnly: a string the pattern matches is ASCII (so UTF-8)
	asciiOnly bool

	// numbers
	numbers                     bool
	min, max, exMin, exMax, mul *bound

	not                *schemaCheck
	allOf, anyOf       []*schemaCheck
	oneOf              []*schemaCheck
	ifS, thenS, elseS  *schemaCheck
	draft2019Dependent bool // dependentSchemas/dependentRequired apply (draft >= 7)

	// via: the schema this one is only a $ref to (onepass.go)
	via *schemaCheck
	// ints: every number keyword is a whole number of units of
	// 10^-scale (scale 0 to 6) below 10^17 units, so that a number written
	// with at most scale decimals is checked as an int64 of those units
	// against lo..hi and (mulInt > 0) multipleOf mulInt (onepass.go)
	ints   bool
	scale  int
	lo, hi int64
	mulInt int64
}

// intBounds sets ints, scale, lo, hi and mulInt when c's number
// keywords allow: the smallest scale at which they are all whole units.
func (c *schemaCheck) intBounds() {
	for scale := 0; scale <= maxScale; scale++ {
		if c.boundsAt(scale) {
			return
		}
	}
	c.ints = false
}

// maxScale: the most decimals a bound may have for the int64 check.
const maxScale = 6

func (c *schemaCheck) boundsAt(scale int) bool {
	c.ints, c.scale, c.lo, c.hi, c.mulInt = true, scale, math.MinInt64, math.MaxInt64, 0
	at := func(b *bound) (int64, bool) {
		if b == nil {
			return 0, false
		}
		v, ok := scaledInt(b.d, scale)
		c.ints = c.ints && ok
		return v, ok
	}
	if v, ok := at(c.min); ok {
		c.lo = max(c.lo, v)
	}
	if v, ok := at(c.exMin); ok {
		c.lo = max(c.lo, v+1)
	}
	if v, ok := at(c.max); ok {
		c.hi = min(c.hi, v)
	}
	if v, ok := at(c.exMax); ok {
		c.hi = min(c.hi, v-1)
	}
	if v, ok := at(c.mul); ok {
		c.mulInt = v
		c.ints = c.ints && v > 0
	}
	return c.ints
}

// scaledInt returns d in units of 10^-scale when it is a whole number of
// them below 10^17.
func scaledInt(d decimal, scale int) (int64, bool) {
	e := d.exp + int64(scale)
	if !d.fits || e < 0 || e > 17 {
		return 0, false
	}
	// checked: 10 * 2^63 wraps to 0 in a uint64, which made a minimum of
	// 9223372036854775808 a minimum of 0 at scale 1
	m, ok := mulPow10(d.mant, e)
	if !ok || m >= 1e17 {
		return 0, false
	}
	if d.neg {
		return -int64(m), true
	}
	return int64(m), true
}

type propCheck struct {
	schema *schemaCheck // nil: only required
	bit    uint64       // its bit in reqMask (0: not required)
	// quoted: the name and its closing quote as a body writes the name
	// without an escape (valid UTF-8, no '"', '\\' or control
	// character); "" when the name needs one. The one-pass check
	// compares a member's bytes with it.
	quoted string
	// words: quoted's first 16 bytes as two little-endian words (zero
	// past its end), and masks that keep as many bytes of a body's
	// words; set when quoted has at most 16 bytes
	words, masks [2]uint64
}

type patternCheck struct {
	re     jsonschema.Regexp
	schema *schemaCheck
}

// depCheck: when the object has prop, it must have every name of req and
// match schema (either may be empty).
type depCheck struct {
	prop      string
	req       []string
	schema    *schemaCheck
	afterDraf int // the check applies from this draft on (4, or 7 for dependent*)
}

type bound struct {
	d decimal
	r *big.Rat
}

// enumCheck: the value must equal one of the values (strings apart, for
// a lookup without allocation).
type enumCheck struct {
	strs   map[string]struct{}
	strTab *nameTable // strs without hashing, when it has one
	others []*scanner // each a tape of one value
	// scalars are the numbers, true, false and null of others, for the
	// one-pass check; scalarsOnly when others has nothing else (no
	// array, no object, no number of more than 19 digits)
	scalars     []scalarValue
	scalarsOnly bool
}

type scalarValue struct {
	kind tokKind
	d    decimal // a number's value
}

// compileChecks compiles a library schema; reason says why it cannot be
// (the schema is then validated by the library), where names the
// schema's location.
// declared, when not nil, orders a schema's property names as the
// document declares them (propList's order, which the one-pass check
// expects a body's members in); nil leaves them sorted.
func compileChecks(root *jsonschema.Schema, declared func(*jsonschema.Schema, []string)) (c *schemaCheck, reason string) {
	cc := &checkCompiler{memo: map[*jsonschema.Schema]*schemaCheck{}, declared: declared}
	if r := inPlaceLoop(root); r != "" {
		return nil, r
	}
	c = cc.compile(root)
	if cc.reason != "" {
		return nil, cc.reason
	}
	return c, ""
}

type checkCompiler struct {
	memo     map[*jsonschema.Schema]*schemaCheck
	reason   string
	declared func(*jsonschema.Schema, []string)
}

func (cc *checkCompiler) unsupported(s *jsonschema.Schema, kw string) {
	if cc.reason == "" {
		cc.reason = kw + " at " + describeLocation(s.Location)
	}
}

func (cc *checkCompiler) compile(s *jsonschema.Schema) *schemaCheck {
	if s == nil {
		return nil
	}
	if c, ok := cc.memo[s]; ok {
		return c
	}
	c := &schemaCheck{draft: s.DraftVersion, minProps: -1, maxProps: -1, minItems: -1, maxItems: -1,
		minContains: -1, maxContains: -1, minLen: -1, maxLen: -1}
	cc.memo[s] = c
	if s.Bool != nil {
		c.always = -1
		if *s.Bool {
			c.always = 1
		}
		return c
	}
	switch {
	case s.DynamicRef != nil:
		cc.unsupported(s, "$dynamicRef")
	case s.RecursiveRef != nil:
		cc.unsupported(s, "$recursiveRef")
	case s.UnevaluatedProperties != nil:
		cc.unsupported(s, "unevaluatedProperties")
	case s.UnevaluatedItems != nil:
		cc.unsupported(s, "unevaluatedItems")
	case len(s.Extensions) > 0:
		cc.unsupported(s, "a vocabulary extension")
	case s.ContentEncoding != nil || s.ContentMediaType != nil || s.ContentSchema != nil:
		cc.unsupported(s, "content assertions")
	}
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			c.types |= typeBits[t]
		}
	}
	if s.Const != nil {
		c.cnst = cc.enum([]any{*s.Const})
	}
	if s.Enum != nil {
		c.enum = cc.enum(s.Enum.Values)
	}
	if s.Format != nil {
		c.fmt = formatOf(s.Format)
	}
	c.ref = cc.compile(s.Ref)

	// objects
	if s.MinProperties != nil {
		c.minProps = *s.MinProperties
	}
	if s.MaxProperties != nil {
		c.maxProps = *s.MaxProperties
	}
	prop := func(name string) *propCheck {
		if c.props == nil {
			c.props = map[string]*propCheck{}
		}
		p := c.props[name]
		if p == nil {
			p = &propCheck{}
			c.props[name] = p
		}
		return p
	}
	for name, sch := range s.Properties {
		prop(name).schema = cc.compile(sch)
	}
	n := 0
	for _, name := range s.Required {
		p := prop(name)
		if p.bit != 0 {
			continue
		}
		if n < 64 {
			p.bit = 1 << n
			c.reqMask |= p.bit
			n++
		} else {
			c.reqMore = append(c.reqMore, name)
		}
	}
	for re, sch := range s.PatternProperties {
		c.patProps = append(c.patProps, patternCheck{re: fastPattern(re), schema: cc.compile(sch)})
	}
	switch a := s.AdditionalProperties.(type) {
	case bool:
		if !a {
			c.addl = 1
		}
	case *jsonschema.Schema:
		c.addl, c.addlSchema = 2, cc.compile(a)
	}
	for prop, dep := range s.Dependencies {
		switch d := dep.(type) {
		case []string:
			c.deps = append(c.deps, depCheck{prop: prop, req: d, afterDraf: 4})
		case *jsonschema.Schema:
			c.deps = append(c.deps, depCheck{prop: prop, schema: cc.compile(d), afterDraf: 4})
		}
	}
	for prop, req := range s.DependentRequired {
		c.deps = append(c.deps, depCheck{prop: prop, req: req, afterDraf: 7})
	}
	for prop, sch := range s.DependentSchemas {
		c.deps = append(c.deps, depCheck{prop: prop, schema: cc.compile(sch), afterDraf: 7})
	}
	if c.props != nil {
		names := slices.Sorted(maps.Keys(c.props))
		if cc.declared != nil {
			cc.declared(s, names)
		}
		if c.propTab = newNameTable(names); c.propTab != nil {
			for _, n := range names {
				p := c.props[n]
				if plainName(n) {
					p.quoted = n + `"`
					if len(p.quoted) <= 16 {
						for b := range len(p.quoted) {
							p.words[b/8] |= uint64(p.quoted[b]) << (b % 8 * 8)
							p.masks[b/8] |= 0xff << (b % 8 * 8)
						}
					}
				}
				c.propList = append(c.propList, p)
			}
		}
	}
	c.propertyNames = cc.compile(s.PropertyNames)
	c.objects = c.minProps >= 0 || c.maxProps >= 0 || c.props != nil || len(c.patProps) > 0 ||
		c.addl != 0 || len(c.deps) > 0 || c.propertyNames != nil

	// arrays
	if s.MinItems != nil {
		c.minItems = *s.MinItems
	}
	if s.MaxItems != nil {
		c.maxItems = *s.MaxItems
	}
	c.unique = s.UniqueItems
	if s.DraftVersion < 2020 {
		switch it := s.Items.(type) {
		case *jsonschema.Schema:
			c.items = cc.compile(it)
		case []*jsonschema.Schema:
			for _, sch := range it {
				c.prefix = append(c.prefix, cc.compile(sch))
			}
			switch a := s.AdditionalItems.(type) {
			case bool:
				if !a {
					c.addlItems = 1
				}
			case *jsonschema.Schema:
				c.addlItems, c.addlItemsSc = 2, cc.compile(a)
			}
		}
	} else {
		for _, sch := range s.PrefixItems {
			c.prefix = append(c.prefix, cc.compile(sch))
		}
		c.items = cc.compile(s.Items2020)
	}
	c.contains = cc.compile(s.Contains)
	if s.MinContains != nil {
		c.minContains = *s.MinContains
	}
	if s.MaxContains != nil {
		c.maxContains = *s.MaxContains
	}
	c.arrays = c.minItems >= 0 || c.maxItems >= 0 || c.unique || c.items != nil || c.prefix != nil ||
		c.addlItems != 0 || c.contains != nil

	// strings
	if s.MinLength != nil {
		c.minLen = *s.MinLength
	}
	if s.MaxLength != nil {
		c.maxLen = *s.MaxLength
	}
	c.pattern = fastPattern(s.Pattern)
	if bp, ok := c.pattern.(*bytePattern); ok {
		c.asciiOnly = bp.asciiOnly
	}
	c.strings = c.minLen >= 0 || c.maxLen >= 0 || c.pattern != nil

	// numbers
	c.min, c.max = boundOf(s.Minimum), boundOf(s.Maximum)
	c.exMin, c.exMax = boundOf(s.ExclusiveMinimum), boundOf(s.ExclusiveMaximum)
	c.mul = boundOf(s.MultipleOf)
	c.numbers = c.min != nil || c.max != nil || c.exMin != nil || c.exMax != nil || c.mul != nil
	c.intBounds()

	c.not = cc.compile(s.Not)
	for _, sch := range s.AllOf {
		c.allOf = append(c.allOf, cc.compile(sch))
	}
	for _, sch := range s.AnyOf {
		c.anyOf = append(c.anyOf, cc.compile(sch))
	}
	for _, sch := range s.OneOf {
		c.oneOf = append(c.oneOf, cc.compile(sch))
	}
	c.ifS, c.thenS, c.elseS = cc.compile(s.If), cc.compile(s.Then), cc.compile(s.Else)
	c.rare = c.cnst != nil || c.enum != nil || c.ref != nil || c.not != nil || len(c.allOf) > 0 ||
		len(c.anyOf) > 0 || len(c.oneOf) > 0 || c.ifS != nil
	c.refOnly = c.ref != nil && c.draft < 2019
	c.via = passVia(c)
	return c
}

func boundOf(r *big.Rat) *bound {
	if r == nil {
		return nil
	}
	return &bound{d: decimalOfRat(r), r: r}
}

func (cc *checkCompiler) enum(vals []any) *enumCheck {
	e := &enumCheck{scalarsOnly: true}
	for _, v := range vals {
		if s, ok := v.(string); ok {
			if e.strs == nil {
				e.strs = map[string]struct{}{}
			}
			e.strs[s] = struct{}{}
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			cc.reason = "an enum or const value that is not JSON"
			continue
		}
		sc := &scanner{}
		if !sc.scan(b) {
			cc.reason = "an enum or const value that is not I-JSON"
			continue
		}
		e.others = append(e.others, sc)
		switch tk := &sc.tape[0]; tk.kind {
		case kNumber:
			d := parseDecimal(sc.bytes(tk))
			e.scalars = append(e.scalars, scalarValue{kind: kNumber, d: d})
			e.scalarsOnly = e.scalarsOnly && d.fits
		case kTrue, kFalse, kNull:
			e.scalars = append(e.scalars, scalarValue{kind: tk.kind})
		default:
			e.scalarsOnly = false
		}
	}
	if e.strs != nil {
		e.strTab = newNameTable(slices.Collect(maps.Keys(e.strs)))
	}
	return e
}

// inPlaceLoop finds a schema that reaches itself through keywords that
// apply to the same value ($ref, allOf, anyOf, oneOf, not, if, then,
// else, dependencies): the library answers such a loop with an error,
// the checks would not end.
func inPlaceLoop(root *jsonschema.Schema) string {
	const (
		white = iota
		grey
		black
	)
	color := map[*jsonschema.Schema]int{}
	var loop string
	var visit func(s *jsonschema.Schema, inPlace bool)
	var walk func(s *jsonschema.Schema)
	// every schema is visited once as a root of in-place paths
	seen := map[*jsonschema.Schema]bool{}
	var all []*jsonschema.Schema
	walk = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		all = append(all, s)
		for _, c := range children(s, false) {
			walk(c)
		}
	}
	walk(root)
	visit = func(s *jsonschema.Schema, _ bool) {
		if s == nil || loop != "" {
			return
		}
		switch color[s] {
		case grey:
			loop = "a $ref loop that never descends into the value at " + describeLocation(s.Location)
			return
		case black:
			return
		}
		color[s] = grey
		for _, c := range children(s, true) {
			visit(c, true)
		}
		color[s] = black
	}
	for _, s := range all {
		visit(s, true)
	}
	return loop
}

// children lists the subschemas of s: with inPlace, only those applied
// to the same value.
func children(s *jsonschema.Schema, inPlace bool) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(l ...*jsonschema.Schema) {
		for _, c := range l {
			if c != nil {
				out = append(out, c)
			}
		}
	}
	add(s.Ref, s.Not, s.If, s.Then, s.Else)
	add(s.AllOf...)
	add(s.AnyOf...)
	add(s.OneOf...)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	add(s.RecursiveRef)
	for _, d := range s.Dependencies {
		if sch, ok := d.(*jsonschema.Schema); ok {
			add(sch)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		add(s.DependentSchemas[k])
	}
	if inPlace {
		return out
	}
	for _, sch := range s.Properties {
		add(sch)
	}
	for _, sch := range s.PatternProperties {
		add(sch)
	}
	if a, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(a)
	}
	add(s.PropertyNames, s.Contains, s.Items2020, s.UnevaluatedItems, s.UnevaluatedProperties, s.ContentSchema)
	add(s.PrefixItems...)
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		add(it)
	case []*jsonschema.Schema:
		add(it...)
	}
	if a, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		add(a)
	}
	return out
}

// valid reports whether the value at token t matches c.
func (s *scanner) valid(c *schemaCheck, t uint32) bool {
	if c.always != 0 {
		return c.always > 0
	}
	tk := &s.tape[t]
	if c.refOnly {
		return s.validRef(c, t)
	}
	if c.types != 0 && c.types&kindBits[tk.kind] == 0 && !c.integral(s, tk) {
		return false
	}
	if c.fmt != nil && !c.fmt.valid(s, tk) {
		return false
	}
	switch tk.kind {
	case kObject:
		if c.objects && !s.validObject(c, t) {
			return false
		}
	case kArray:
		if c.arrays && !s.validArray(c, t) {
			return false
		}
	case kString:
		if c.strings && !c.validString(s.str(tk)) {
			return false
		}
	case kNumber:
		if c.numbers {
			if b := s.bytes(tk); !c.validNumber(parseDecimal(b), b) {
				return false
			}
		}
	}
	return !c.rare || s.validRare(c, t)
}

// integral reports whether a value whose kind is not among c's types is
// an integer c's "integer" takes (1.0 is one).
func (c *schemaCheck) integral(s *scanner, tk *token) bool {
	return tk.kind == kNumber && c.types&tInteger != 0 && (tk.fp == plainInt || parseDecimal(s.bytes(tk)).isInt())
}

// validRef: $ref before 2019-09, with the keywords checked beside it.
func (s *scanner) validRef(c *schemaCheck, t uint32) bool {
	tk := &s.tape[t]
	if c.types != 0 && c.types&kindBits[tk.kind] == 0 && !c.integral(s, tk) {
		return false
	}
	if c.fmt != nil && !c.fmt.valid(s, tk) {
		return false
	}
	return (c.cnst == nil || s.inEnum(c.cnst, t)) && (c.enum == nil || s.inEnum(c.enum, t)) && s.valid(c.ref, t)
}

// validRare checks the keywords of c that few schemas have.
func (s *scanner) validRare(c *schemaCheck, t uint32) bool {
	if c.cnst != nil && !s.inEnum(c.cnst, t) {
		return false
	}
	if c.enum != nil && !s.inEnum(c.enum, t) {
		return false
	}
	if c.ref != nil && !s.valid(c.ref, t) {
		return false
	}
	if c.not != nil && s.valid(c.not, t) {
		return false
	}
	for _, sub := range c.allOf {
		if !s.valid(sub, t) {
			return false
		}
	}
	if len(c.anyOf) > 0 {
		ok := false
		for _, sub := range c.anyOf {
			if s.valid(sub, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(c.oneOf) > 0 {
		n := 0
		for _, sub := range c.oneOf {
			if s.valid(sub, t) {
				if n++; n > 1 {
					return false
				}
			}
		}
		if n != 1 {
			return false
		}
	}
	if c.ifS != nil {
		if s.valid(c.ifS, t) {
			if c.thenS != nil && !s.valid(c.thenS, t) {
				return false
			}
		} else if c.elseS != nil && !s.valid(c.elseS, t) {
			return false
		}
	}
	return true
}

// kindBits is the type bit of each token kind.
var kindBits = [...]uint8{kNull: tNull, kFalse: tBoolean, kTrue: tBoolean, kNumber: tNumber, kString: tString,
	kArray: tArray, kObject: tObject}

func (s *scanner) validObject(c *schemaCheck, t uint32) bool {
	count := int(s.tape[t].end)
	if c.minProps >= 0 && count < c.minProps || c.maxProps >= 0 && count > c.maxProps {
		return false
	}
	var have uint64
	i := t + 1
	for range count {
		key, val := i, i+1
		i = s.tape[val].next
		name := s.str(&s.tape[key])
		evaluated := false
		var p *propCheck
		if c.propTab != nil {
			if k := c.propTab.find(name); k >= 0 {
				p = c.propList[k]
			}
		} else {
			p = c.props[name]
		}
		if p != nil {
			have |= p.bit
			if p.schema != nil {
				evaluated = true
				if !s.valid(p.schema, val) {
					return false
				}
			}
		}
		for _, pp := range c.patProps {
			if pp.re.MatchString(name) {
				evaluated = true
				if !s.valid(pp.schema, val) {
					return false
				}
			}
		}
		if !evaluated {
			switch c.addl {
			case 1:
				return false
			case 2:
				if !s.valid(c.addlSchema, val) {
					return false
				}
			}
		}
		if c.propertyNames != nil && c.draft > 4 && !s.valid(c.propertyNames, key) {
			return false
		}
	}
	if have&c.reqMask != c.reqMask {
		return false
	}
	for _, name := range c.reqMore {
		if !s.has(t, name) {
			return false
		}
	}
	for _, d := range c.deps {
		if d.afterDraf == 7 && c.draft < 7 || !s.has(t, d.prop) {
			continue
		}
		for _, name := range d.req {
			if !s.has(t, name) {
				return false
			}
		}
		if d.schema != nil && !s.valid(d.schema, t) {
			return false
		}
	}
	return true
}

// has reports whether the object at t has a member name.
func (s *scanner) has(t uint32, name string) bool {
	i := t + 1
	for range s.tape[t].end {
		if s.str(&s.tape[i]) == name {
			return true
		}
		i = s.tape[i+1].next
	}
	return false
}

func (s *scanner) validArray(c *schemaCheck, t uint32) bool {
	count := int(s.tape[t].end)
	if c.minItems >= 0 && count < c.minItems || c.maxItems >= 0 && count > c.maxItems {
		return false
	}
	if c.unique && count > 1 && s.duplicates(t) {
		return false
	}
	i := t + 1
	matched := 0
	for k := range count {
		item := i
		i = s.tape[item].next
		switch {
		case k < len(c.prefix):
			if !s.valid(c.prefix[k], item) {
				return false
			}
		case c.items != nil:
			if !s.valid(c.items, item) {
				return false
			}
		case c.addlItems == 1:
			return false
		case c.addlItems == 2:
			if !s.valid(c.addlItemsSc, item) {
				return false
			}
		}
		if c.contains != nil && s.valid(c.contains, item) {
			matched++
		}
	}
	if c.contains != nil {
		if c.minContains >= 0 {
			if matched < c.minContains {
				return false
			}
		} else if matched == 0 {
			return false
		}
		if c.maxContains >= 0 && matched > c.maxContains {
			return false
		}
	}
	return true
}

func (c *schemaCheck) validString(v string) bool {
	// a string of n bytes has between n/4 and n characters: counted
	// only when that does not decide
	if c.minLen >= 0 && (len(v)+3)/4 < c.minLen || c.maxLen >= 0 && len(v) > c.maxLen {
		n := utf8.RuneCountInString(v)
		if c.minLen >= 0 && n < c.minLen || c.maxLen >= 0 && n > c.maxLen {
			return false
		}
	}
	return c.pattern == nil || c.pattern.MatchString(v)
}

// validNumber checks the bounds and multipleOf, exactly: as decimals of
// 64-bit mantissas, or as big.Rat for a number or bound that has more
// than 19 significant digits. A number big.Rat does not take (an
// exponent past 10,000,000) and a bound cannot decide is invalid.
func (c *schemaCheck) validNumber(d decimal, text []byte) bool {
	var r *big.Rat
	cmp := func(b *bound) (int, bool) {
		if d.fits && b.d.fits {
			return cmpDec(d, b.d), true
		}
		if r == nil {
			if r = ratOf(text); r == nil {
				return 0, false
			}
		}
		return r.Cmp(b.r), true
	}
	if c.min != nil {
		if v, ok := cmp(c.min); !ok || v < 0 {
			return false
		}
	}
	if c.max != nil {
		if v, ok := cmp(c.max); !ok || v > 0 {
			return false
		}
	}
	if c.exMin != nil {
		if v, ok := cmp(c.exMin); !ok || v <= 0 {
			return false
		}
	}
	if c.exMax != nil {
		if v, ok := cmp(c.exMax); !ok || v >= 0 {
			return false
		}
	}
	if c.mul != nil {
		if d.fits && c.mul.d.fits {
			return multipleOf(d, c.mul.d)
		}
		if r == nil {
			if r = ratOf(text); r == nil {
				return false
			}
		}
		return new(big.Rat).Quo(r, c.mul.r).IsInt()
	}
	return true
}

// inEnum reports whether the value at t equals one of e's.
func (s *scanner) inEnum(e *enumCheck, t uint32) bool {
	tk := &s.tape[t]
	if tk.kind == kString {
		if e.strTab != nil {
			return e.strTab.find(s.str(tk)) >= 0
		}
		_, ok := e.strs[s.str(tk)]
		return ok
	}
	for _, o := range e.others {
		if equalValues(s, t, o, 0) {
			return true
		}
	}
	return false
}

// equalValues reports whether two values are equal as JSON Schema has
// it: numbers by value (1 and 1.0 are equal), objects whatever the order
// of their members.
func equalValues(a *scanner, i uint32, b *scanner, j uint32) bool {
	ta, tb := &a.tape[i], &b.tape[j]
	if ta.kind != tb.kind {
		return false
	}
	switch ta.kind {
	case kString:
		return string(a.bytes(ta)) == string(b.bytes(tb))
	case kNumber:
		da, db := parseDecimal(a.bytes(ta)), parseDecimal(b.bytes(tb))
		if da.fits != db.fits {
			return false
		}
		if da.fits {
			return da == db
		}
		ra, rb := ratOf(a.bytes(ta)), ratOf(b.bytes(tb))
		return ra != nil && rb != nil && ra.Cmp(rb) == 0
	case kArray:
		if ta.end != tb.end {
			return false
		}
		x, y := i+1, j+1
		for range ta.end {
			if !equalValues(a, x, b, y) {
				return false
			}
			x, y = a.tape[x].next, b.tape[y].next
		}
		return true
	case kObject:
		if ta.end != tb.end {
			return false
		}
		x := i + 1
		for range ta.end {
			key := a.str(&a.tape[x])
			found := false
			y := j + 1
			for range tb.end {
				if b.str(&b.tape[y]) == key {
					if !equalValues(a, x+1, b, y+1) {
						return false
					}
					found = true
					break
				}
				y = b.tape[y+1].next
			}
			if !found {
				return false
			}
			x = a.tape[x+1].next
		}
		return true
	}
	return true // null, true, false: the kind is the value
}

// duplicates reports whether two items of the array at t are equal.
func (s *scanner) duplicates(t uint32) bool {
	count := int(s.tape[t].end)
	if count <= 20 {
		for x, a := 1, s.tape[t+1].next; x < count; x, a = x+1, s.tape[a].next {
			for y, b := 0, t+1; y < x; y, b = y+1, s.tape[b].next {
				if equalValues(s, a, s, b) {
					return true
				}
			}
		}
		return false
	}
	s.hash = s.hash[:0]
	for k, i := 0, t+1; k < count; k, i = k+1, s.tape[i].next {
		s.hash = append(s.hash, keyHash{s.valueHash(i), i})
	}
	slices.SortFunc(s.hash, func(a, b keyHash) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return 0
	})
	for i := 1; i < len(s.hash); i++ {
		for j := i - 1; j >= 0 && s.hash[j].h == s.hash[i].h; j-- {
			if equalValues(s, s.hash[i].tok, s, s.hash[j].tok) {
				return true
			}
		}
	}
	return false
}

// valueHash hashes a value so that equal values (equalValues) hash
// alike.
func (s *scanner) valueHash(t uint32) uint64 {
	tk := &s.tape[t]
	switch tk.kind {
	case kString:
		return maphash.Bytes(keySeed, s.bytes(tk))
	case kNumber:
		d := parseDecimal(s.bytes(tk))
		if !d.fits {
			return 0x9e3779b97f4a7c15
		}
		h := mix(d.mant ^ uint64(d.exp)<<1)
		if d.neg {
			h = mix(h + 1)
		}
		return h
	case kArray:
		h := uint64(0xa0761d6478bd642f)
		for k, i := uint32(0), t+1; k < tk.end; k, i = k+1, s.tape[i].next {
			h = mix(h ^ s.valueHash(i))
		}
		return h
	case kObject:
		var h uint64
		for k, i := uint32(0), t+1; k < tk.end; k, i = k+1, s.tape[i+1].next {
			h += mix(maphash.Bytes(keySeed, s.bytes(&s.tape[i])) ^ s.valueHash(i+1))
		}
		return mix(h ^ 0xe7037ed1a0b428db)
	}
	return uint64(tk.kind) * 0x8ebc6af09c88c6e3
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// describeLocation is a schema location for messages: the document's
// file name and JSON pointer rather than a file:// URL.
func describeLocation(loc string) string {
	if rest, ok := strings.CutPrefix(loc, "file://"); ok {
		return rest
	}
	return loc
}
