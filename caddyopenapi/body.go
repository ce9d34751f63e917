package caddyopenapi

import (
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
	checks   *schemaCheck       // schema compiled for the tape; nil: the library's alone
	fallback string             // why checks is nil when schema is not
	onePass  bool               // checks has the one-pass check (onepass.go)
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
			m.checks, m.fallback = compileChecks(m.schema, c.declaredOrder)
			m.onePass = m.kind == mediaJSON && onePass(m.checks)
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

// read puts a body of the media type on s (token 0): JSON text, which
// must be I-JSON, or a form; loc is where a violation is ("body",
// "response.body").
func (m *media) read(s *scanner, body []byte, loc string) *Violation {
	if m.kind == mediaJSON {
		if !s.scan(body) {
			v := s.violation(loc)
			return &v
		}
		return nil
	}
	s.reset(nil)
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return &Violation{Location: loc, Keyword: "form", Message: "must be form-urlencoded"}
	}
	obj := s.begin(kObject)
	for k, vs := range q {
		sh := m.shape.prop(k)
		s.key(obj, k)
		if sh.is(tArray) {
			arr := s.begin(kArray)
			for _, v := range vs {
				s.item(arr, v, sh.item())
			}
			s.end(arr)
		} else {
			s.scalar(vs[0], sh)
		}
	}
	s.end(obj)
	return nil
}

// checkBytes checks a body (JSON or a form): read onto a tape, then
// checked by the schema's compiled checks when it has them; the library
// lists the violations of a body they refuse, and checks by itself what
// they do not cover.
func (m *media) checkBytes(body []byte, loc string, out []Violation) (verdict, []Violation) {
	s := getScanner()
	defer putScanner(s)
	if m.onePass && s.accepts(m.checks, body) {
		return verdictPass, out
	}
	if viol := m.read(s, body, loc); viol != nil {
		return verdictInvalid, append(out, *viol)
	}
	if m.schema == nil || m.checks != nil && s.valid(m.checks, 0) {
		return verdictPass, out
	}
	v := s.value(0)
	if err := validateLib(m.schema, v); err != nil {
		return verdictInvalid, m.disc.explain(v, err, loc, out)
	}
	// the checks refused what the library passes: the library is the
	// reference (FuzzCompiledValidator looks for such values)
	return verdictPass, out
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
