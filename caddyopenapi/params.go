package caddyopenapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

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

// scalar turns parameter text into the JSON value it stands for: a
// number or a boolean where the schema allows one and the text is one,
// else the text.
func scalar(s string, sh *shape) any {
	if sh.is(tInteger|tNumber) && isJSONNumber(s) {
		return json.Number(s)
	}
	if sh.is(tBoolean) {
		switch s {
		case "true":
			return true
		case "false":
			return false
		}
	}
	if sh.is(tNull) && s == "" && !sh.is(tString) {
		return nil
	}
	return s
}

func scalars(parts []string, sh *shape) []any {
	out := make([]any, len(parts))
	for i, s := range parts {
		out[i] = scalar(s, sh.item())
	}
	return out
}

// pairs reads "k,v,k,v" (or with explode, "k=v" parts) as an object.
func pairs(parts []string, exploded bool, sh *shape) (map[string]any, bool) {
	obj := make(map[string]any, len(parts))
	if exploded {
		for _, kv := range parts {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, false
			}
			obj[k] = scalar(v, sh.prop(k))
		}
		return obj, true
	}
	if len(parts)%2 != 0 {
		return nil, false
	}
	for i := 0; i < len(parts); i += 2 {
		obj[parts[i]] = scalar(parts[i+1], sh.prop(parts[i]))
	}
	return obj, true
}

// styleError is the violation of a value not written in its style.
func (p *param) styleError() Violation {
	return Violation{Location: p.loc, Keyword: "style", Message: "must be written in the " + p.style + " style" + map[bool]string{true: " (exploded)", false: ""}[p.explode]}
}

// decodeSimple reads a simple-style value (path and header parameters).
func (p *param) decodeSimple(raw string) (any, *Violation) {
	switch {
	case p.shape.is(tArray) && !p.shape.is(tObject):
		return scalars(strings.Split(raw, ","), p.shape), nil
	case p.shape.is(tObject) && !p.shape.is(tArray):
		obj, ok := pairs(strings.Split(raw, ","), p.explode, p.shape)
		if !ok {
			v := p.styleError()
			return nil, &v
		}
		return obj, nil
	}
	return scalar(raw, p.shape), nil
}

// decodePath reads a path parameter's raw (percent-decoded) segment text.
func (p *param) decodePath(raw string) (any, *Violation) {
	if p.json {
		return p.decodeJSON(raw)
	}
	switch p.style {
	case "label":
		rest, ok := strings.CutPrefix(raw, ".")
		if !ok {
			v := p.styleError()
			return nil, &v
		}
		sep := ","
		if p.explode {
			sep = "."
		}
		switch {
		case p.shape.is(tArray) && !p.shape.is(tObject):
			return scalars(strings.Split(rest, sep), p.shape), nil
		case p.shape.is(tObject) && !p.shape.is(tArray):
			obj, ok := pairs(strings.Split(rest, sep), p.explode, p.shape)
			if !ok {
				v := p.styleError()
				return nil, &v
			}
			return obj, nil
		}
		return scalar(rest, p.shape), nil
	case "matrix":
		rest, ok := strings.CutPrefix(raw, ";")
		if !ok {
			v := p.styleError()
			return nil, &v
		}
		parts := strings.Split(rest, ";")
		switch {
		case p.shape.is(tObject) && !p.shape.is(tArray) && p.explode:
			obj, ok := pairs(parts, true, p.shape)
			if !ok {
				v := p.styleError()
				return nil, &v
			}
			return obj, nil
		case p.shape.is(tArray) && !p.shape.is(tObject) && p.explode:
			vals := make([]string, 0, len(parts))
			for _, part := range parts {
				v, ok := strings.CutPrefix(part, p.name+"=")
				if !ok {
					vv := p.styleError()
					return nil, &vv
				}
				vals = append(vals, v)
			}
			return scalars(vals, p.shape), nil
		}
		v, ok := strings.CutPrefix(rest, p.name+"=")
		if !ok || len(parts) != 1 {
			if rest == p.name && p.shape.is(tBoolean) { // ;flag
				return true, nil
			}
			vv := p.styleError()
			return nil, &vv
		}
		switch {
		case p.shape.is(tArray) && !p.shape.is(tObject):
			return scalars(strings.Split(v, ","), p.shape), nil
		case p.shape.is(tObject) && !p.shape.is(tArray):
			obj, ok := pairs(strings.Split(v, ","), false, p.shape)
			if !ok {
				vv := p.styleError()
				return nil, &vv
			}
			return obj, nil
		}
		return scalar(v, p.shape), nil
	}
	return p.decodeSimple(raw)
}

// decodeQuery reads a query parameter from the parsed query; found is
// false when the request does not carry it.
func (p *param) decodeQuery(q url.Values) (v any, found bool, viol *Violation) {
	if p.style == "deepObject" {
		prefix := p.name + "["
		var obj map[string]any
		for k, vs := range q {
			if !strings.HasPrefix(k, prefix) || !strings.HasSuffix(k, "]") || len(vs) == 0 {
				continue
			}
			if obj == nil {
				obj = map[string]any{}
			}
			prop := k[len(prefix) : len(k)-1]
			obj[prop] = scalar(vs[0], p.shape.prop(prop))
		}
		if obj == nil {
			return nil, false, nil
		}
		return obj, true, nil
	}
	if p.explode && p.style == "form" && p.shape.is(tObject) && !p.shape.is(tArray) && !p.json {
		// an exploded form object: its properties are parameters of
		// their own (?role=admin&name=alex)
		var obj map[string]any
		for prop, sh := range p.shape.props {
			if vs, ok := q[prop]; ok && len(vs) > 0 {
				if obj == nil {
					obj = map[string]any{}
				}
				obj[prop] = scalar(vs[0], sh)
			}
		}
		if obj == nil {
			return nil, false, nil
		}
		return obj, true, nil
	}
	vs, ok := q[p.name]
	if !ok || len(vs) == 0 {
		return nil, false, nil
	}
	if p.json {
		v, viol := p.decodeJSON(vs[0])
		return v, true, viol
	}
	if p.shape.is(tArray) && !p.shape.is(tObject) {
		if p.explode {
			return scalars(vs, p.shape), true, nil
		}
		sep := ","
		switch p.style {
		case "spaceDelimited":
			sep = " "
		case "pipeDelimited":
			sep = "|"
		}
		return scalars(strings.Split(vs[0], sep), p.shape), true, nil
	}
	if p.shape.is(tObject) && !p.shape.is(tArray) {
		obj, ok := pairs(strings.Split(vs[0], ","), false, p.shape)
		if !ok {
			vv := p.styleError()
			return nil, true, &vv
		}
		return obj, true, nil
	}
	if len(vs) > 1 {
		return nil, true, &Violation{Location: p.loc, Keyword: "style", Message: "must be given once"}
	}
	return scalar(vs[0], p.shape), true, nil
}

// decodeHeader reads a header parameter (its lines joined with commas).
func (p *param) decodeHeader(h http.Header) (any, bool, *Violation) {
	vs := h.Values(p.name)
	if len(vs) == 0 {
		return nil, false, nil
	}
	raw := vs[0]
	if len(vs) > 1 {
		raw = strings.Join(vs, ",")
	}
	if p.json {
		v, viol := p.decodeJSON(raw)
		return v, true, viol
	}
	v, viol := p.decodeSimple(raw)
	return v, true, viol
}

// decodeCookie reads a cookie parameter.
func (p *param) decodeCookie(cookies []*http.Cookie) (any, bool, *Violation) {
	for _, c := range cookies {
		if c.Name != p.name {
			continue
		}
		if p.json {
			v, viol := p.decodeJSON(c.Value)
			return v, true, viol
		}
		if p.shape.is(tArray) && !p.shape.is(tObject) && !p.explode {
			return scalars(strings.Split(c.Value, ","), p.shape), true, nil
		}
		if p.shape.is(tObject) && !p.shape.is(tArray) && !p.explode {
			obj, ok := pairs(strings.Split(c.Value, ","), false, p.shape)
			if !ok {
				vv := p.styleError()
				return nil, true, &vv
			}
			return obj, true, nil
		}
		return scalar(c.Value, p.shape), true, nil
	}
	return nil, false, nil
}

// decodeJSON reads a parameter whose content is application/json.
func (p *param) decodeJSON(raw string) (any, *Violation) {
	v, err := decodeJSON(strings.NewReader(raw))
	if err != nil {
		return nil, &Violation{Location: p.loc, Keyword: "content", Message: "must be JSON text"}
	}
	return v, nil
}
