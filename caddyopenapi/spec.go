package caddyopenapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is an OpenAPI document compiled for validation: its operations,
// found by method and path, each with compiled validators for its
// parameters, request bodies and responses. It is built once per load of
// the document and is read-only afterwards.
type Spec struct {
	// Version is the document's `openapi` field ("3.0.3", "3.1.0").
	Version string
	// Title is info.title.
	Title string
	// Files are the files the document was read from: the root file
	// first, then each file a $ref named.
	Files []string
	// Operations are the document's operations, in path order.
	Operations []*Operation
	// LibraryChecks are the parts of operations (a request body of a
	// media type, a parameter) whose schemas use what the compiled checks
	// do not cover: the JSON Schema library validates them, at its cost.
	LibraryChecks []LibraryCheck

	bases   []string             // path parts of the servers' URLs ("/v1"); none when "/"
	literal map[string]*pathItem // paths without templates
	// literalLens has bit n set when a literal path is n bytes long (n
	// < 64; bit 63 for the longer ones): most requests to a templated
	// path skip the literal map's lookup
	literalLens uint64
	templated   []*pathItem // the others, most specific first
	schemes     map[string]*scheme
}

// Operation is one method of one path of the document.
type Operation struct {
	// ID is the operationId, or "<METHOD> <path>" when it has none.
	ID string
	// Method is the HTTP method ("GET"); Path the path template
	// ("/orders/{id}") as the document writes it.
	Method, Path string

	params    []*param
	cookies   bool // a cookie parameter: parse the Cookie header
	query     bool // a query parameter
	body      *bodySpec
	responses *responsesSpec
	security  []requirement // nil: none
	stats     *opStats
}

// LibraryCheck is a part of an operation validated by the JSON Schema
// library rather than by compiled checks, and why.
type LibraryCheck struct {
	Operation string // "createOrder", or "POST /orders"
	Part      string // "request body application/json", "query parameter limit"
	Reason    string // "unevaluatedProperties at /etc/gateway/orders.yaml#/components/schemas/Order"
}

// Key is "<METHOD> <path>": how the summary names an operation.
func (o *Operation) Key() string { return o.Method + " " + o.Path }

type pathItem struct {
	template string
	segs     []segment
	ops      [8]*Operation // by methodIndex
	allow    string        // "GET, POST": the Allow field of a 405
}

// segment is one segment of a path template: a literal, or a parameter
// between a literal prefix and suffix ("{id}", "{name}.json").
type segment struct {
	lit            string
	param          string // "" for a literal segment
	prefix, suffix string
}

// methods of a Path Item, in the order Allow lists them.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// compileSpec reads and compiles the document at path.
func compileSpec(path string, annotationFormats []string) (*Spec, error) {
	l := newLoader()
	src, err := l.load(path)
	if err != nil {
		return nil, err
	}
	root := node{src: src, v: src.root}
	if _, err := root.object("the document"); err != nil {
		return nil, err
	}
	s := &Spec{literal: map[string]*pathItem{}, schemes: map[string]*scheme{}}
	if v, _ := root.str("swagger"); v != "" {
		return nil, root.errorf("Swagger %s documents are not supported: convert it to OpenAPI 3.0 or 3.1", v)
	}
	if s.Version, err = root.str("openapi"); err != nil {
		return nil, err
	}
	v31 := strings.HasPrefix(s.Version, "3.1.")
	if !v31 && !strings.HasPrefix(s.Version, "3.0.") {
		c, _ := root.child("openapi")
		return nil, c.errorf("openapi version %q is not supported (3.0.x and 3.1.x are)", s.Version)
	}
	if info, ok := root.child("info"); ok {
		s.Title, _ = info.str("title")
	}
	c := &compiler{l: l, v31: v31, schemas: jsonschema.NewCompiler(), unknown: map[string]bool{}, formatsChecked: map[*jsonschema.Schema]bool{}, ownFormats: annotationFormats}
	if err := c.setup(root); err != nil {
		return nil, err
	}
	if err := s.compileServers(root); err != nil {
		return nil, err
	}
	if err := s.compileSchemes(c, root); err != nil {
		return nil, err
	}
	var rootSecurity []requirement
	rootSecNode, hasRootSec := root.child("security")
	if hasRootSec {
		if rootSecurity, err = s.compileSecurity(rootSecNode); err != nil {
			return nil, err
		}
	}
	paths, ok := root.child("paths")
	if ok && paths.v != nil {
		pm, err := paths.object("paths")
		if err != nil {
			return nil, err
		}
		keys := slices.Sorted(maps.Keys(pm))
		for _, k := range keys {
			pn, _ := paths.child(k)
			if err := s.compilePath(c, pn, k, rootSecurity); err != nil {
				return nil, err
			}
		}
	} else if !v31 {
		return nil, root.errorf("paths is required in OpenAPI 3.0")
	}
	// a 3.1 document's webhooks are operations the API calls, not ones
	// it serves: their schemas are compiled (a broken one fails the
	// load) but they are not routed
	if hooks, ok := root.child("webhooks"); ok && hooks.v != nil {
		if err := s.compileWebhooks(c, hooks); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(s.templated, func(i, j int) bool { return moreSpecific(s.templated[i], s.templated[j]) })
	s.Files = l.order
	return s, nil
}

// compiler compiles a document's schemas with one JSON Schema compiler,
// so that a schema several operations $ref is compiled once.
type compiler struct {
	l       *loader
	v31     bool
	schemas *jsonschema.Compiler

	unknown        map[string]bool // formats the gateway does not know, registered to be found
	noted          int             // files whose formats are noted (l.order[:noted])
	formatsChecked map[*jsonschema.Schema]bool
	ownFormats     []string // annotation_formats
}

// The dialects an OpenAPI 3.1 document may name for its schemas: JSON
// Schema 2020-12 and the OpenAPI dialect built on it, whose extra
// keywords (discriminator, xml, externalDocs, example) are annotations.
const (
	dialect202012  = "https://json-schema.org/draft/2020-12/schema"
	oasDialectBase = "https://spec.openapis.org/oas/3.1/dialect/base"
	oasDialect2024 = "https://spec.openapis.org/oas/3.1/dialect/2024-10-25"
)

func (c *compiler) setup(root node) error {
	if c.v31 {
		c.schemas.DefaultDraft(jsonschema.Draft2020)
		if d, _ := root.str("jsonSchemaDialect"); d != "" {
			switch strings.TrimSuffix(d, "#") {
			case dialect202012, oasDialectBase, oasDialect2024:
			default:
				n, _ := root.child("jsonSchemaDialect")
				return n.errorf("jsonSchemaDialect %q is not supported (JSON Schema 2020-12 and the OpenAPI 3.1 dialect are)", d)
			}
		}
	} else {
		// OpenAPI 3.0's Schema Object is an extended subset of JSON
		// Schema draft 04/05 (exclusiveMinimum as a boolean, $ref
		// replacing its siblings), plus nullable, rewritten below
		c.schemas.DefaultDraft(jsonschema.Draft4)
		c.l.rewrite = rewriteNullable
		rewriteNullable(c.l.files[c.l.order[0]].root)
	}
	c.schemas.AssertFormat()
	for _, f := range openAPIFormats {
		c.schemas.RegisterFormat(f)
	}
	c.schemas.UseLoader(schemaLoader{c.l, c})
	return nil
}

// rewriteNullable turns OpenAPI 3.0's `nullable: true` beside a `type`
// into the JSON Schema it means: the type or null.
func rewriteNullable(v any) {
	switch t := v.(type) {
	case map[string]any:
		if n, _ := t["nullable"].(bool); n {
			if typ, ok := t["type"].(string); ok {
				t["type"] = []any{typ, "null"}
			}
		}
		for _, e := range t {
			rewriteNullable(e)
		}
	case []any:
		for _, e := range t {
			rewriteNullable(e)
		}
	}
}

// openAPIFormats are the formats OpenAPI defines beside JSON Schema's
// that the gateway asserts: int32 and int64 are ranges (of integers: a
// number that is not one is the type keyword's to refuse).
var openAPIFormats = []*jsonschema.Format{
	{Name: "int32", Validate: intFormat(32)},
	{Name: "int64", Validate: intFormat(64)},
}

func intFormat(size int) func(v any) error {
	return func(v any) error {
		n, ok := v.(json.Number)
		if !ok || intInRange(parseDecimal([]byte(n)), size) {
			return nil
		}
		return fmt.Errorf("out of range")
	}
}

// schemaLoader hands the JSON Schema compiler the document's files,
// decoded as the loader decodes them (YAML too), and nothing from the
// network.
type schemaLoader struct {
	l *loader
	c *compiler
}

func (sl schemaLoader) Load(u string) (any, error) {
	switch strings.TrimSuffix(u, "#") {
	case oasDialectBase, oasDialect2024:
		// the OpenAPI 3.1 dialect: 2020-12 whose extra keywords are
		// annotations, which is what the 2020-12 meta-schema checks
		return jsonschema.UnmarshalJSON(strings.NewReader(`{"$schema":"` + dialect202012 + `","$id":"` + strings.TrimSuffix(u, "#") + `","$dynamicAnchor":"meta","$ref":"` + dialect202012 + `"}`))
	}
	pu, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	if pu.Scheme != "file" {
		return nil, fmt.Errorf("only local files may be referenced, not %s (download it beside the document)", u)
	}
	src, err := sl.l.load(pu.Path)
	if err != nil {
		return nil, err
	}
	sl.c.noteFiles()
	return src.root, nil
}

// schemaAt compiles the schema at n (its place in its file, so that its
// $refs resolve as written).
func (c *compiler) schemaAt(n node) (*jsonschema.Schema, error) {
	if err := c.l.refCycle(n); err != nil {
		return nil, err
	}
	c.noteFiles()
	loc := n.src.url + "#" + encodeFragment(n.ptr)
	sch, err := c.schemas.Compile(loc)
	if err != nil {
		return nil, c.schemaError(n, err)
	}
	if err := c.checkFormats(n, sch); err != nil {
		return nil, err
	}
	return sch, nil
}

// schemaError makes a DocError of the JSON Schema compiler's error, at
// the place it names when it names one in the document's files.
func (c *compiler) schemaError(n node, err error) error {
	var de *DocError
	if errors.As(err, &de) {
		return err
	}
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		at := n
		if src, ptr, ok := c.place(sve.URL); ok {
			at = node{src: src, ptr: ptr}
		}
		var ve *jsonschema.ValidationError
		msg := "invalid schema"
		if errors.As(sve.Err, &ve) {
			leaf := firstLeaf(ve)
			if len(leaf.InstanceLocation) > 0 {
				at.ptr += "/" + strings.Join(escapeAll(leaf.InstanceLocation), "/")
			}
			msg = "invalid schema: " + leaf.ErrorKind.LocalizedString(printer)
		}
		return at.errorf("%s", msg)
	}
	return n.errorf("schema: %v", err)
}

func escapeAll(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = escapePointer(t)
	}
	return out
}

// place finds the file and pointer of a schema URL the compiler names.
func (c *compiler) place(u string) (*source, string, bool) {
	file, frag, _ := strings.Cut(u, "#")
	for _, src := range c.l.files {
		if src.url == file {
			ptr, err := url.PathUnescape(frag)
			if err != nil {
				return nil, "", false
			}
			return src, ptr, true
		}
	}
	return nil, "", false
}

func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

// encodeFragment escapes a JSON pointer for a URL fragment, each token as
// a path segment (the schema compiler unescapes it so).
func encodeFragment(ptr string) string {
	toks := strings.Split(ptr, "/")
	for i, t := range toks {
		toks[i] = url.PathEscape(t)
	}
	return strings.Join(toks, "/")
}

// compileServers notes the path part of each server URL: a request path
// starting with it is matched without it.
func (s *Spec) compileServers(root node) error {
	servers, ok := root.child("servers")
	if !ok || servers.v == nil {
		return nil
	}
	arr, isArr := servers.v.([]any)
	if !isArr {
		return servers.errorf("servers must be an array")
	}
	for i := range arr {
		sn := servers.index(i)
		raw, err := sn.str("url")
		if err != nil {
			return err
		}
		// variables take their defaults
		if vars, ok := sn.child("variables"); ok {
			vm, _ := vars.v.(map[string]any)
			for name := range vm {
				vn, _ := vars.child(name)
				def, err := vn.str("default")
				if err != nil {
					return err
				}
				raw = strings.ReplaceAll(raw, "{"+name+"}", def)
			}
		}
		u, err := url.Parse(raw)
		if err != nil {
			return sn.errorf("server url %q: %v", raw, err)
		}
		base := strings.TrimSuffix(u.Path, "/")
		if base != "" && !strings.Contains(base, "{") {
			s.bases = append(s.bases, base)
		}
	}
	// longest first, so that /v1/admin wins over /v1
	sort.Slice(s.bases, func(i, j int) bool { return len(s.bases[i]) > len(s.bases[j]) })
	return nil
}

func (s *Spec) compilePath(c *compiler, pn node, template string, rootSecurity []requirement) error {
	if !strings.HasPrefix(template, "/") {
		return pn.errorf("path %q must start with /", template)
	}
	pn, err := c.l.deref(pn)
	if err != nil {
		return err
	}
	if _, err := pn.object("a path item"); err != nil {
		return err
	}
	item := &pathItem{template: template}
	templated, err := item.parse()
	if err != nil {
		return pn.errorf("%v", err)
	}
	shared, err := s.compileParams(c, pn)
	if err != nil {
		return err
	}
	var allow []string
	for _, m := range methods {
		on, ok := pn.child(m)
		if !ok {
			continue
		}
		op, err := s.compileOperation(c, on, strings.ToUpper(m), template, shared, rootSecurity)
		if err != nil {
			return err
		}
		if err := item.checkPathParams(on, op); err != nil {
			return err
		}
		item.ops[methodIndex(op.Method)] = op
		allow = append(allow, op.Method)
		s.Operations = append(s.Operations, op)
		s.noteLibraryChecks(op)
	}
	item.allow = strings.Join(allow, ", ")
	if templated {
		s.templated = append(s.templated, item)
	} else {
		s.literal[template] = item
		s.literalLens |= lenBit(template)
	}
	return nil
}

func (s *Spec) compileWebhooks(c *compiler, hooks node) error {
	hm, err := hooks.object("webhooks")
	if err != nil {
		return err
	}
	for name := range hm {
		hn, _ := hooks.child(name)
		hn, err := c.l.deref(hn)
		if err != nil {
			return err
		}
		shared, err := s.compileParams(c, hn)
		if err != nil {
			return err
		}
		for _, m := range methods {
			if on, ok := hn.child(m); ok {
				if _, err := s.compileOperation(c, on, strings.ToUpper(m), name, shared, nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// noteLibraryChecks lists the parts of op the compiled checks do not
// cover: parameters, request bodies, response bodies and headers.
func (s *Spec) noteLibraryChecks(op *Operation) {
	note := func(part, reason string) {
		s.LibraryChecks = append(s.LibraryChecks, LibraryCheck{Operation: op.ID, Part: part, Reason: reason})
	}
	params := func(prefix string, ps []*param) {
		for _, p := range ps {
			if p.schema != nil && p.checks == nil {
				note(prefix+p.in+" parameter "+p.name, p.fallback)
			}
		}
	}
	media := func(prefix string, c content) {
		for _, m := range c.media {
			if m.schema != nil && m.kind != mediaOther && m.checks == nil {
				note(prefix+m.name, m.fallback)
			}
		}
	}
	params("", op.params)
	if op.body != nil {
		media("request body ", op.body.content)
	}
	if op.responses == nil {
		return
	}
	response := func(code string, r *responseSpec) {
		if r == nil {
			return
		}
		media("response "+code+" body ", r.content)
		for _, h := range r.headers {
			if h.schema != nil && h.checks == nil {
				note("response "+code+" header "+h.name, h.fallback)
			}
		}
	}
	codes := make([]int, 0, len(op.responses.codes))
	for c := range op.responses.codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		response(strconv.Itoa(c), op.responses.codes[c])
	}
	for i, r := range op.responses.ranges {
		response(strconv.Itoa(i)+"XX", r)
	}
	response("default", op.responses.def)
}

// parse splits the template into segments; it reports whether any holds
// a parameter.
func (p *pathItem) parse() (bool, error) {
	templated := false
	for _, seg := range strings.Split(p.template[1:], "/") {
		open := strings.IndexByte(seg, '{')
		if open < 0 {
			if strings.IndexByte(seg, '}') >= 0 {
				return false, fmt.Errorf("path %q: unbalanced } in segment %q", p.template, seg)
			}
			p.segs = append(p.segs, segment{lit: seg})
			continue
		}
		end := strings.IndexByte(seg[open:], '}')
		if end < 0 {
			return false, fmt.Errorf("path %q: unbalanced { in segment %q", p.template, seg)
		}
		end += open
		name := seg[open+1 : end]
		rest := seg[end+1:]
		if name == "" || strings.ContainsAny(rest, "{}") {
			return false, fmt.Errorf("path %q: segment %q: one named parameter per segment is supported", p.template, seg)
		}
		p.segs = append(p.segs, segment{param: name, prefix: seg[:open], suffix: rest})
		templated = true
	}
	return templated, nil
}

// checkPathParams requires a path parameter for each template name.
func (p *pathItem) checkPathParams(on node, op *Operation) error {
	for _, seg := range p.segs {
		if seg.param == "" {
			continue
		}
		found := false
		for _, prm := range op.params {
			if prm.in == "path" && prm.name == seg.param {
				found = true
				break
			}
		}
		if !found {
			return on.errorf("path parameter %q of %s is not declared", seg.param, p.template)
		}
	}
	for _, prm := range op.params {
		if prm.in == "path" {
			if prm.pathIdx = p.pathIndex(prm.name); prm.pathIdx < 0 {
				return on.errorf("path parameter %q is not in the path %s", prm.name, p.template)
			}
		}
	}
	return nil
}

// moreSpecific orders templated paths: more segments first (they are
// compared only with paths of as many), then the one whose first
// differing segment is a literal, so /orders/mine wins over
// /orders/{id} (OpenAPI: concrete paths before templated ones).
func moreSpecific(a, b *pathItem) bool {
	if len(a.segs) != len(b.segs) {
		return len(a.segs) > len(b.segs)
	}
	for i := range a.segs {
		al, bl := a.segs[i].param == "", b.segs[i].param == ""
		if al != bl {
			return al
		}
		ap := len(a.segs[i].prefix) + len(a.segs[i].suffix)
		bp := len(b.segs[i].prefix) + len(b.segs[i].suffix)
		if ap != bp {
			return ap > bp
		}
	}
	return a.template < b.template
}

func (s *Spec) compileOperation(c *compiler, on node, method, template string, shared []*param, rootSecurity []requirement) (*Operation, error) {
	if _, err := on.object("an operation"); err != nil {
		return nil, err
	}
	op := &Operation{Method: method, Path: template}
	id, err := on.str("operationId")
	if err != nil {
		return nil, err
	}
	op.ID = id
	if op.ID == "" {
		op.ID = method + " " + template
	}
	own, err := s.compileParams(c, on)
	if err != nil {
		return nil, err
	}
	// the operation's parameters override the path's of the same name
	// and location
	op.params = append(op.params, own...)
	for _, sp := range shared {
		overridden := false
		for _, p := range own {
			if p.in == sp.in && p.name == sp.name {
				overridden = true
				break
			}
		}
		if !overridden {
			op.params = append(op.params, sp)
		}
	}
	for _, p := range op.params {
		op.cookies = op.cookies || p.in == "cookie"
		op.query = op.query || p.in == "query"
	}
	if bn, ok := on.child("requestBody"); ok {
		if op.body, err = c.compileBody(bn); err != nil {
			return nil, err
		}
	}
	if rn, ok := on.child("responses"); ok {
		if op.responses, err = c.compileResponses(rn); err != nil {
			return nil, err
		}
	}
	op.security = rootSecurity
	if sn, ok := on.child("security"); ok {
		if op.security, err = s.compileSecurity(sn); err != nil {
			return nil, err
		}
	}
	return op, nil
}

// match finds the operation for a method and path. item is the path's
// (nil when no path matches); op is nil when the path has no such method.
// vals holds the path parameters' raw values, in template order.
func (s *Spec) match(method, path string, vals *pathValues) (item *pathItem, op *Operation) {
	for _, base := range s.bases {
		if rest, ok := strings.CutPrefix(path, base); ok && (rest == "" || rest[0] == '/') {
			if rest == "" {
				rest = "/"
			}
			if item, op = s.matchPath(method, rest, vals); item != nil {
				return item, op
			}
		}
	}
	return s.matchPath(method, path, vals)
}

func (s *Spec) matchPath(method, path string, vals *pathValues) (*pathItem, *Operation) {
	if s.literalLens&lenBit(path) != 0 {
		if item, ok := s.literal[path]; ok {
			return item, item.op(method)
		}
	}
	if len(path) == 0 || path[0] != '/' {
		return nil, nil
	}
	n := strings.Count(path, "/")
	for _, item := range s.templated {
		if len(item.segs) != n {
			continue
		}
		if item.matchSegs(path[1:], vals) {
			return item, item.op(method)
		}
	}
	return nil, nil
}

func (p *pathItem) op(method string) *Operation {
	i := methodIndex(method)
	if i < 0 {
		return nil
	}
	if op := p.ops[i]; op != nil || method != http.MethodHead {
		return op
	}
	return p.ops[0] // HEAD is GET without the body
}

// methodIndex is the position of an HTTP method in methods (GET 0), or
// -1 for a method a Path Item cannot declare.
func methodIndex(method string) int {
	switch method {
	case http.MethodGet:
		return 0
	case http.MethodPut:
		return 1
	case http.MethodPost:
		return 2
	case http.MethodDelete:
		return 3
	case http.MethodOptions:
		return 4
	case http.MethodHead:
		return 5
	case http.MethodPatch:
		return 6
	case http.MethodTrace:
		return 7
	}
	return -1
}

// lenBit is the bit of literalLens for a path of len(p) bytes.
func lenBit(p string) uint64 { return 1 << min(len(p), 63) }

// pathValues are the raw values of a request's path parameters.
type pathValues struct {
	n    int
	vals [8]string
	more []string
}

func (pv *pathValues) reset() { pv.n, pv.more = 0, pv.more[:0] }

func (pv *pathValues) add(v string) {
	if pv.n < len(pv.vals) {
		pv.vals[pv.n] = v
	} else {
		pv.more = append(pv.more, v)
	}
	pv.n++
}

func (pv *pathValues) get(i int) string {
	if i < len(pv.vals) {
		return pv.vals[i]
	}
	return pv.more[i-len(pv.vals)]
}

// matchSegs matches rest, a path without its first '/' of as many
// segments as p's, and puts the values of p's parameters in vals.
func (p *pathItem) matchSegs(rest string, vals *pathValues) bool {
	vals.reset()
	last := len(p.segs) - 1
	for i := range p.segs {
		seg := &p.segs[i] // not copied: four strings
		if seg.param == "" {
			// a literal's length says where its segment ends: no
			// search for the '/'
			n := len(seg.lit)
			if i == last {
				if rest != seg.lit {
					return false
				}
				continue
			}
			if n >= len(rest) || rest[n] != '/' || rest[:n] != seg.lit {
				return false
			}
			rest = rest[n+1:]
			continue
		}
		part := rest
		if i < last {
			j := strings.IndexByte(rest, '/')
			part, rest = rest[:j], rest[j+1:]
		}
		v := part
		if seg.prefix != "" || seg.suffix != "" { // most segments are the parameter alone
			if len(part) < len(seg.prefix)+len(seg.suffix) || !strings.HasPrefix(part, seg.prefix) || !strings.HasSuffix(part, seg.suffix) {
				return false
			}
			v = part[len(seg.prefix) : len(part)-len(seg.suffix)]
		}
		if v == "" {
			return false
		}
		vals.add(v)
	}
	return true
}

// pathIndex returns the position of a path parameter among the
// template's parameters, or -1.
func (p *pathItem) pathIndex(name string) int {
	i := 0
	for _, seg := range p.segs {
		if seg.param == "" {
			continue
		}
		if seg.param == name {
			return i
		}
		i++
	}
	return -1
}

// declaredOrder orders a schema's property names (sorted) by the line
// each is declared at in its file, so that the one-pass check expects a
// body's members in the order the document lists them; names on one
// line (a document of JSON on one line), and names only required, keep
// their sorted order after those with a line.
func (c *compiler) declaredOrder(s *jsonschema.Schema, names []string) {
	src, ptr, ok := c.place(s.Location)
	if !ok {
		return
	}
	line := func(name string) int {
		if l, ok := src.lines[ptr+"/properties/"+escapePointer(name)]; ok {
			return l
		}
		return math.MaxInt
	}
	sort.SliceStable(names, func(i, j int) bool { return line(names[i]) < line(names[j]) })
}
