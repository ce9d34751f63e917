package caddyopenapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// The bench document (testdata/bench/api.yaml) has an operation whose body
// is an object of 20 properties of every kind (the goal: a 1 KB
// body against a 20-property schema), and operations without a body;
// testdata/bench/body.json is a valid body of about 1 KB. libcompare
// measures the other libraries on the same two files.
func benchBody(b *testing.B) []byte {
	body, err := os.ReadFile("testdata/bench/body.json")
	if err != nil {
		b.Fatal(err)
	}
	return bytes.TrimSpace(body)
}

// benchCheck measures the request checks of one request, and reports the
// 99th percentile of the time one takes (p99-ns) beside Go's average.
func benchCheck(b *testing.B, method, target string, body []byte) {
	s, err := Load("testdata/bench/api.yaml", "", "")
	if err != nil {
		b.Fatal(err)
	}
	h := &OpenAPI{MaxRequestBody: 1 << 20}
	r := httptest.NewRequest(method, target, nil)
	rd := bytes.NewReader(body)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	times := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if body != nil {
			rd.Reset(body)
			r.Body, r.ContentLength = readCloser{rd}, int64(len(body))
		}
		var pv pathValues
		_, op := s.match(r.Method, r.URL.Path, &pv)
		v, vs, err := h.checkRequest(r, op, &pv)
		if err != nil || v != verdictPass {
			b.Fatalf("verdict %d %v %v", v, vs, err)
		}
		if len(times) < cap(times) {
			times = append(times, time.Since(start))
		}
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	if len(times) > 0 {
		b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkBody1KB: a valid 1 KB JSON body against a 20-property schema
// (read, decoded, validated).
func BenchmarkBody1KB(b *testing.B) {
	body := benchBody(b)
	if len(body) < 900 || len(body) > 1100 {
		b.Fatalf("body of %d bytes", len(body))
	}
	benchCheck(b, http.MethodPost, "/items", body)
}

// BenchmarkNoBody: a request without a body or parameters.
func BenchmarkNoBody(b *testing.B) { benchCheck(b, http.MethodGet, "/items", nil) }

// BenchmarkPathAndQuery: a request without a body, with an integer path
// parameter and an integer query parameter.
func BenchmarkPathAndQuery(b *testing.B) {
	benchCheck(b, http.MethodGet, "/items/42?limit=10", nil)
}

// BenchmarkBodyValidate1KB: the same body's check alone, on bytes
// already read: the scan (I-JSON) and the compiled checks. A valid body
// costs no allocation.
func BenchmarkBodyValidate1KB(b *testing.B) {
	body := benchBody(b)
	s, err := Load("testdata/bench/api.yaml", "", "")
	if err != nil {
		b.Fatal(err)
	}
	var pv pathValues
	_, op := s.match(http.MethodPost, "/items", &pv)
	m := op.body.media[0]
	if m.checks == nil {
		b.Fatalf("the bench body's schema is not compiled: %s", m.fallback)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v, vs := m.checkBytes(body, "body", nil); v != verdictPass {
			b.Fatalf("verdict %d %v", v, vs)
		}
	}
}

// everyParamRequest is a document with a path, query, header and cookie
// parameter, arrays and formats among them, and a valid request for it.
func everyParamRequest(tb testing.TB) (*Spec, *http.Request) {
	tb.Helper()
	s, err := Load(writeDoc(tb, "api.yaml", map[string]string{"api.yaml": `openapi: 3.1.0
info: {title: params, version: '1'}
paths:
  /orders/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: string, format: uuid}}
        - {name: limit, in: query, schema: {type: integer, minimum: 1, maximum: 100}}
        - {name: status, in: query, explode: false, schema: {type: array, items: {type: string, enum: [open, shipped]}}}
        - {name: X-Request-Id, in: header, required: true, schema: {type: string, pattern: '^[a-z0-9-]{8,64}$'}}
        - {name: session, in: cookie, required: true, schema: {type: string, minLength: 8}}
      responses: {'200': {description: ok}}
`}), "", "")
	if err != nil {
		tb.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/orders/6ba7b810-9dad-11d1-80b4-00c04fd430c8?limit=10&status=open,shipped", nil)
	r.Header.Set("X-Request-Id", "req-0123456789")
	r.Header.Set("Cookie", "theme=dark; session=0123abcd4567")
	return s, r
}

// BenchmarkEveryParamLocation: a valid request with a path, query,
// header and cookie parameter each, arrays and formats among them: no
// allocation (TestParamsNoAllocation).
func BenchmarkEveryParamLocation(b *testing.B) {
	s, r := everyParamRequest(b)
	h := &OpenAPI{MaxRequestBody: 1 << 20}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var pv pathValues
		_, op := s.match(r.Method, r.URL.Path, &pv)
		if v, vs, err := h.checkRequest(r, op, &pv); err != nil || v != verdictPass {
			b.Fatalf("verdict %d %v %v", v, vs, err)
		}
	}
}

// TestParamsNoAllocation: matching a valid request and checking its
// path, query, header and cookie parameters allocates nothing (issue 44
// item 3), for everyParamRequest and the bench's GET with a path and a
// query parameter (gw-fast-openapi-query).
func TestParamsNoAllocation(t *testing.T) {
	s, r := everyParamRequest(t)
	bench, err := Load("../bench/configs/openapi.yaml", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    *Spec
		r    *http.Request
	}{
		{"every location", s, r},
		{"bench path and query", bench, httptest.NewRequest(http.MethodGet, "/items/1?fields=name,price", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &OpenAPI{MaxRequestBody: 1 << 20}
			check := func() {
				var pv pathValues
				_, op := tc.s.match(tc.r.Method, tc.r.URL.Path, &pv)
				if v, vs, err := h.checkRequest(tc.r, op, &pv); err != nil || v != verdictPass {
					t.Fatalf("verdict %d %v %v", v, vs, err)
				}
			}
			if n := testing.AllocsPerRun(100, check); n != 0 {
				t.Errorf("%v allocations for a valid request", n)
			}
		})
	}
}

// TestBenchDocument: the bench's openapi rows (bench/configs/openapi.yaml,
// bench/README.md) measure what they say: the 982-byte POST of
// gw-fast-openapi-body is valid and checked by the compiled validator
// (no library fallback) without allocation, and the GETs of
// gw-fast-openapi and gw-fast-openapi-query pass their parameter checks.
func TestBenchDocument(t *testing.T) {
	s, err := Load("../bench/configs/openapi.yaml", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.LibraryChecks) != 0 {
		t.Fatalf("the bench document leaves parts to the library: %+v", s.LibraryChecks)
	}
	body, err := os.ReadFile("../bench/configs/post-body.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(body) < 900 || len(body) > 1100 {
		t.Fatalf("bench body of %d bytes, want about 1 KB", len(body))
	}
	h := &OpenAPI{MaxRequestBody: 1 << 20}
	for _, target := range []string{"POST /orders", "GET /items/1", "GET /items/1?fields=name,price"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		if method == http.MethodPost {
			r.Header.Set("Content-Type", "application/json")
			r.Body, r.ContentLength = readCloser{bytes.NewReader(body)}, int64(len(body))
		}
		var pv pathValues
		_, op := s.match(r.Method, r.URL.Path, &pv)
		if op == nil {
			t.Fatalf("%s: no operation", target)
		}
		if v, vs, err := h.checkRequest(r, op, &pv); err != nil || v != verdictPass {
			t.Fatalf("%s: verdict %d %+v %v", target, v, vs, err)
		}
		if method != http.MethodPost {
			continue
		}
		m := op.body.media[0]
		if m.checks == nil {
			t.Fatalf("%s: the body's schema is not compiled: %s", target, m.fallback)
		}
		// the bench body is accepted on its first read (onepass.go), not
		// left to the tape
		if sc := getScanner(); !m.onePass || !sc.accepts(m.checks, body) {
			t.Errorf("%s: the one-pass check does not accept the body (covered: %v)", target, m.onePass)
		}
		if n := testing.AllocsPerRun(50, func() { m.checkBytes(body, "body", nil) }); n != 0 {
			t.Errorf("%s: %v allocations for a valid body", target, n)
		}
		// the body the row sends is not one every schema accepts: a
		// wrong format is refused
		bad := bytes.Replace(body, []byte(`"client_ip":"203.0.113.42"`), []byte(`"client_ip":"203.0.113.420"`), 1)
		if v, _ := m.checkBytes(bad, "body", nil); v == verdictPass {
			t.Errorf("%s: an invalid ipv4 passed", target)
		}
	}
}

// BenchmarkBenchDocumentBody: the check of the bench's 982-byte POST
// (gw-fast-openapi-body) on bytes already read: the in-process part of
// that row's cost.
func BenchmarkBenchDocumentBody(b *testing.B) {
	s, err := Load("../bench/configs/openapi.yaml", "", "")
	if err != nil {
		b.Fatal(err)
	}
	body, err := os.ReadFile("../bench/configs/post-body.json")
	if err != nil {
		b.Fatal(err)
	}
	var pv pathValues
	_, op := s.match(http.MethodPost, "/orders", &pv)
	m := op.body.media[0]
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if v, vs := m.checkBytes(body, "body", nil); v != verdictPass {
			b.Fatalf("verdict %d %v", v, vs)
		}
	}
}

// BenchmarkParamServeHTTP is the whole handler (ServeHTTP: the
// document's current version, the operation's match, its counters and
// the parameter checks) on the bench's GET with a path and a query
// parameter (gw-fast-openapi-query), passed to a handler that does
// nothing: the handler's share of that row's request.
func BenchmarkParamServeHTTP(b *testing.B) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &OpenAPI{Spec: "../bench/configs/openapi.yaml", Undeclared: UndeclaredReject}
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer h.Cleanup()
	r := httptest.NewRequest(http.MethodGet, "/items/1?fields=name,price", nil)
	w := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	b.ReportAllocs()
	for b.Loop() {
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
	}
	if w.Code != http.StatusOK || h.summary.other.requests.Load() != 0 {
		b.Fatalf("refused or undeclared: %d", w.Code)
	}
}
