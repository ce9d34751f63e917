package caddyopenapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeDoc writes files (name -> content) into a directory of the test's
// own and returns the path of the first name given as root.
func writeDoc(t testing.TB, root string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, root)
}

// check runs the request checks (no security) of the operation a request
// calls; "undeclared" when none.
func check(t testing.TB, s *Spec, r *http.Request) (verdict, []Violation) {
	t.Helper()
	var pv pathValues
	_, op := s.match(r.Method, r.URL.Path, &pv)
	if op == nil {
		t.Fatalf("%s %s: no operation", r.Method, r.URL)
	}
	h := &OpenAPI{MaxRequestBody: 1 << 20}
	v, vs, err := h.checkRequest(r, op, &pv)
	if err != nil {
		t.Fatal(err)
	}
	return v, vs
}

// TestOAIExamples: the OpenAPI Initiative's example documents (3.0:
// petstore, petstore-expanded, uspto, api-with-examples, callback and link
// examples; 3.1: the webhook example and non-oauth-scopes) load, and the
// petstore's operations check requests.
func TestOAIExamples(t *testing.T) {
	files, _ := filepath.Glob("testdata/oai-examples/*.yaml")
	if len(files) != 8 {
		t.Fatalf("%d example documents, want 8", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			// uspto's document names a format of its own ("uriref"): it
			// loads only when the config says it is one
			if strings.HasSuffix(f, "uspto.yaml") {
				_, err := Load(f, "", "")
				if err == nil || !strings.Contains(err.Error(), `v3.0-uspto.yaml:205: #/components/schemas/dataSetList/properties/apis/items/properties/apiUrl/format: unknown format "uriref"`) {
					t.Errorf("uspto without annotation_formats: %v", err)
				}
			}
			s, err := Load(f, "", "", "uriref")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(s.Version, "3.") {
				t.Errorf("version %q", s.Version)
			}
		})
	}
	s, err := Load("testdata/oai-examples/v3.0-petstore.yaml", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		want   verdict
		loc    string
	}{
		{"/v1/pets?limit=20", verdictPass, ""},
		{"/v1/pets?limit=abc", verdictInvalid, "query.limit"},
		{"/v1/pets?limit=101", verdictInvalid, "query.limit"},
		{"/v1/pets/42", verdictPass, ""},
	} {
		v, vs := check(t, s, httptest.NewRequest("GET", "http://petstore.swagger.io"+tc.target, nil))
		if v != tc.want || tc.loc != "" && (len(vs) == 0 || vs[0].Location != tc.loc) {
			t.Errorf("GET %s: verdict %d %v, want %d at %s", tc.target, v, vs, tc.want, tc.loc)
		}
	}
}

// TestBrokenDocuments: a document that does not load names the file, the
// line and the JSON pointer of what is wrong.
func TestBrokenDocuments(t *testing.T) {
	head := "openapi: 3.1.0\ninfo: {title: t, version: '1'}\n"
	cases := []struct {
		name  string
		files map[string]string
		file  string // the file named, relative
		line  int
		ptr   string
		msg   string
	}{
		{"not YAML", map[string]string{"api.yaml": head + "paths:\n  /a: [\n"}, "api.yaml", 4, "", "not YAML or JSON"},
		{"swagger 2", map[string]string{"api.yaml": "swagger: '2.0'\n"}, "api.yaml", 1, "", "Swagger 2.0"},
		{"version", map[string]string{"api.yaml": "openapi: 2.5.0\n"}, "api.yaml", 1, "/openapi", "not supported"},
		{"parameter without name", map[string]string{"api.yaml": head + "paths:\n  /a:\n    get:\n      parameters:\n        - in: query\n          schema: {type: string}\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 7, "/paths/~1a/get/parameters/0", "needs a name"},
		{"bad schema keyword", map[string]string{"api.yaml": head + "paths:\n  /a:\n    get:\n      parameters:\n        - name: q\n          in: query\n          schema: {type: string, minLength: -1}\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 9, "/paths/~1a/get/parameters/0/schema/minLength", "invalid schema"},
		{"schema error in another file", map[string]string{
			"api.yaml":       head + "paths:\n  /a:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: 'schemas/s.yaml#/Thing'}\n      responses: {'200': {description: ok}}\n",
			"schemas/s.yaml": "Thing:\n  type: object\n  properties:\n    n:\n      type: numbr\n"},
			"schemas/s.yaml", 5, "/Thing/properties/n/type", "invalid schema"},
		{"missing $ref target", map[string]string{"api.yaml": head + "paths:\n  /a:\n    get:\n      parameters:\n        - $ref: '#/components/parameters/Nope'\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 7, "/paths/~1a/get/parameters/0/$ref", "nothing at #/components/parameters/Nope"},
		{"missing file", map[string]string{"api.yaml": head + "paths:\n  /a:\n    $ref: 'paths/a.yaml'\n"},
			"api.yaml", 5, "/paths/~1a/$ref", "no such file"},
		{"undeclared path parameter", map[string]string{"api.yaml": head + "paths:\n  /a/{id}:\n    get:\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 5, "/paths/~1a~1{id}/get", "path parameter \"id\""},
		{"remote ref", map[string]string{"api.yaml": head + "paths:\n  /a:\n    $ref: 'https://example.com/a.yaml'\n"},
			"api.yaml", 5, "/paths/~1a/$ref", "only local files"},
		{"duplicate key", map[string]string{"api.yaml": head + "paths:\n  /a: {}\n  /a: {}\n"},
			"api.yaml", 5, "/paths/~1a", "duplicate key"},
		{"unknown format", map[string]string{"api.yaml": head + "paths:\n  /a:\n    get:\n      parameters:\n        - name: id\n          in: query\n          schema: {type: string, format: uuidd}\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 9, "/paths/~1a/get/parameters/0/schema/format", `unknown format "uuidd"`},
		{"unknown format in another file", map[string]string{
			"api.yaml":       head + "paths:\n  /a:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: 'schemas/s.yaml#/Thing'}\n      responses: {'200': {description: ok}}\n",
			"schemas/s.yaml": "Thing:\n  type: object\n  properties:\n    id:\n      type: string\n      format: uuidd\n"},
			"schemas/s.yaml", 6, "/Thing/properties/id/format", `unknown format "uuidd"`},
		{"unknown format, 3.0", map[string]string{"api.yaml": "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    get:\n      parameters:\n        - name: d\n          in: header\n          schema:\n            type: string\n            format: dat\n      responses: {'200': {description: ok}}\n"},
			"api.yaml", 11, "/paths/~1a/get/parameters/0/schema/format", `unknown format "dat"`},
		{"unknown security scheme", map[string]string{"api.yaml": head + "security: [{oauth: []}]\npaths: {}\n"},
			"api.yaml", 3, "/security/0/oauth", "not in components.securitySchemes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := writeDoc(t, "api.yaml", tc.files)
			_, err := Load(root, "", "")
			if err == nil {
				t.Fatal("loaded")
			}
			var de *DocError
			if !errors.As(err, &de) {
				t.Fatalf("%T %v, want a DocError", err, err)
			}
			want := filepath.Join(filepath.Dir(root), tc.file)
			if de.File != want || de.Line != tc.line || de.Pointer != tc.ptr || !strings.Contains(de.Msg, tc.msg) {
				t.Errorf("got %s:%d #%s %q\nwant %s:%d #%s ...%q...", de.File, de.Line, de.Pointer, de.Msg, want, tc.line, tc.ptr, tc.msg)
			}
			if !strings.Contains(err.Error(), want+":") || !strings.Contains(err.Error(), "#"+tc.ptr) {
				t.Errorf("message %q names neither file and line nor pointer", err)
			}
		})
	}
}

// TestRefCycles: $ref cycles load (a recursive schema is valid) or fail
// with an error; none hangs.
func TestRefCycles(t *testing.T) {
	head := "openapi: 3.1.0\ninfo: {title: t, version: '1'}\n"
	body := func(ref string) string {
		return "paths:\n  /a:\n    post:\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: '" + ref + "'}\n      responses: {'200': {description: ok}}\n"
	}
	cases := []struct {
		name  string
		files map[string]string
		ok    bool
	}{
		{"recursive schema", map[string]string{"api.yaml": head + body("#/components/schemas/Node") +
			"components:\n  schemas:\n    Node:\n      type: object\n      properties:\n        next: {$ref: '#/components/schemas/Node'}\n"}, true},
		{"schema naming itself", map[string]string{"api.yaml": head + body("#/components/schemas/A") +
			"components:\n  schemas:\n    A: {$ref: '#/components/schemas/A'}\n"}, false},
		{"two schemas naming each other", map[string]string{"api.yaml": head + body("#/components/schemas/A") +
			"components:\n  schemas:\n    A: {$ref: '#/components/schemas/B'}\n    B: {$ref: '#/components/schemas/A'}\n"}, false},
		{"across files", map[string]string{"api.yaml": head + body("b.yaml#/A"), "b.yaml": "A: {$ref: 'c.yaml#/B'}\n", "c.yaml": "B: {$ref: 'b.yaml#/A'}\n"}, false},
		{"parameter naming itself", map[string]string{"api.yaml": head +
			"paths:\n  /a:\n    get:\n      parameters: [{$ref: '#/components/parameters/P'}]\n      responses: {'200': {description: ok}}\ncomponents:\n  parameters:\n    P: {$ref: '#/components/parameters/P'}\n"}, false},
		{"path item naming itself", map[string]string{"api.yaml": head + "paths:\n  /a: {$ref: '#/paths/~1a'}\n"}, false},
		{"YAML alias bomb", map[string]string{"api.yaml": head + "x-a: &a [1,1,1,1,1,1,1,1,1,1]\nx-b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nx-c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n" +
			"x-d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\nx-e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nx-f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\nx-g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\npaths: {}\n"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := writeDoc(t, "api.yaml", tc.files)
			done := make(chan error, 1)
			go func() {
				s, err := Load(root, "", "")
				if err == nil && tc.ok {
					// a recursive body validates
					r := httptest.NewRequest("POST", "/a", strings.NewReader(`{"next":{"next":{"next":{}}}}`))
					r.Header.Set("Content-Type", "application/json")
					if v, vs := check(t, s, r); v != verdictPass {
						err = errors.New("recursive body refused: " + vs[0].Message)
					}
				}
				done <- err
			}()
			select {
			case err := <-done:
				if tc.ok && err != nil {
					t.Fatalf("did not load: %v", err)
				}
				if !tc.ok && err == nil {
					t.Fatal("loaded, want an error")
				}
				if err != nil {
					t.Logf("%v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("still loading after 20s")
			}
		})
	}
}

// TestMatch: a request finds its operation by path and method: a literal
// path before a template of as many segments, HEAD as GET where the path
// has no HEAD, a method the path does not declare (or no Path Item can)
// its Path Item alone (a 405), and a literal path past 63 bytes.
func TestMatch(t *testing.T) {
	long := "/" + strings.Repeat("l", 70)
	s, err := Load(writeDoc(t, "api.yaml", map[string]string{"api.yaml": `openapi: 3.1.0
info: {title: t, version: '1'}
paths:
  /items/mine:
    get: {operationId: mine, responses: {'200': {description: ok}}}
  /items/{id}:
    get: {operationId: item, parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {'200': {description: ok}}}
    head: {operationId: itemHead, parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {'200': {description: ok}}}
    trace: {operationId: itemTrace, parameters: [{name: id, in: path, required: true, schema: {type: string}}], responses: {'200': {description: ok}}}
  /orders:
    post: {operationId: order, responses: {'200': {description: ok}}}
  ` + long + `:
    delete: {operationId: long, responses: {'200': {description: ok}}}
`}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, item, op string
	}{
		{"GET", "/items/mine", "/items/mine", "mine"},
		{"HEAD", "/items/mine", "/items/mine", "mine"},
		{"GET", "/items/minf", "/items/{id}", "item"},
		{"HEAD", "/items/7", "/items/{id}", "itemHead"},
		{"TRACE", "/items/7", "/items/{id}", "itemTrace"},
		{"PUT", "/items/7", "/items/{id}", ""},
		{"FOO", "/items/7", "/items/{id}", ""},
		{"get", "/items/7", "/items/{id}", ""},
		{"POST", "/orders", "/orders", "order"},
		{"GET", "/orders", "/orders", ""},
		{"DELETE", long, long, "long"},
		{"DELETE", long + "x", "", ""},
		{"GET", "/nowhere", "", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var pv pathValues
			item, op := s.match(tc.method, tc.path, &pv)
			gotItem, gotOp := "", ""
			if item != nil {
				gotItem = item.template
			}
			if op != nil {
				gotOp = op.ID
			}
			if gotItem != tc.item || gotOp != tc.op {
				t.Errorf("matched %q %q, want %q %q", gotItem, gotOp, tc.item, tc.op)
			}
		})
	}
}

// TestMatchSegs: a template's segments match a path of as many segments
// as splitting the path at each '/' and comparing segment by segment
// does (literals equal, a parameter's prefix and suffix around a value
// of at least a byte), with the same values.
func TestMatchSegs(t *testing.T) {
	templates := []string{"/items/{id}", "/items/{id}/parts", "/a/{x}/b/{y}", "/{x}/lit", "/files/{name}.json",
		"/v1/{a}/{b}", "/lit/more", "/x/", "/{x}/", "/pre-{id}-suf/z"}
	paths := []string{"/items/42", "/items/", "/itemsX/42", "/item/42", "/items/42/parts", "/items/42/partsX",
		"/items//parts", "/a/1/b/2", "/a/1/c/2", "/a//b/2", "/aa/1/b/2", "/q/lit", "/q/li", "/q/litt", "//lit",
		"/files/a.json", "/files/.json", "/files/a.jso", "/v1/a/b", "/v1//b", "/lit/more", "/lit/mor", "/lit/moree",
		"/x/", "/x/y", "/y/", "/pre-1-suf/z", "/pre--suf/z", "/pre-1-su/z", "/items/42/parts/"}
	for _, tmpl := range templates {
		p := &pathItem{template: tmpl}
		if _, err := p.parse(); err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			if strings.Count(path, "/") != len(p.segs) {
				continue // matchPath's filter
			}
			var pv pathValues
			got := p.matchSegs(path[1:], &pv)
			want, wantVals := splitMatch(p, path)
			var gotVals []string
			for i := 0; got && i < pv.n; i++ {
				gotVals = append(gotVals, pv.get(i))
			}
			if got != want || strings.Join(gotVals, "|") != strings.Join(wantVals, "|") {
				t.Errorf("%s on %s: %v %q, want %v %q", tmpl, path, got, gotVals, want, wantVals)
			}
		}
	}
}

// splitMatch is matchSegs by splitting the path.
func splitMatch(p *pathItem, path string) (bool, []string) {
	parts := strings.Split(path[1:], "/")
	var vals []string
	for i, seg := range p.segs {
		part := parts[i]
		if seg.param == "" {
			if part != seg.lit {
				return false, nil
			}
			continue
		}
		if !strings.HasPrefix(part, seg.prefix) || !strings.HasSuffix(part, seg.suffix) ||
			len(part) <= len(seg.prefix)+len(seg.suffix) {
			return false, nil
		}
		vals = append(vals, part[len(seg.prefix):len(part)-len(seg.suffix)])
	}
	return true, vals
}
