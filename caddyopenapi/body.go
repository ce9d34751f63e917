package caddyopenapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// mediaKind says how a body of a media type is read for validation.
type mediaKind uint8

const (
	mediaOther mediaKind = iota // not read: its type is checked, not its content
	mediaJSON                   // application/json, */*+json
	mediaForm                   // application/x-www-form-urlencoded
)

// media is one entry of a content map.
type media struct {
	name     string // as the document writes it
	typ, sub string // lower case; "*" is a wildcard
	kind     mediaKind
	schema   *jsonschema.Schema // nil: the content is not checked
	checks   *schemaCheck       // schema compiled for the tape (request bodies); nil: the library's alone
	fallback string             // why checks is nil when schema is not
	shape    *shape
	disc     *discriminator // nil: none beside a oneOf/anyOf of $refs
}

// content is a compiled content map: most specific media type first.
type content struct {
	media    []*media
	declared string // "application/json, application/xml", for messages
}

type bodySpec struct {
	required bool
	content
}

func isJSONMedia(mt string) bool {
	mt, _, _ = strings.Cut(mt, ";")
	_, sub, _ := strings.Cut(strings.ToLower(strings.TrimSpace(mt)), "/")
	return sub == "json" || strings.HasSuffix(sub, "+json")
}

func (c *compiler) compileBody(n node) (*bodySpec, error) {
	n, err := c.l.deref(n)
	if err != nil {
		return nil, err
	}
	if _, err := n.object("a request body"); err != nil {
		return nil, err
	}
	b := &bodySpec{}
	if b.required, err = n.boolean("required", false); err != nil {
		return nil, err
	}
	cn, ok := n.child("content")
	if !ok {
		return nil, n.errorf("a request body needs content")
	}
	if b.content, err = c.compileContent(cn); err != nil {
		return nil, err
	}
	for _, m := range b.media {
		if m.schema != nil && m.kind == mediaJSON {
			m.checks, m.fallback = compileChecks(m.schema)
		}
	}
	return b, nil
}

func (c *compiler) compileContent(n node) (content, error) {
	cm, err := n.object("content")
	if err != nil {
		return content{}, err
	}
	var out content
	names := slices.Sorted(maps.Keys(cm))
	for _, name := range names {
		mn, _ := n.child(name)
		base, _, _ := strings.Cut(name, ";")
		typ, sub, ok := strings.Cut(strings.ToLower(strings.TrimSpace(base)), "/")
		if !ok || typ == "" || sub == "" {
			return content{}, mn.errorf("media type %q is not type/subtype", name)
		}
		m := &media{name: name, typ: typ, sub: sub}
		switch {
		case isJSONMedia(name):
			m.kind = mediaJSON
		case typ == "application" && sub == "x-www-form-urlencoded":
			m.kind = mediaForm
		}
		if mn.v != nil {
			if _, err := mn.object("a media type"); err != nil {
				return content{}, err
			}
		}
		if sn, ok := mn.child("schema"); ok && m.kind != mediaOther {
			if m.schema, err = c.schemaAt(sn); err != nil {
				return content{}, err
			}
			m.shape = c.shapeOf(sn, 0)
			if m.disc, err = c.discriminatorOf(sn); err != nil {
				return content{}, err
			}
		}
		out.media = append(out.media, m)
	}
	sort.SliceStable(out.media, func(i, j int) bool { return out.media[i].rank() < out.media[j].rank() })
	list := make([]string, len(out.media))
	for i, m := range out.media {
		list[i] = m.name
	}
	out.declared = strings.Join(list, ", ")
	return out, nil
}

// rank orders media types: exact, then type/*, then */*.
func (m *media) rank() int {
	switch {
	case m.typ == "*":
		return 2
	case m.sub == "*":
		return 1
	}
	return 0
}

// find returns the entry that describes a Content-Type value, or nil.
func (c *content) find(ct string) *media {
	base, _, _ := strings.Cut(ct, ";")
	typ, sub, ok := strings.Cut(strings.TrimSpace(base), "/")
	if !ok {
		return nil
	}
	for _, m := range c.media {
		switch {
		case m.typ == "*":
			return m
		case !strings.EqualFold(m.typ, typ):
		case m.sub == "*" || strings.EqualFold(m.sub, sub):
			return m
		}
	}
	return nil
}

// decodeJSON decodes one JSON value (numbers as json.Number); anything
// after it is an error. Nesting deeper than encoding/json allows (10,000)
// is an error, not a stack overflow.
func decodeJSON(r io.Reader) (any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// decodeBody reads a body of a media type into the JSON value its schema
// checks.
func (m *media) decode(body []byte) (any, *Violation) {
	switch m.kind {
	case mediaJSON:
		v, err := decodeJSON(bytes.NewReader(body))
		if err != nil {
			return nil, &Violation{Location: "body", Keyword: "json", Message: "must be JSON text (" + jsonErrorText(err) + ")"}
		}
		return v, nil
	case mediaForm:
		q, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, &Violation{Location: "body", Keyword: "form", Message: "must be form-urlencoded"}
		}
		obj := make(map[string]any, len(q))
		for k, vs := range q {
			sh := m.shape.prop(k)
			if sh.is(tArray) {
				obj[k] = scalars(vs, sh)
			} else {
				obj[k] = scalar(vs[0], sh)
			}
		}
		return obj, nil
	}
	return nil, nil
}

// jsonErrorText says what is wrong with JSON text without quoting it (a
// syntax error's message quotes the offending character only).
func jsonErrorText(err error) string {
	if strings.Contains(err.Error(), "exceeded max depth") {
		return "nested too deep"
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "syntax error at byte " + strconv.FormatInt(se.Offset, 10)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "unexpected " + te.Value
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end"
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}

// responsesSpec is a compiled Responses Object.
type responsesSpec struct {
	codes  map[int]*responseSpec
	ranges [6]*responseSpec // 1XX..5XX
	def    *responseSpec
}

type responseSpec struct {
	content
	hasContent bool
	headers    []*param
}

// find returns the response a status is described by, or nil.
func (rs *responsesSpec) find(status int) *responseSpec {
	if rs == nil {
		return nil
	}
	if r, ok := rs.codes[status]; ok {
		return r
	}
	if status >= 100 && status < 600 && rs.ranges[status/100] != nil {
		return rs.ranges[status/100]
	}
	return rs.def
}

func (c *compiler) compileResponses(n node) (*responsesSpec, error) {
	rm, err := n.object("responses")
	if err != nil {
		return nil, err
	}
	rs := &responsesSpec{codes: map[int]*responseSpec{}}
	for code := range rm {
		cn, _ := n.child(code)
		if strings.HasPrefix(code, "x-") {
			continue
		}
		r, err := c.compileResponse(cn)
		if err != nil {
			return nil, err
		}
		switch {
		case code == "default":
			rs.def = r
		case len(code) == 3 && (code[1] == 'X' || code[1] == 'x') && (code[2] == 'X' || code[2] == 'x') && code[0] >= '1' && code[0] <= '5':
			rs.ranges[code[0]-'0'] = r
		default:
			st, err := strconv.Atoi(code)
			if err != nil || st < 100 || st > 599 {
				return nil, cn.errorf("response code %q is not a status, a range (2XX) or default", code)
			}
			rs.codes[st] = r
		}
	}
	return rs, nil
}

func (c *compiler) compileResponse(n node) (*responseSpec, error) {
	n, err := c.l.deref(n)
	if err != nil {
		return nil, err
	}
	if _, err := n.object("a response"); err != nil {
		return nil, err
	}
	r := &responseSpec{}
	if cn, ok := n.child("content"); ok && cn.v != nil {
		if r.content, err = c.compileContent(cn); err != nil {
			return nil, err
		}
		r.hasContent = len(r.content.media) > 0
	}
	if hn, ok := n.child("headers"); ok && hn.v != nil {
		hm, err := hn.object("headers")
		if err != nil {
			return nil, err
		}
		names := slices.Sorted(maps.Keys(hm))
		for _, name := range names {
			en, _ := hn.child(name)
			en, err := c.l.deref(en)
			if err != nil {
				return nil, err
			}
			if _, err := en.object("a header"); err != nil {
				return nil, err
			}
			p := &param{name: http.CanonicalHeaderKey(name), in: inHeader, style: "simple"}
			if strings.EqualFold(name, "Content-Type") {
				continue // OpenAPI: ignored
			}
			p.loc = "response.header." + p.name
			if p.required, err = en.boolean("required", false); err != nil {
				return nil, err
			}
			if p.explode, err = en.boolean("explode", false); err != nil {
				return nil, err
			}
			if sn, ok := en.child("schema"); ok {
				if p.schema, err = c.schemaAt(sn); err != nil {
					return nil, err
				}
				p.shape = c.shapeOf(sn, 0)
			}
			r.headers = append(r.headers, p)
		}
	}
	return r, nil
}
