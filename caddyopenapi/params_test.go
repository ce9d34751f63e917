package caddyopenapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

const stylesDoc = `openapi: 3.0.3
info: {title: styles, version: '1'}
paths:
  /simple/{id}/{ids}/{obj}/{objx}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
        - {name: ids, in: path, required: true, schema: {type: array, items: {type: integer}}}
        - {name: obj, in: path, required: true, schema: {type: object, properties: {a: {type: integer}, b: {type: string}}, required: [a]}}
        - {name: objx, in: path, required: true, explode: true, schema: {type: object, properties: {a: {type: integer}}, required: [a]}}
      responses: {'200': {description: ok}}
  /label/{id}/{ids}/{idsx}:
    get:
      parameters:
        - {name: id, in: path, required: true, style: label, schema: {type: integer}}
        - {name: ids, in: path, required: true, style: label, schema: {type: array, items: {type: integer}}}
        - {name: idsx, in: path, required: true, style: label, explode: true, schema: {type: array, items: {type: integer}}}
      responses: {'200': {description: ok}}
  /matrix/{id}/{ids}/{idsx}/{obj}:
    get:
      parameters:
        - {name: id, in: path, required: true, style: matrix, schema: {type: integer}}
        - {name: ids, in: path, required: true, style: matrix, schema: {type: array, items: {type: integer}}}
        - {name: idsx, in: path, required: true, style: matrix, explode: true, schema: {type: array, items: {type: integer}}}
        - {name: obj, in: path, required: true, style: matrix, explode: true, schema: {type: object, properties: {a: {type: integer}}, required: [a]}}
      responses: {'200': {description: ok}}
  /files/{name}.json:
    get:
      parameters:
        - {name: name, in: path, required: true, schema: {type: string, maxLength: 5}}
      responses: {'200': {description: ok}}
  /files/latest.json:
    get:
      responses: {'200': {description: ok}}
  /query:
    get:
      parameters:
        - {name: n, in: query, schema: {type: integer, maximum: 10}}
        - {name: tags, in: query, schema: {type: array, items: {type: string, enum: [a, b]}}}
        - {name: csv, in: query, explode: false, schema: {type: array, items: {type: integer}}}
        - {name: sp, in: query, style: spaceDelimited, explode: false, schema: {type: array, items: {type: integer}}}
        - {name: pipe, in: query, style: pipeDelimited, explode: false, schema: {type: array, items: {type: integer}}}
        - {name: filter, in: query, style: deepObject, explode: true, schema: {type: object, properties: {min: {type: integer}, max: {type: integer, maximum: 100}}, additionalProperties: false}}
        - {name: point, in: query, schema: {type: object, properties: {x: {type: integer}, y: {type: integer}}}}
        - {name: flag, in: query, schema: {type: boolean}}
        - {name: maybe, in: query, schema: {type: string, nullable: true, maxLength: 3}}
        - {name: json, in: query, content: {application/json: {schema: {type: object, required: [k]}}}}
        - {name: X-Rate, in: header, schema: {type: number, minimum: 0}}
        - {name: X-List, in: header, schema: {type: array, items: {type: integer}}}
      responses: {'200': {description: ok}}
  /cookie:
    get:
      parameters:
        - {name: session, in: cookie, required: true, schema: {type: string, pattern: '^[a-f0-9]{8}$'}}
        - {name: ids, in: cookie, explode: false, schema: {type: array, items: {type: integer}}}
      responses: {'200': {description: ok}}
  /pets:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              oneOf: [{$ref: '#/components/schemas/Cat'}, {$ref: '#/components/schemas/Dog'}]
              discriminator: {propertyName: kind, mapping: {cat: '#/components/schemas/Cat', dog: Dog}}
          application/x-www-form-urlencoded:
            schema: {type: object, properties: {name: {type: string}, age: {type: integer, minimum: 0}}, required: [name]}
          image/*: {}
      responses: {'200': {description: ok}}
    put:
      requestBody:
        content:
          application/json:
            schema:
              oneOf: [{$ref: '#/components/schemas/Cat'}, {$ref: '#/components/schemas/Dog'}]
      responses: {'200': {description: ok}}
components:
  schemas:
    Cat: {type: object, required: [kind, lives], properties: {kind: {type: string, enum: [cat]}, lives: {type: integer, maximum: 9}, name: {type: string, nullable: true}}, additionalProperties: false}
    Dog: {type: object, required: [kind, bark], properties: {kind: {type: string, enum: [dog]}, bark: {type: boolean}}, additionalProperties: false}
`

// requestCase is a request to stylesDoc and the verdict it gets, with the
// first violation's location and keyword.
type requestCase struct {
	name, method, target string
	header               map[string]string
	body                 string
	want                 verdict
	loc, kw              string
}

// requestCases are TestRequests' table (TestRequestFieldEdits runs them
// through ServeHTTP too).
var requestCases = []requestCase{
	// simple (path): primitive, array, object; exploded object
	{name: "simple", target: "/simple/5/1,2,3/a,1,b,x/a=7", want: verdictPass},
	{name: "simple primitive type", target: "/simple/x/1/a,1/a=1", want: verdictInvalid, loc: "path.id", kw: "type"},
	{name: "simple array item", target: "/simple/5/1,x/a,1/a=1", want: verdictInvalid, loc: "path.ids/1", kw: "type"},
	{name: "simple object required", target: "/simple/5/1/b,x/a=1", want: verdictInvalid, loc: "path.obj/a", kw: "required"},
	{name: "simple object odd", target: "/simple/5/1/a/a=1", want: verdictInvalid, loc: "path.obj", kw: "style"},
	{name: "simple exploded object", target: "/simple/5/1/a,1/b=2", want: verdictInvalid, loc: "path.objx/a", kw: "required"},
	// label
	{name: "label", target: "/label/.5/.1,2/.3.4", want: verdictPass},
	{name: "label without dot", target: "/label/5/.1,2/.3.4", want: verdictInvalid, loc: "path.id", kw: "style"},
	{name: "label exploded item", target: "/label/.5/.1,2/.3.x", want: verdictInvalid, loc: "path.idsx/1", kw: "type"},
	// matrix
	{name: "matrix", target: "/matrix/;id=5/;ids=1,2/;idsx=3;idsx=4/;a=1", want: verdictPass},
	{name: "matrix wrong name", target: "/matrix/;x=5/;ids=1,2/;idsx=3;idsx=4/;a=1", want: verdictInvalid, loc: "path.id", kw: "style"},
	{name: "matrix exploded item", target: "/matrix/;id=5/;ids=1,2/;idsx=3;idsx=y/;a=1", want: verdictInvalid, loc: "path.idsx/1", kw: "type"},
	{name: "matrix exploded object", target: "/matrix/;id=5/;ids=1,2/;idsx=3/;b=1", want: verdictInvalid, loc: "path.obj/a", kw: "required"},
	// a template segment with a suffix; a literal path wins
	{name: "segment suffix", target: "/files/abc.json", want: verdictPass},
	{name: "segment suffix too long", target: "/files/abcdefg.json", want: verdictInvalid, loc: "path.name", kw: "maxLength"},
	{name: "literal before template", target: "/files/latest.json", want: verdictPass},
	// form (query), exploded by default
	{name: "form", target: "/query?n=3&tags=a&tags=b&csv=1,2&sp=1%202&pipe=1|2&filter[min]=1&filter[max]=5&x=1&y=2&flag=true", want: verdictPass},
	{name: "form maximum", target: "/query?n=11", want: verdictInvalid, loc: "query.n", kw: "maximum"},
	{name: "form given twice", target: "/query?n=1&n=2", want: verdictInvalid, loc: "query.n", kw: "style"},
	{name: "form exploded array item", target: "/query?tags=a&tags=c", want: verdictInvalid, loc: "query.tags/1", kw: "enum"},
	{name: "form csv item", target: "/query?csv=1,x", want: verdictInvalid, loc: "query.csv/1", kw: "type"},
	{name: "spaceDelimited item", target: "/query?sp=1%20x", want: verdictInvalid, loc: "query.sp/1", kw: "type"},
	{name: "pipeDelimited item", target: "/query?pipe=1|x", want: verdictInvalid, loc: "query.pipe/1", kw: "type"},
	{name: "deepObject maximum", target: "/query?filter[max]=500", want: verdictInvalid, loc: "query.filter/max", kw: "maximum"},
	{name: "deepObject additional", target: "/query?filter[avg]=5", want: verdictInvalid, loc: "query.filter/avg", kw: "additionalProperties"},
	{name: "exploded form object", target: "/query?x=a", want: verdictInvalid, loc: "query.point/x", kw: "type"},
	{name: "boolean", target: "/query?flag=yes", want: verdictInvalid, loc: "query.flag", kw: "type"},
	{name: "3.0 nullable", target: "/query?maybe=abcd", want: verdictInvalid, loc: "query.maybe", kw: "maxLength"},
	{name: "content json", target: "/query?json=%7B%22k%22%3A1%7D", want: verdictPass},
	{name: "content json required", target: "/query?json=%7B%7D", want: verdictInvalid, loc: "query.json/k", kw: "required"},
	{name: "content not json", target: "/query?json=nope", want: verdictInvalid, loc: "query.json", kw: "content"},
	// header (simple)
	{name: "header", target: "/query", header: map[string]string{"X-Rate": "1.5", "X-List": "1,2"}, want: verdictPass},
	{name: "header minimum", target: "/query", header: map[string]string{"X-Rate": "-1"}, want: verdictInvalid, loc: "header.X-Rate", kw: "minimum"},
	{name: "header array item", target: "/query", header: map[string]string{"X-List": "1,b"}, want: verdictInvalid, loc: "header.X-List/1", kw: "type"},
	// cookie (form)
	{name: "cookie", target: "/cookie", header: map[string]string{"Cookie": "session=0123abcd; ids=1,2"}, want: verdictPass},
	{name: "cookie missing", target: "/cookie", want: verdictInvalid, loc: "cookie.session", kw: "required"},
	{name: "cookie pattern", target: "/cookie", header: map[string]string{"Cookie": "session=zzz"}, want: verdictInvalid, loc: "cookie.session", kw: "pattern"},
	{name: "cookie array item", target: "/cookie", header: map[string]string{"Cookie": "session=0123abcd; ids=1,q"}, want: verdictInvalid, loc: "cookie.ids/1", kw: "type"},
	// bodies: oneOf with a discriminator, additionalProperties, nullable
	{name: "oneOf cat", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"cat","lives":9,"name":null}`, want: verdictPass},
	{name: "oneOf dog", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"dog","bark":true}`, want: verdictPass},
	{name: "discriminator names the schema", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"cat","lives":10}`, want: verdictInvalid, loc: "body/lives", kw: "maximum"},
	{name: "discriminator unknown value", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"cow"}`, want: verdictInvalid, loc: "body/kind", kw: "discriminator"},
	{name: "discriminator missing", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"lives":1}`, want: verdictInvalid, loc: "body/kind", kw: "required"},
	{name: "additionalProperties", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"dog","bark":true,"owner":"x"}`, want: verdictInvalid, loc: "body/owner", kw: "additionalProperties"},
	{name: "oneOf without discriminator", method: "PUT", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"cat","lives":10}`, want: verdictInvalid, loc: "body", kw: "oneOf"},
	{name: "body required", method: "POST", target: "/pets", want: verdictInvalid, loc: "body", kw: "required"},
	{name: "form body", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "name=rex&age=3", want: verdictPass},
	{name: "form body minimum", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "name=rex&age=-3", want: verdictInvalid, loc: "body/age", kw: "minimum"},
	{name: "wildcard media type", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "image/png"}, body: "\x89PNG", want: verdictPass},
	{name: "media type parameters and case", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "Application/JSON; charset=utf-8"}, body: `{"kind":"dog","bark":false}`, want: verdictPass},
	{name: "undeclared media type", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "text/plain"}, body: "x", want: verdictUnsupportedMedia, loc: "header.Content-Type", kw: "content-type"},
	{name: "no content type", method: "POST", target: "/pets", body: "x", want: verdictUnsupportedMedia, loc: "header.Content-Type", kw: "content-type"},
	{name: "trailing data", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: `{"kind":"dog","bark":true} {}`, want: verdictInvalid, loc: "body", kw: "json"},
	{name: "nested too deep", method: "POST", target: "/pets", header: map[string]string{"Content-Type": "application/json"}, body: strings.Repeat("[", 100000) + strings.Repeat("]", 100000), want: verdictInvalid, loc: "body", kw: "json"},
}

// TestRequests is the table of valid and invalid requests per parameter
// style (simple, label, matrix, form, spaceDelimited, pipeDelimited,
// deepObject; exploded or not), location (path, query, header, cookie),
// content type, and additionalProperties, oneOf with a discriminator and
// OpenAPI 3.0's nullable.
func TestRequests(t *testing.T) {
	s, err := Load(writeDoc(t, "api.yaml", map[string]string{"api.yaml": stylesDoc}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range requestCases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.request()
			v, vs := check(t, s, r)
			if v != tc.want {
				t.Fatalf("verdict %d, want %d: %v", v, tc.want, vs)
			}
			if tc.loc == "" {
				return
			}
			if len(vs) == 0 || vs[0].Location != tc.loc || vs[0].Keyword != tc.kw {
				t.Fatalf("violations %v, want first %s %s", vs, tc.loc, tc.kw)
			}
			if strings.Contains(vs[0].Message, "zzz") || strings.Contains(vs[0].Message, "nope") {
				t.Errorf("message %q echoes the value", vs[0].Message)
			}
		})
	}
}

// request is the case's request.
func (tc requestCase) request() *http.Request {
	method := tc.method
	if method == "" {
		method = "GET"
	}
	r := httptest.NewRequest(method, tc.target, strings.NewReader(tc.body))
	if tc.body == "" {
		r.Body, r.ContentLength = nil, 0
	}
	for k, v := range tc.header {
		r.Header.Set(k, v)
	}
	return r
}

// TestRequestFieldEdits holds RequestFieldEdits (nil: no field) to what
// ServeHTTP does: every request of TestRequests' table, and undeclared
// paths and methods, through the handler in each request mode, with
// responses checked, leave the request's header fields as they came,
// in the request the next handler gets and after ServeHTTP returns. The
// fast path sends a client's fields upstream as they came behind a
// handler that declares none (internal/fieldedits).
func TestRequestFieldEdits(t *testing.T) {
	path := writeDoc(t, "api.yaml", map[string]string{"api.yaml": stylesDoc})
	declared := map[string]bool{}
	for _, n := range (&OpenAPI{}).RequestFieldEdits() {
		declared[http.CanonicalHeaderKey(n)] = true
	}
	// changed lists the fields of got that differ from want's, but for
	// those declared
	changed := func(want, got http.Header) []string {
		var out []string
		for k, v := range want {
			if !declared[k] && !slices.Equal(v, got[k]) {
				out = append(out, k)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && !declared[k] {
				out = append(out, k)
			}
		}
		return out
	}
	cases := append(slices.Clone(requestCases),
		requestCase{name: "undeclared path", target: "/nowhere", header: map[string]string{"X-Rate": "1"}},
		requestCase{name: "undeclared method", method: "DELETE", target: "/query", header: map[string]string{"Cookie": "a=b"}},
		requestCase{name: "chunked body", method: "GET", target: "/query", body: "x"})
	for _, mode := range []string{ModeEnforce, ModeDryRun} {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		defer cancel()
		h := &OpenAPI{Spec: path, Request: mode, Response: mode, Undeclared: UndeclaredReject}
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		defer h.Cleanup()
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				r := tc.request()
				if tc.name == "chunked body" {
					r.ContentLength = -1
				}
				r.Header.Set("Accept", "application/json")
				r.Header.Set("X-Forwarded-For", "192.0.2.1")
				before := r.Header.Clone()
				var seen http.Header
				next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
					seen = r.Header.Clone()
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(http.StatusOK)
					return nil
				})
				_ = h.ServeHTTP(httptest.NewRecorder(), r, next)
				if seen != nil {
					if c := changed(before, seen); len(c) > 0 {
						t.Errorf("the next handler got the request with %v changed", c)
					}
				}
				if c := changed(before, r.Header); len(c) > 0 {
					t.Errorf("ServeHTTP changed the request's %v", c)
				}
			})
		}
	}
}
