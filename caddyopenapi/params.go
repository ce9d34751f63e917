package caddyopenapi

import (
	"net/http"
	"strings"
	"unsafe"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// param is a compiled Parameter Object.
type param struct {
	name, in string
	loc      string // the violation location: "query.limit", "path.id"
	required bool
	style    string
	explode  bool
	pathIdx  int                // path parameters: position among the template's
	schema   *jsonschema.Schema // nil: only presence is checked
	checks   *schemaCheck       // schema compiled for the tape; nil: the library's alone
	scalar   *schemaCheck       // checks, when checkScalar may decide the value (paramscalar.go)
	fallback string             // why checks is nil when schema is not
	shape    *shape             // how text becomes a JSON value
	json     bool               // content: application/json (the value is JSON text)
}

// The locations of parameters, as OpenAPI names them.
const (
	inPath   = "path"
	inQuery  = "query"
	inHeader = "header"
	inCookie = "cookie"
)

// styles allowed per location; the first is the default.
var styles = map[string][]string{
	inPath:   {"simple", "label", "matrix"},
	inQuery:  {"form", "spaceDelimited", "pipeDelimited", "deepObject"},
	inHeader: {"simple"},
	inCookie: {"form"},
}

func (s *Spec) compileParams(c *compiler, n node) ([]*param, error) {
	pn, ok := n.child("parameters")
	if !ok || pn.v == nil {
		return nil, nil
	}
	arr, isArr := pn.v.([]any)
	if !isArr {
		return nil, pn.errorf("parameters must be an array")
	}
	var out []*param
	for i := range arr {
		en, err := c.l.deref(pn.index(i))
		if err != nil {
			return nil, err
		}
		p, err := c.compileParam(en)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		for _, q := range out {
			if q.in == p.in && q.name == p.name {
				return nil, en.errorf("parameter %q in %s is declared twice", p.name, p.in)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (c *compiler) compileParam(n node) (*param, error) {
	if _, err := n.object("a parameter"); err != nil {
		return nil, err
	}
	p := &param{}
	var err error
	if p.name, err = n.str("name"); err != nil {
		return nil, err
	}
	if p.in, err = n.str("in"); err != nil {
		return nil, err
	}
	if p.name == "" {
		return nil, n.errorf("a parameter needs a name")
	}
	allowed, ok := styles[p.in]
	if !ok {
		return nil, n.errorf("parameter %q: in must be path, query, header or cookie, not %q", p.name, p.in)
	}
	if p.in == inHeader {
		p.name = http.CanonicalHeaderKey(p.name)
		switch p.name {
		case "Accept", "Content-Type", "Authorization":
			return nil, nil // OpenAPI: such a definition is ignored
		}
	}
	p.loc = p.in + "." + p.name
	if p.required, err = n.boolean("required", false); err != nil {
		return nil, err
	}
	if p.in == inPath && !p.required {
		return nil, n.errorf("path parameter %q must have required: true", p.name)
	}
	if p.style, err = n.str("style"); err != nil {
		return nil, err
	}
	if p.style == "" {
		p.style = allowed[0]
	} else if !contains(allowed, p.style) {
		return nil, n.errorf("parameter %q: style %q is not one of %s for %s parameters", p.name, p.style, strings.Join(allowed, ", "), p.in)
	}
	if p.explode, err = n.boolean("explode", p.style == "form"); err != nil {
		return nil, err
	}
	defer func() {
		if p.schema != nil {
			p.checks, p.fallback = compileChecks(p.schema, c.declaredOrder)
			p.scalar = scalarCheck(p)
		}
	}()
	if sn, ok := n.child("schema"); ok {
		if p.schema, err = c.schemaAt(sn); err != nil {
			return nil, err
		}
		p.shape = c.shapeOf(sn, 0)
	} else if cn, ok := n.child("content"); ok {
		cm, err := cn.object("content")
		if err != nil {
			return nil, err
		}
		if len(cm) != 1 {
			return nil, cn.errorf("a parameter's content must have exactly one media type")
		}
		for mt := range cm {
			mn, _ := cn.child(mt)
			if isJSONMedia(mt) {
				p.json = true
				if sn, ok := mn.child("schema"); ok {
					if p.schema, err = c.schemaAt(sn); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// shape is what a schema says of a value's type, for turning parameter
// text into JSON values ("5" into 5 where the schema wants an integer).
// Validation itself is the compiled schema's.
type shape struct {
	types uint8
	items *shape
	props map[string]*shape
}

// Type bits of a shape.
const (
	tString uint8 = 1 << iota
	tInteger
	tNumber
	tBoolean
	tArray
	tObject
	tNull
)

var typeBits = map[string]uint8{
	"string": tString, "integer": tInteger, "number": tNumber, "boolean": tBoolean,
	"array": tArray, "object": tObject, "null": tNull,
}

// shapeOf reads the shape of the schema at n, following $refs (a $ref the
// loader cannot follow, to an $id say, gives no shape: text stays text).
func (c *compiler) shapeOf(n node, depth int) *shape {
	sh := &shape{}
	if depth > 8 {
		return sh
	}
	n, err := c.l.deref(n)
	if err != nil {
		return sh
	}
	m, ok := n.v.(map[string]any)
	if !ok {
		return sh
	}
	switch t := m["type"].(type) {
	case string:
		sh.types = typeBits[t]
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok {
				sh.types |= typeBits[s]
			}
		}
	}
	for _, kw := range []string{"allOf", "oneOf", "anyOf"} {
		kn, ok := n.child(kw)
		if !ok {
			continue
		}
		arr, _ := kn.v.([]any)
		for i := range arr {
			sub := c.shapeOf(kn.index(i), depth+1)
			sh.types |= sub.types
			if sub.items != nil && sh.items == nil {
				sh.items = sub.items
			}
			for k, v := range sub.props {
				if sh.props == nil {
					sh.props = map[string]*shape{}
				}
				if _, have := sh.props[k]; !have {
					sh.props[k] = v
				}
			}
		}
	}
	if in, ok := n.child("items"); ok {
		if _, isObj := in.v.(map[string]any); isObj {
			sh.items = c.shapeOf(in, depth+1)
		}
		if sh.types == 0 {
			sh.types = tArray
		}
	}
	if pn, ok := n.child("properties"); ok {
		pm, _ := pn.v.(map[string]any)
		for k := range pm {
			if sh.props == nil {
				sh.props = map[string]*shape{}
			}
			kn, _ := pn.child(k)
			sh.props[k] = c.shapeOf(kn, depth+1)
		}
		if sh.types == 0 {
			sh.types = tObject
		}
	}
	return sh
}

func (sh *shape) is(bits uint8) bool { return sh != nil && sh.types&bits != 0 }

func (sh *shape) prop(name string) *shape {
	if sh == nil {
		return nil
	}
	return sh.props[name]
}

func (sh *shape) item() *shape {
	if sh == nil {
		return nil
	}
	return sh.items
}

// A parameter's value is text (a path segment, a query value, a header,
// a cookie) that its style and its schema's shape make a JSON value: it
// is written onto a scanner's tape (its texts in the scanner's dec
// buffer), so that the compiled checks read it as they read a body, at
// no allocation; the library gets its Go value only to list the
// violations of a value found invalid (or when its schema has no checks).

// text appends v to the scanner's buffer.
func (s *scanner) text(v string) (uint32, uint32) {
	start := len(s.dec)
	s.dec = append(s.dec, v...)
	return uint32(start), uint32(len(s.dec))
}

// scalar writes parameter text as the JSON value it stands for: a
// number or a boolean where the schema allows one and the text is one,
// null for an empty text where the schema allows null and not a string,
// else the text.
func (s *scanner) scalar(v string, sh *shape) {
	idx := uint32(len(s.tape))
	kind := scalarKind(v, sh)
	t := token{kind: kind, next: idx + 1, dec: true}
	if kind == kString || kind == kNumber {
		t.start, t.end = s.text(v)
	}
	s.tape = append(s.tape, t)
}

// scalarKind is the kind of JSON value parameter text v stands for
// (scalar writes it).
func scalarKind(v string, sh *shape) tokKind {
	switch {
	case sh.is(tInteger|tNumber) && isJSONNumber(v):
		return kNumber
	case sh.is(tBoolean) && v == "true":
		return kTrue
	case sh.is(tBoolean) && v == "false":
		return kFalse
	case sh.is(tNull) && v == "" && !sh.is(tString):
		return kNull
	}
	return kString
}

// begin starts an array or an object; end closes it.
func (s *scanner) begin(kind tokKind) uint32 {
	idx := uint32(len(s.tape))
	s.tape = append(s.tape, token{kind: kind})
	return idx
}

func (s *scanner) end(idx uint32) { s.tape[idx].next = uint32(len(s.tape)) }

// item adds an item to the array at arr.
func (s *scanner) item(arr uint32, v string, sh *shape) {
	s.tape[arr].end++
	s.scalar(v, sh)
}

// key writes a member's key.
func (s *scanner) key(obj uint32, k string) {
	s.tape[obj].end++
	idx := uint32(len(s.tape))
	start, end := s.text(k)
	s.tape = append(s.tape, token{kind: kString, start: start, end: end, next: idx + 1, dec: true})
}

// pair adds the member k: v (a scalar) to the object at obj. A key the
// object has keeps its first value, or with last, takes this one (as a
// map assignment would).
func (s *scanner) pair(obj uint32, k, v string, sh *shape, last bool) {
	i := obj + 1
	for range s.tape[obj].end {
		if s.str(&s.tape[i]) == k {
			if last {
				s.scalar(v, sh)
				t := s.tape[len(s.tape)-1]
				t.next = i + 2
				s.tape[i+1] = t
				s.tape = s.tape[:len(s.tape)-1]
			}
			return
		}
		i += 2
	}
	s.key(obj, k)
	s.scalar(v, sh)
}

// items writes raw, split at sep, as an array.
func (s *scanner) items(raw, sep string, sh *shape) {
	arr := s.begin(kArray)
	for {
		part, rest, more := strings.Cut(raw, sep)
		s.item(arr, part, sh.item())
		if !more {
			break
		}
		raw = rest
	}
	s.end(arr)
}

// pairs writes "k,v,k,v" (or exploded, "k=v" parts), split at sep, as
// an object; false when raw is not so written.
func (s *scanner) pairs(raw, sep string, exploded bool, sh *shape) bool {
	obj := s.begin(kObject)
	if !exploded && strings.Count(raw, sep)%2 == 0 {
		return false // an odd number of parts
	}
	for {
		part, rest, more := strings.Cut(raw, sep)
		if exploded {
			k, v, ok := strings.Cut(part, "=")
			if !ok {
				return false
			}
			s.pair(obj, k, v, sh.prop(k), true)
		} else {
			var v string
			v, rest, more = strings.Cut(rest, sep)
			s.pair(obj, part, v, sh.prop(part), true)
		}
		if !more {
			break
		}
		raw = rest
	}
	s.end(obj)
	return true
}

// styleError is the violation of a value not written in its style.
func (p *param) styleError() *Violation {
	msg := "must be written in the " + p.style + " style"
	if p.explode {
		msg += " (exploded)"
	}
	return &Violation{Location: p.loc, Keyword: "style", Message: msg}
}

func (p *param) isArray() bool  { return p.shape.is(tArray) && !p.shape.is(tObject) }
func (p *param) isObject() bool { return p.shape.is(tObject) && !p.shape.is(tArray) }

// decodeSimple writes a simple-style value (path and header parameters).
func (p *param) decodeSimple(s *scanner, raw string) *Violation {
	switch {
	case p.isArray():
		s.items(raw, ",", p.shape)
	case p.isObject():
		if !s.pairs(raw, ",", p.explode, p.shape) {
			return p.styleError()
		}
	default:
		s.scalar(raw, p.shape)
	}
	return nil
}

// decodePath writes a path parameter's raw (percent-decoded) segment
// text.
func (p *param) decodePath(s *scanner, raw string) *Violation {
	if p.json {
		return p.decodeJSON(s, raw)
	}
	switch p.style {
	case "label":
		rest, ok := strings.CutPrefix(raw, ".")
		if !ok {
			return p.styleError()
		}
		sep := ","
		if p.explode {
			sep = "."
		}
		switch {
		case p.isArray():
			s.items(rest, sep, p.shape)
		case p.isObject():
			if !s.pairs(rest, sep, p.explode, p.shape) {
				return p.styleError()
			}
		default:
			s.scalar(rest, p.shape)
		}
		return nil
	case "matrix":
		rest, ok := strings.CutPrefix(raw, ";")
		if !ok {
			return p.styleError()
		}
		switch {
		case p.isObject() && p.explode:
			if !s.pairs(rest, ";", true, p.shape) {
				return p.styleError()
			}
			return nil
		case p.isArray() && p.explode:
			arr := s.begin(kArray)
			for {
				part, more, again := strings.Cut(rest, ";")
				v, ok := strings.CutPrefix(part, p.name+"=")
				if !ok {
					return p.styleError()
				}
				s.item(arr, v, p.shape.item())
				if !again {
					break
				}
				rest = more
			}
			s.end(arr)
			return nil
		}
		v, ok := strings.CutPrefix(rest, p.name+"=")
		if !ok || strings.Contains(rest, ";") {
			if rest == p.name && p.shape.is(tBoolean) { // ;flag
				s.tape = append(s.tape, token{kind: kTrue, next: uint32(len(s.tape)) + 1})
				return nil
			}
			return p.styleError()
		}
		switch {
		case p.isArray():
			s.items(v, ",", p.shape)
		case p.isObject():
			if !s.pairs(v, ",", false, p.shape) {
				return p.styleError()
			}
		default:
			s.scalar(v, p.shape)
		}
		return nil
	}
	return p.decodeSimple(s, raw)
}

// queryPairs calls fn with each key and value of a raw query, decoded as
// url.ParseQuery decodes them (a pair with a semicolon or a bad escape is
// left out, as Request.URL.Query leaves it out), until fn returns false.
// The texts are in the scanner's buffer until the next call.
func (s *scanner) queryPairs(raw string, fn func(k, v string) bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		mark := len(s.dec)
		ks, ok := s.unescape(k)
		if !ok {
			continue
		}
		vs, ok := s.unescape(v)
		if !ok {
			s.dec = s.dec[:mark]
			continue
		}
		more := fn(ks, vs)
		if !more {
			return
		}
	}
}

// unescape decodes a query component (%XX and +) into the scanner's
// buffer; a text without either is returned as it is.
func (s *scanner) unescape(v string) (string, bool) {
	if strings.IndexByte(v, '%') < 0 && strings.IndexByte(v, '+') < 0 {
		return v, true
	}
	start := len(s.dec)
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '%':
			if i+2 >= len(v) || !isHex(v[i+1]) || !isHex(v[i+2]) {
				s.dec = s.dec[:start]
				return "", false
			}
			s.dec = append(s.dec, unhex(v[i+1])<<4|unhex(v[i+2]))
			i += 2
		case '+':
			s.dec = append(s.dec, ' ')
		default:
			s.dec = append(s.dec, c)
		}
	}
	return unsafeString(s.dec[start:]), true
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// decodeQuery writes a query parameter from the raw query; found is
// false when the request does not carry it.
func (p *param) decodeQuery(s *scanner, raw string) (found bool, viol *Violation) {
	if raw == "" {
		return false, nil
	}
	switch {
	case p.style == "deepObject":
		// name[prop]=v: the first value of each property
		obj := s.begin(kObject)
		s.queryPairs(raw, func(k, v string) bool {
			if prop, ok := strings.CutPrefix(k, p.name+"["); ok && strings.HasSuffix(prop, "]") {
				prop = prop[:len(prop)-1]
				s.pair(obj, prop, v, p.shape.prop(prop), false)
			}
			return true
		})
		s.end(obj)
		return s.tape[obj].end > 0, nil
	case p.explode && p.style == "form" && p.isObject() && !p.json:
		// an exploded form object: its properties are parameters of
		// their own (?role=admin&name=alex), each its first value
		obj := s.begin(kObject)
		s.queryPairs(raw, func(k, v string) bool {
			if sh, ok := p.shape.props[k]; ok {
				s.pair(obj, k, v, sh, false)
			}
			return true
		})
		s.end(obj)
		return s.tape[obj].end > 0, nil
	case p.isArray() && p.explode && !p.json:
		// every value of the name, in order
		arr := s.begin(kArray)
		s.queryPairs(raw, func(k, v string) bool {
			if k == p.name {
				s.item(arr, v, p.shape.item())
			}
			return true
		})
		s.end(arr)
		return s.tape[arr].end > 0, nil
	}
	// one value: the first, and whether there are more
	var first string
	n := 0
	s.queryPairs(raw, func(k, v string) bool {
		if k == p.name {
			if n == 0 {
				first = v
			}
			n++
		}
		return true
	})
	if n == 0 {
		return false, nil
	}
	switch {
	case p.json:
		return true, p.decodeJSON(s, first)
	case p.isArray():
		sep := ","
		switch p.style {
		case "spaceDelimited":
			sep = " "
		case "pipeDelimited":
			sep = "|"
		}
		s.items(first, sep, p.shape)
	case p.isObject():
		if !s.pairs(first, ",", false, p.shape) {
			return true, p.styleError()
		}
	case n > 1:
		return true, &Violation{Location: p.loc, Keyword: "style", Message: "must be given once"}
	default:
		s.scalar(first, p.shape)
	}
	return true, nil
}

// decodeHeader writes a header parameter (its lines joined with commas).
func (p *param) decodeHeader(s *scanner, h http.Header) (bool, *Violation) {
	vs := h.Values(p.name)
	if len(vs) == 0 {
		return false, nil
	}
	raw := vs[0]
	if len(vs) > 1 {
		start := len(s.dec)
		for i, v := range vs {
			if i > 0 {
				s.dec = append(s.dec, ',')
			}
			s.dec = append(s.dec, v...)
		}
		raw = unsafeString(s.dec[start:])
	}
	if p.json {
		return true, p.decodeJSON(s, raw)
	}
	return true, p.decodeSimple(s, raw)
}

// maxCookies is net/http's bound: a request with more cookies has none.
const maxCookies = 3000

// decodeCookie writes a cookie parameter, found as Request.Cookies finds
// cookies.
func (p *param) decodeCookie(s *scanner, h http.Header) (bool, *Violation) {
	lines := h["Cookie"]
	n := 0
	for _, line := range lines {
		n += strings.Count(line, ";") + 1
	}
	if n > maxCookies {
		return false, nil
	}
	for _, line := range lines {
		line = trimSpace(line)
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = trimSpace(part)
			name, val, _ := strings.Cut(part, "=")
			if trimSpace(name) != p.name {
				continue
			}
			if len(val) > 1 && val[0] == '"' && val[len(val)-1] == '"' {
				val = val[1 : len(val)-1]
			}
			if !validCookieValue(val) {
				continue
			}
			switch {
			case p.json:
				return true, p.decodeJSON(s, val)
			case p.isArray() && !p.explode:
				s.items(val, ",", p.shape)
			case p.isObject() && !p.explode:
				if !s.pairs(val, ",", false, p.shape) {
					return true, p.styleError()
				}
			default:
				s.scalar(val, p.shape)
			}
			return true, nil
		}
	}
	return false, nil
}

func trimSpace(v string) string {
	for len(v) > 0 && isSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return v
}

func validCookieValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return false
		}
	}
	return true
}

// decodeJSON reads a parameter whose content is application/json (as
// I-JSON, as a body is read).
func (p *param) decodeJSON(s *scanner, raw string) *Violation {
	if !s.scan(unsafe.Slice(unsafe.StringData(raw), len(raw))) {
		return &Violation{Location: p.loc, Keyword: "content", Message: "must be JSON text"}
	}
	return nil
}

// check adds the violations of a parameter whose value is on s (token
// 0): required and absent, not in its style, or invalid by its schema.
func (p *param) check(s *scanner, found bool, viol *Violation, out []Violation) []Violation {
	switch {
	case viol != nil:
		return append(out, *viol)
	case !found:
		if p.required {
			out = append(out, Violation{Location: p.loc, Keyword: "required", Message: "is required"})
		}
		return out
	case p.schema == nil || p.checks != nil && s.valid(p.checks, 0):
		return out
	}
	if err := validateLib(p.schema, s.value(0)); err != nil {
		out = collect(err, p.loc, out)
	}
	return out
}
