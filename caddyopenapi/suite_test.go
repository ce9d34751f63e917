package caddyopenapi

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// suiteExceptions are the JSON-Schema-Test-Suite files (required tests)
// the gateway does not run, with the reason; docs/caddyopenapi.md lists
// them. Every other case must pass.
var suiteExceptions = map[string]string{
	// the schemas $ref http://localhost:1234/...: the gateway reads the
	// files beside the document and fetches nothing from the network
	"refRemote.json": "remote $refs: the gateway fetches nothing from the network",
	// these two groups' schemas name a meta-schema at http://localhost:1234
	"vocabulary.json / schema that uses custom metaschema with with no validation vocabulary": "a remote meta-schema: the gateway fetches nothing from the network",
	"vocabulary.json / ignore unrecognized optional vocabulary":                               "a remote meta-schema: the gateway fetches nothing from the network",
	// these dynamicRef groups $ref schemas at http://localhost:1234
	"dynamicRef.json / strict-tree schema, guards against misspelled properties":       "remote $refs: the gateway fetches nothing from the network",
	"dynamicRef.json / tests for implementation dynamic anchor and reference link":     "remote $refs: the gateway fetches nothing from the network",
	"dynamicRef.json / $ref and $dynamicAnchor are independent of order - $defs first": "remote $refs: the gateway fetches nothing from the network",
	"dynamicRef.json / $ref and $dynamicAnchor are independent of order - $ref first":  "remote $refs: the gateway fetches nothing from the network",
	"dynamicRef.json / $ref to $dynamicRef finds detached $dynamicAnchor":              "remote $refs: the gateway fetches nothing from the network",
}

// suiteAsserted is the one kind of case the gateway answers otherwise on
// purpose: draft 2020-12 makes format an annotation by default; the
// gateway asserts the formats it knows (what an API's clients and
// servers expect of format: uuid, date-time, email), so a string that is
// not of its format is invalid.
const suiteAsserted = "is only an annotation by default"

type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// suiteCounts are the suite's counts through the handler, per draft:
// docs/caddyopenapi.md quotes them, and a change must show here.
var suiteCounts = map[string]struct{ passed, failed, notRun, asserted int }{
	"draft2020-12": {1233, 0, 49, 17},
	"draft4":       {601, 0, 17, 0},
}

// suiteAssertedFormats are the formats whose "only an annotation" case
// the gateway refuses (it asserts them); the two it does not know pass.
var suiteAssertedFormats = []string{
	"date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "iri", "iri-reference",
	"json-pointer", "regex", "relative-json-pointer", "time", "uri", "uri-reference", "uri-template", "uuid",
}

// TestJSONSchemaTestSuite runs the official JSON-Schema-Test-Suite
// (json-schema-org, testdata/JSON-Schema-Test-Suite, its required tests)
// through the handler's body validation: each test schema is the
// application/json request body schema of an operation in a document of
// its own (OpenAPI 3.1 for draft 2020-12, OpenAPI 3.0 for draft 4), and
// each test's data is sent as a request body, which must be refused
// exactly when the suite says it is invalid. Where the body's schema is
// compiled for the tape (validate.go), the compiled checks' own verdict
// must be the suite's too (the handler would otherwise ask the library
// and hide a wrong refusal). The counts, and which format cases are
// refused on purpose, are pinned.
func TestJSONSchemaTestSuite(t *testing.T) {
	for _, d := range []struct{ dir, openapi string }{{"draft2020-12", "3.1.0"}, {"draft4", "3.0.3"}} {
		t.Run(d.dir, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join("testdata", "JSON-Schema-Test-Suite", "tests", d.dir, "*.json"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no test files: %v", err)
			}
			sort.Strings(files)
			var passed, failed, skipped, asserted, compiled, library int
			var assertedFormats []string
			fallbacks := map[string]int{}
			dir := t.TempDir()
			for _, file := range files {
				name := filepath.Base(file)
				var groups []suiteGroup
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &groups); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				for gi, g := range groups {
					_, skipFile := suiteExceptions[name]
					if _, skip := suiteExceptions[name+" / "+g.Description]; skip || skipFile {
						skipped += len(g.Tests)
						continue
					}
					spec, err := suiteSpec(dir, d.openapi, g.Schema)
					if err != nil {
						t.Errorf("%s / %s: the document does not load: %v", name, g.Description, err)
						failed += len(g.Tests)
						continue
					}
					m := spec.Operations[0].body.media[0]
					if m.checks == nil {
						fallbacks[m.fallback[:strings.Index(m.fallback+" at", " at")]] += len(g.Tests)
					}
					for _, tc := range g.Tests {
						got, checks := suiteValid(t, spec, tc.Data)
						if m.checks != nil {
							compiled++
						} else {
							library++
						}
						want := tc.Valid
						if name == "format.json" && strings.HasSuffix(tc.Description, suiteAsserted) {
							// refused where the gateway knows the format
							// (idn-email and idn-hostname it does not)
							if got != tc.Valid {
								asserted++
								assertedFormats = append(assertedFormats, strings.TrimSuffix(g.Description, " format"))
								want = got
							}
						} else {
							if got == tc.Valid {
								passed++
							} else {
								failed++
								t.Errorf("%s #%d %s / %s: valid %v, want %v (data %s)", name, gi, g.Description, tc.Description, got, tc.Valid, tc.Data)
							}
						}
						if m.checks != nil && checks != want {
							t.Errorf("%s #%d %s / %s: the compiled checks say valid %v, want %v (data %s)", name, gi, g.Description, tc.Description, checks, want, tc.Data)
						}
						if name == "format.json" && strings.HasSuffix(tc.Description, suiteAsserted) && got == tc.Valid {
							passed++
						}
					}
				}
			}
			t.Logf("%s through OpenAPI %s request bodies: %d passed, %d failed, %d not run (remote references), %d format cases answered as assertions (%d files); %d cases by the compiled checks, %d by the library",
				d.dir, d.openapi, passed, failed, skipped, asserted, len(files), compiled, library)
			for _, k := range slices.Sorted(maps.Keys(fallbacks)) {
				t.Logf("by the library: %d cases whose schema has %s", fallbacks[k], k)
			}
			want := suiteCounts[d.dir]
			if passed != want.passed || failed != want.failed || skipped != want.notRun || asserted != want.asserted {
				t.Errorf("counts %d passed, %d failed, %d not run, %d asserted; want %d, %d, %d, %d",
					passed, failed, skipped, asserted, want.passed, want.failed, want.notRun, want.asserted)
			}
			if d.dir == "draft2020-12" {
				sort.Strings(assertedFormats)
				if !slices.Equal(assertedFormats, suiteAssertedFormats) {
					t.Errorf("format cases refused on purpose: %v, want %v", assertedFormats, suiteAssertedFormats)
				}
			}
		})
	}
}

// suiteSpec writes and loads a document whose POST /t body has schema.
// The schema is a file of its own that the document's body schema $refs,
// as a standalone JSON Schema is used in a document: its "#" is its own
// root (written inline, "#" would be the OpenAPI document's).
func suiteSpec(dir, version string, schema json.RawMessage) (*Spec, error) {
	sf, err := os.CreateTemp(dir, "schema-*.json")
	if err != nil {
		return nil, err
	}
	if _, err := sf.Write(schema); err != nil {
		return nil, err
	}
	sf.Close()
	doc := `{"openapi":"` + version + `","info":{"title":"suite","version":"1"},"paths":{"/t":{"post":{` +
		`"requestBody":{"content":{"application/json":{"schema":{"$ref":"` + filepath.Base(sf.Name()) + `"}}}},` +
		`"responses":{"200":{"description":"ok"}}}}}}`
	f, err := os.CreateTemp(dir, "suite-*.json")
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(doc); err != nil {
		return nil, err
	}
	f.Close()
	return Load(f.Name(), "", "")
}

// suiteValid sends data as the body of POST /t and reports whether the
// handler's checks pass it, and what the compiled checks alone say (when
// the body's schema has them).
func suiteValid(t *testing.T, spec *Spec, data json.RawMessage) (handler, checks bool) {
	t.Helper()
	r := httptest.NewRequest("POST", "/t", bytes.NewReader(data))
	r.Header.Set("Content-Type", "application/json")
	var pv pathValues
	_, op := spec.match(r.Method, r.URL.Path, &pv)
	if op == nil {
		t.Fatal("POST /t does not match")
	}
	v, vs, err := op.checkBody(r, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v == verdictTooLarge || v == verdictUnsupportedMedia {
		t.Fatalf("verdict %d: %v", v, vs)
	}
	if v == verdictInvalid && len(vs) > 0 && vs[0].Keyword == "json" {
		t.Fatalf("the suite's data is JSON, the handler says it is not: %s: %v", data, vs)
	}
	if m := op.body.media[0]; m.checks != nil {
		var sc scanner
		if !sc.scan(bytes.TrimSpace(data)) {
			t.Fatalf("the scanner refuses %s", data)
		}
		checks = sc.valid(m.checks, 0)
	}
	return v == verdictPass, checks
}
