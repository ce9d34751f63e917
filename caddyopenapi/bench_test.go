package caddyopenapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"
)

// benchDoc has an operation whose body is an object of 20 properties of
// every kind (the goal: a 1 KB body against a 20-property
// schema), and operations without a body.
func benchDoc() string {
	var props strings.Builder
	for i := 0; i < 20; i++ {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&props, "                s%d: {type: string, minLength: 1, maxLength: 128}\n", i)
		case 1:
			fmt.Fprintf(&props, "                n%d: {type: integer, minimum: 0, maximum: 1000000}\n", i)
		case 2:
			fmt.Fprintf(&props, "                e%d: {type: string, enum: [red, green, blue]}\n", i)
		case 3:
			fmt.Fprintf(&props, "                a%d: {type: array, maxItems: 10, items: {type: number, minimum: 0}}\n", i)
		case 4:
			fmt.Fprintf(&props, "                o%d: {type: object, required: [id], properties: {id: {type: string, pattern: '^[a-z0-9-]+$'}, ok: {type: boolean}}}\n", i)
		}
	}
	return `openapi: 3.1.0
info: {title: bench, version: '1'}
paths:
  /items:
    get:
      responses: {'200': {description: ok}}
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              additionalProperties: false
              required: [s0, n1]
              properties:
` + props.String() + `      responses: {'200': {description: ok}}
  /items/{id}:
    get:
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer, minimum: 1}}
        - {name: limit, in: query, schema: {type: integer, maximum: 100}}
      responses: {'200': {description: ok}}
`
}

// benchBody is a valid body of about 1 KB.
func benchBody() []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < 20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, `"s%d":"a string value of some length for a benchmark of the request checks of the gateway, value no %d"`, i, i)
		case 1:
			fmt.Fprintf(&b, `"n%d":%d`, i, 1000+i)
		case 2:
			fmt.Fprintf(&b, `"e%d":"green"`, i)
		case 3:
			fmt.Fprintf(&b, `"a%d":[1.5,2,3.25,4,5,6.75,7,8,9.5,10]`, i)
		case 4:
			fmt.Fprintf(&b, `"o%d":{"id":"item-%d-abcdefghijklmnopqrstuvwxyz-0123456789","ok":true}`, i, i)
		}
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// benchCheck measures the request checks of one request, and reports the
// 99th percentile of the time one takes (p99-ns) beside Go's average.
func benchCheck(b *testing.B, method, target string, body []byte) {
	s, err := Load(writeDoc(b, "api.yaml", map[string]string{"api.yaml": benchDoc()}), "", "")
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
	body := benchBody()
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
