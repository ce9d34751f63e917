// Package libcompare measures the OpenAPI request validators the issue
// named as candidates, on the same inputs as caddyopenapi's own tests: the
// JSON-Schema-Test-Suite through a request body, and the cost of checking
// one request. It is a module of its own, so that the gateway's module
// does not depend on the libraries it did not choose
// (docs/caddyopenapi.md, "Choosing the libraries").
//
//	cd caddyopenapi/libcompare
//	go test -run Suite -v .
//	go test -run XXX -bench . -benchmem .
package libcompare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi/datamodel"
)

// A validator answers whether a request is valid against a document.
type candidate struct {
	name string
	load func(t testing.TB, path string) (func(*http.Request) bool, error)
}

var candidates = []candidate{
	{"kin-openapi openapi3filter", loadKin},
	{"libopenapi-validator", loadLibopenapi},
}

func loadKin(t testing.TB, path string) (func(*http.Request) bool, error) {
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = true
	doc, err := l.LoadFromFile(path)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	opts := &openapi3filter.Options{SchemaValidationOptions: doc.GetSchemaValidationOptions()}
	return func(r *http.Request) bool {
		route, params, err := router.FindRoute(r)
		if err != nil {
			return false
		}
		return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route, Options: opts,
		}) == nil
	}, nil
}

var _ routers.Router // the router kin-openapi's filter needs

func loadLibopenapi(t testing.TB, path string) (func(*http.Request) bool, error) {
	spec, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg := datamodel.NewDocumentConfiguration()
	cfg.BasePath = filepath.Dir(path)
	cfg.AllowFileReferences = true
	doc, err := libopenapi.NewDocumentWithConfiguration(spec, cfg)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return func(r *http.Request) bool {
		ok, _ := v.ValidateHttpRequest(r)
		return ok
	}, nil
}

type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// TestSuite runs the JSON-Schema-Test-Suite (required tests, as vendored
// in ../testdata) through each candidate's request body validation, as
// caddyopenapi's TestJSONSchemaTestSuite runs it through the gateway's:
// the schema in a file of its own, $ref'd as the body schema of POST /t.
// It reports counts; it fails nothing.
func TestSuite(t *testing.T) {
	for _, c := range candidates {
		for _, d := range []struct{ dir, openapi string }{{"draft2020-12", "3.1.0"}, {"draft4", "3.0.3"}} {
			t.Run(c.name+"/"+d.dir, func(t *testing.T) {
				files, _ := filepath.Glob(filepath.Join("..", "testdata", "JSON-Schema-Test-Suite", "tests", d.dir, "*.json"))
				sort.Strings(files)
				var passed, failed, notLoaded, panicked int
				dir := t.TempDir()
				for _, file := range files {
					if strings.HasSuffix(file, "refRemote.json") {
						continue // as for the gateway: remote references
					}
					raw, _ := os.ReadFile(file)
					var groups []suiteGroup
					if err := json.Unmarshal(raw, &groups); err != nil {
						t.Fatal(err)
					}
					for i, g := range groups {
						path := writeSuiteDoc(t, dir, fmt.Sprintf("%s-%d", filepath.Base(file), i), d.openapi, g.Schema)
						valid, err := safeLoad(t, c, path)
						if err != nil {
							notLoaded += len(g.Tests)
							continue
						}
						for _, tc := range g.Tests {
							r := httptest.NewRequest("POST", "http://localhost/t", bytes.NewReader(tc.Data))
							r.Header.Set("Content-Type", "application/json")
							got, ok := safeValid(valid, r)
							switch {
							case !ok:
								panicked++
							case got == tc.Valid:
								passed++
							default:
								failed++
							}
						}
					}
				}
				t.Logf("%s %s: %d passed, %d failed, %d in documents that did not load, %d panicked", c.name, d.dir, passed, failed, notLoaded, panicked)
			})
		}
	}
}

func safeLoad(t testing.TB, c candidate, path string) (v func(*http.Request) bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return c.load(t, path)
}

func safeValid(v func(*http.Request) bool, r *http.Request) (got, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
		}
	}()
	return v(r), true
}

func writeSuiteDoc(t testing.TB, dir, name, version string, schema json.RawMessage) string {
	t.Helper()
	sf := filepath.Join(dir, name+".schema.json")
	if err := os.WriteFile(sf, schema, 0o644); err != nil {
		t.Fatal(err)
	}
	doc := `{"openapi":"` + version + `","info":{"title":"suite","version":"1"},"servers":[{"url":"http://localhost"}],"paths":{"/t":{"post":{` +
		`"requestBody":{"content":{"application/json":{"schema":{"$ref":"` + filepath.Base(sf) + `"}}}},` +
		`"responses":{"200":{"description":"ok"}}}}}}`
	p := filepath.Join(dir, name+".json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// benchmark measures one candidate checking one request again and again,
// on caddyopenapi's bench document and body (../testdata/bench), as
// caddyopenapi's BenchmarkBody1KB and BenchmarkPathAndQuery do.
func benchmark(b *testing.B, c candidate, method, target string, withBody bool) {
	valid, err := c.load(b, filepath.Join("..", "testdata", "bench", "api.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	var body []byte
	if withBody {
		if body, err = os.ReadFile(filepath.Join("..", "testdata", "bench", "body.json")); err != nil {
			b.Fatal(err)
		}
		body = bytes.TrimSpace(body)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequest(method, "http://localhost"+target, bytes.NewReader(body))
		if withBody {
			r.Header.Set("Content-Type", "application/json")
		}
		if !valid(r) {
			b.Fatal("a valid request refused")
		}
	}
}

func BenchmarkKinBody1KB(b *testing.B) { benchmark(b, candidates[0], "POST", "/items", true) }
func BenchmarkKinPathAndQuery(b *testing.B) {
	benchmark(b, candidates[0], "GET", "/items/42?limit=10", false)
}
func BenchmarkLibopenapiBody1KB(b *testing.B) { benchmark(b, candidates[1], "POST", "/items", true) }
func BenchmarkLibopenapiPathAndQuery(b *testing.B) {
	benchmark(b, candidates[1], "GET", "/items/42?limit=10", false)
}
