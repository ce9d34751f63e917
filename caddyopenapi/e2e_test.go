package caddyopenapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddyopenapi"
	_ "github.com/apigate/gateway/dashboard"
	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

const e2eSecret = "caddyopenapi-e2e-secret-0123456789abcdef0123456789"

var (
	portsOnce sync.Once
	adminPort int
)

// globals is the global options block of a test config: the test
// binary's admin port, free HTTP and HTTPS ports, a short grace period,
// and extra options.
func globals(t testing.TB, extra string) string {
	return fmt.Sprintf("{\n\tadmin localhost:%d\n\thttp_port %d\n\thttps_port %d\n\tgrace_period 1ms\n%s}\n",
		admin(t), freePort(t), freePort(t), extra)
}

// auditSink is the audit option of a test config, to a file.
func auditSink(file string) string { return "\taudit {\n\t\tsink file " + file + "\n\t}\n" }

// freePort returns a port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// admin returns the test binary's admin port (one for every test: the
// Caddy inside the binary keeps its admin endpoint).
func admin(t testing.TB) int {
	portsOnce.Do(func() { adminPort = freePort(t) })
	return adminPort
}

func token(t testing.TB, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "scope": scope, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(e2eSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// copySpec copies the test documents into a directory of the test's own,
// so that the summary (kept per document path) counts this test only.
func copySpec(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"orders.yaml", "schemas.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "orders.yaml")
}

// upstream answers as the orders service would; order 13 is broken (a
// negative price) and order 14 answers a status the document does not
// declare.
func upstream(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/v1/orders":
			io.WriteString(w, `[{"id":1,"items":[{"sku":"ABC-1","price":3}]}]`)
		case r.Method == "POST" && r.URL.Path == "/v1/orders":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Location", "/v1/orders/2")
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"id":2,"items":%s}`, strings.TrimSuffix(strings.TrimPrefix(string(b), `{"items":`), "}"))
		case r.URL.Path == "/v1/orders/13":
			io.WriteString(w, `{"id":13,"items":[{"sku":"ABC-1","price":-3}]}`)
		case r.URL.Path == "/v1/orders/14":
			w.WriteHeader(418)
		default:
			io.WriteString(w, `{"id":7,"items":[],"status":"open"}`)
		}
	}))
	t.Cleanup(up.Close)
	return strings.TrimPrefix(up.URL, "http://")
}

// TestRefusals runs the handler in the gateway's chain (audit, jwt_auth,
// openapi, reverse_proxy to a real upstream) on both request paths and
// compares what clients and the audit trail see: every kind of refusal
// with its status, problem+json body and audit event, the same refusals
// restyled by handle_errors, and what passes.
func TestRefusals(t *testing.T) {
	pathtest.Run(t, testRefusals)
}

func testRefusals(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	t.Setenv("OPENAPI_TEST_SECRET", e2eSecret)
	spec := copySpec(t)
	up := upstream(t)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	plain, styled := freePort(t), freePort(t)
	site := func(port int, extra string) string {
		return fmt.Sprintf(`
http://127.0.0.1:%d {
	route /v1/* {
		audit
		jwt_auth {
			hmac_secret {env.OPENAPI_TEST_SECRET}
			optional
		}
		openapi {
			spec %s
			validate request
			validate response
			undeclared reject
			enforce_security
		}
		reverse_proxy %s
	}
%s
}
`, port, spec, up, extra)
	}
	config := globals(t, auditSink(auditFile)) + site(plain, "") + site(styled, `
	handle_errors {
		header Content-Type text/plain
		respond "styled {http.error.status_code}: {http.error.message} at {http.openapi.location}"
	}`)
	p.Load(t, admin(t), config, "srv0", "srv1")

	read, write := token(t, "orders:read"), token(t, "orders:read orders:write")
	cases := []struct {
		name, method, path, token, ctype, body string
		header                                 [2]string
		status                                 int
		location, keyword                      string // the first violation; "" for none
		reason                                 string
	}{
		{name: "valid list", method: "GET", path: "/v1/orders?limit=10&status=open,shipped", token: read, status: 200},
		{name: "query above maximum", method: "GET", path: "/v1/orders?limit=500", token: read, status: 400, location: "query.limit", keyword: "maximum", reason: "invalid request"},
		{name: "query item not in enum", method: "GET", path: "/v1/orders?status=open,lost", token: read, status: 400, location: "query.status/1", keyword: "enum", reason: "invalid request"},
		{name: "header not echoed", method: "GET", path: "/v1/orders", token: read, header: [2]string{"X-Request-Id", "s3cr3t-value-never-echoed"}, status: 400, location: "header.X-Request-Id", keyword: "format", reason: "invalid request"},
		{name: "no identity", method: "GET", path: "/v1/orders", status: 401, location: "security", keyword: "security", reason: "missing identity"},
		{name: "missing scope", method: "POST", path: "/v1/orders", token: read, ctype: "application/json", body: `{"items":[{"sku":"ABC-1","price":1}]}`, status: 403, location: "security", keyword: "scopes", reason: "missing scope"},
		{name: "body below minimum", method: "POST", path: "/v1/orders", token: write, ctype: "application/json", body: `{"items":[{"sku":"ABC-1","price":-1}]}`, status: 400, location: "body/items/0/price", keyword: "minimum", reason: "invalid request"},
		{name: "body property not allowed", method: "POST", path: "/v1/orders", token: write, ctype: "application/json", body: `{"items":[{"sku":"ABC-1","price":1}],"coupon":"x"}`, status: 400, location: "body/coupon", keyword: "additionalProperties", reason: "invalid request"},
		{name: "body not JSON", method: "POST", path: "/v1/orders", token: write, ctype: "application/json", body: `{"items":`, status: 400, location: "body", keyword: "json", reason: "invalid request"},
		{name: "undeclared content type", method: "POST", path: "/v1/orders", token: write, ctype: "text/plain", body: `hello`, status: 415, location: "header.Content-Type", keyword: "content-type", reason: "unsupported media type"},
		{name: "valid create", method: "POST", path: "/v1/orders", token: write, ctype: "application/json; charset=utf-8", body: `{"items":[{"sku":"ABC-1","price":1}]}`, status: 201},
		{name: "path parameter type", method: "GET", path: "/v1/orders/abc", status: 400, location: "path.id", keyword: "type", reason: "invalid request"},
		{name: "anonymous operation", method: "GET", path: "/v1/orders/7", status: 200},
		{name: "undeclared path", method: "GET", path: "/v1/customers", token: read, status: 404, location: "path", keyword: "paths", reason: "undeclared path"},
		{name: "undeclared method", method: "PUT", path: "/v1/orders", token: read, status: 405, location: "method", keyword: "methods", reason: "undeclared method"},
		{name: "response body invalid", method: "GET", path: "/v1/orders/13", status: 502, location: "response.body/items/0/price", keyword: "minimum", reason: "invalid response"},
		{name: "response status undeclared", method: "GET", path: "/v1/orders/14", status: 502, location: "response.status", keyword: "responses", reason: "invalid response"},
	}
	for _, port := range []int{plain, styled} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%d", tc.name, map[int]int{plain: 0, styled: 1}[port]), func(t *testing.T) {
				req, err := http.NewRequest(tc.method, fmt.Sprintf("http://127.0.0.1:%d%s", port, tc.path), strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				if tc.ctype != "" {
					req.Header.Set("Content-Type", tc.ctype)
				}
				if tc.header[0] != "" {
					req.Header.Set(tc.header[0], tc.header[1])
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(b), fmt.Sprint(port), "PORT"))
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
				}
				if strings.Contains(string(b), "s3cr3t") {
					t.Errorf("the answer echoes a header value: %s", b)
				}
				if tc.location == "" {
					return
				}
				if port == styled {
					want := fmt.Sprintf("styled %d: %s at %s", tc.status, tc.reason, tc.location)
					if string(b) != want {
						t.Errorf("body %q, want handle_errors' %q", b, want)
					}
					return
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type %q", ct)
				}
				var prob caddyopenapi.Problem
				if err := json.Unmarshal(b, &prob); err != nil {
					t.Fatalf("body %s: %v", b, err)
				}
				if prob.Status != tc.status || prob.Type == "" || prob.Title == "" || len(prob.Errors) == 0 || prob.Instance != req.URL.EscapedPath() {
					t.Fatalf("problem %+v", prob)
				}
				if e := prob.Errors[0]; e.Location != tc.location || e.Keyword != tc.keyword || e.Message == "" {
					t.Errorf("first error %+v, want %s %s", e, tc.location, tc.keyword)
				}
				switch tc.status {
				case 401:
					if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="gateway"` {
						t.Errorf("WWW-Authenticate %q", got)
					}
				case 403:
					if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer error="insufficient_scope"`) {
						t.Errorf("WWW-Authenticate %q", got)
					}
				case 405:
					if got := resp.Header.Get("Allow"); got != "GET, POST" {
						t.Errorf("Allow %q", got)
					}
				}
			})
		}
	}
	events := pathtest.WaitEvents(t, auditFile, 2*len(cases))
	for i, ev := range events {
		rec.Add(p, fmt.Sprintf("event %d", i), pathtest.Event(ev, fmt.Sprint(plain), "PLAIN", fmt.Sprint(styled), "STYLED"))
	}
	for i, ev := range events[:len(cases)] {
		tc := cases[i]
		want := (*identity.OpenAPIViolation)(nil)
		if tc.location != "" {
			if ev.Decision != "deny" || ev.DecidedBy != "openapi" || ev.Reason != tc.reason {
				t.Errorf("%s: event decision %q decided_by %q reason %q", tc.name, ev.Decision, ev.DecidedBy, ev.Reason)
			}
			if ev.OpenAPIViolation == nil || ev.OpenAPIViolation.Location != tc.location || ev.OpenAPIViolation.Keyword != tc.keyword {
				t.Errorf("%s: openapi_violation %+v, want %s %s", tc.name, ev.OpenAPIViolation, tc.location, tc.keyword)
			}
			continue
		}
		if ev.OpenAPIViolation != want || ev.Decision != "allow" {
			t.Errorf("%s: event %+v", tc.name, ev)
		}
	}
}

// TestDryRun: with validate request dry_run and validate response
// dry_run, nothing is refused; each violation is in the audit trail
// (would_deny, openapi_violation) and in the summary at GET
// /gateway/openapi, per operation with the most common violation.
func TestDryRun(t *testing.T) {
	pathtest.Run(t, testDryRun)
}

func testDryRun(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	t.Setenv("OPENAPI_TEST_SECRET", e2eSecret)
	spec := copySpec(t)
	up := upstream(t)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	port := freePort(t)
	config := globals(t, auditSink(auditFile)) + fmt.Sprintf(`http://127.0.0.1:%d {
	route /v1/* {
		audit
		jwt_auth {
			hmac_secret {env.OPENAPI_TEST_SECRET}
			optional
		}
		openapi {
			spec %s
			validate request dry_run
			validate response dry_run
			undeclared reject
			enforce_security
		}
		reverse_proxy %s
	}
}
`, port, spec, up)
	p.Load(t, admin(t), config, "srv0")
	read := token(t, "orders:read")
	reqs := []struct{ method, path, tok string }{
		{"GET", "/v1/orders?limit=500", read},
		{"GET", "/v1/orders?limit=300", read},
		{"GET", "/v1/orders?limit=0", read},
		{"GET", "/v1/orders?limit=7", read},
		{"GET", "/v1/orders", ""},
		{"GET", "/v1/orders/13", ""},
		{"GET", "/v1/customers", ""},
	}
	for i, rq := range reqs {
		req, _ := http.NewRequest(rq.method, fmt.Sprintf("http://127.0.0.1:%d%s", port, rq.path), nil)
		if rq.tok != "" {
			req.Header.Set("Authorization", "Bearer "+rq.tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, fmt.Sprintf("response %d", i), pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
		if resp.StatusCode != 200 {
			t.Errorf("%s %s: status %d, want 200 (dry run refuses nothing): %s", rq.method, rq.path, resp.StatusCode, b)
		}
	}
	events := pathtest.WaitEvents(t, auditFile, len(reqs))
	wantViolations := []string{"query.limit maximum", "query.limit maximum", "query.limit minimum", "", "security security", "response.body/items/0/price minimum", "path paths"}
	for i, ev := range events {
		rec.Add(p, fmt.Sprintf("event %d", i), pathtest.Event(ev, fmt.Sprint(port), "PORT"))
		got := ""
		if ev.OpenAPIViolation != nil {
			got = ev.OpenAPIViolation.Location + " " + ev.OpenAPIViolation.Keyword
		}
		if got != wantViolations[i] {
			t.Errorf("event %d (%s): openapi_violation %q, want %q", i, ev.Path, got, wantViolations[i])
		}
		if wantViolations[i] != "" && (ev.Decision != "would_deny" || ev.DecidedBy != "openapi") {
			t.Errorf("event %d: decision %q decided_by %q, want would_deny by openapi", i, ev.Decision, ev.DecidedBy)
		}
	}

	// the summary, through the admin API as an operator reads it
	resp, err := http.Get(fmt.Sprintf("http://localhost:%d/gateway/openapi", admin(t)))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Specs []caddyopenapi.Summary `json:"specs"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var sum *caddyopenapi.Summary
	for i := range doc.Specs {
		if doc.Specs[i].Spec == spec {
			sum = &doc.Specs[i]
		}
	}
	if sum == nil {
		t.Fatalf("no summary of %s in %+v", spec, doc.Specs)
	}
	if sum.Request != "dry_run" || sum.Response != "dry_run" || sum.Title != "Orders" || sum.Version != "3.1.0" {
		t.Errorf("summary head %+v", sum)
	}
	ops := map[string]caddyopenapi.OperationSummary{}
	for _, op := range sum.Operations {
		ops[op.Operation] = op
	}
	list := ops["listOrders"]
	if list.Requests != 5 || list.WouldRefuse != 4 || list.Violations != 4 || list.Refused != 0 {
		t.Errorf("listOrders %+v, want 5 requests, 4 would be refused", list)
	}
	if mc := list.MostCommon; mc == nil || mc.Location != "query.limit" || mc.Keyword != "maximum" || mc.Count != 2 {
		t.Errorf("listOrders most common %+v", mc)
	}
	if get := ops["getOrder"]; get.Requests != 1 || get.ResponseViolations != 1 || get.WouldRefuse != 0 {
		t.Errorf("getOrder %+v, want 1 request with a response violation", get)
	}
	if u := sum.UndeclaredRequests; u.Requests != 1 || u.WouldRefuse != 1 {
		t.Errorf("undeclared %+v", u)
	}
	rec.Add(p, "summary", sum.Operations)
}

// TestHostileInput: a 100 MB body is refused with 413 before it is read,
// by request_body in front (by its Content-Length, or as the limit passes
// when it is chunked), and by the handler's own max_request_body without
// it; a body nested 100,000 deep is refused with 400. On both paths: the
// client still sending its 100 MB reads the 413 (the fast path closes as
// Go's server does, its write side first and the connection 500 ms later).
func TestHostileInput(t *testing.T) {
	pathtest.Run(t, testHostileInput)
}

// TestHostileNesting: a body nested 100,000 deep gets the same 400 on
// both paths.
func TestHostileNesting(t *testing.T) {
	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		spec := copySpec(t)
		port := freePort(t)
		p.Load(t, admin(t), globals(t, "")+fmt.Sprintf(`http://127.0.0.1:%d {
	route /v1/* {
		openapi {
			spec %s
		}
		reverse_proxy %s
	}
}
`, port, spec, upstream(t)), "srv0")
		body := `{"items":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/orders", port), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, "nested", pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
		if resp.StatusCode != 400 || !strings.Contains(string(b), "nested too deep") {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})
}

func testHostileInput(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	t.Setenv("OPENAPI_TEST_SECRET", e2eSecret)
	spec := copySpec(t)
	up := upstream(t)
	guarded, bare := freePort(t), freePort(t)
	config := globals(t, "") + fmt.Sprintf(`http://127.0.0.1:%d {
	route /v1/* {
		request_body {
			max_size 1MB
		}
		openapi {
			spec %s
		}
		reverse_proxy %s
	}
}
http://127.0.0.1:%d {
	route /v1/* {
		openapi {
			spec %s
		}
		reverse_proxy %s
	}
}
`, guarded, spec, up, bare, spec, up)
	p.Load(t, admin(t), config, "srv0", "srv1")
	const size = 100 << 20
	for _, tc := range []struct {
		name    string
		port    int
		chunked bool
		body    io.Reader
		status  int
	}{
		{"request_body, Content-Length", guarded, false, io.LimitReader(zeros{}, size), 413},
		{"request_body, chunked", guarded, true, io.LimitReader(zeros{}, size), 413},
		{"max_request_body, Content-Length", bare, false, io.LimitReader(zeros{}, size), 413},
		{"nested 100000 deep", bare, false, strings.NewReader(`{"items":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`), 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/v1/orders", tc.port), tc.body)
			req.Header.Set("Content-Type", "application/json")
			if !tc.chunked {
				if sr, ok := tc.body.(*strings.Reader); ok {
					req.ContentLength = int64(sr.Len())
				} else {
					req.ContentLength = size
				}
			}
			cr := &countingReader{r: tc.body}
			req.Body = io.NopCloser(cr)
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rec.Add(p, p.Key(t), resp.StatusCode)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			// refused before it was read: the client got to send what the
			// connection's buffers took (about 4 MB on loopback), not the
			// 10 MiB max_request_body reads
			if tc.status == 413 && cr.n.Load() > 8<<20 {
				t.Errorf("the client sent %d bytes before the 413", cr.n.Load())
			}
			t.Logf("%d in %v after %d bytes sent", resp.StatusCode, time.Since(start), cr.n.Load())
		})
	}
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestDocumentReload: a change of the document, and of a file it
// references, is picked up without a config reload; a change that does
// not load keeps the document in use and shows in the summary.
func TestDocumentReload(t *testing.T) {
	spec := copySpec(t)
	up := upstream(t)
	port := freePort(t)
	caddytester.Load(t, admin(t), globals(t, "")+fmt.Sprintf(`http://127.0.0.1:%d {
	route /v1/* {
		openapi {
			spec %s
			check_interval 10ms
		}
		reverse_proxy %s
	}
}
`, port, spec, up))
	get := func() int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/orders/7?x=1", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for get() != want {
			if time.Now().After(deadline) {
				t.Fatalf("still not %d after 10s", want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if got := get(); got != 200 {
		t.Fatalf("status %d before the change", got)
	}
	// the path parameter's minimum moves from 1 to 10 in the document
	orig, _ := os.ReadFile(spec)
	changed := strings.Replace(string(orig), "schema: {type: integer, minimum: 1}", "schema: {type: integer, minimum: 10}", 1)
	if changed == string(orig) {
		t.Fatal("the test document changed shape")
	}
	if err := os.WriteFile(spec, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(400)

	// a broken file: the document in use stays, the summary says why
	if err := os.WriteFile(spec, []byte(changed+"\npaths: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var loadErr string
		for _, s := range caddyopenapi.Snapshot() {
			if s.Spec == spec {
				loadErr = s.LoadError
			}
		}
		if strings.Contains(loadErr, "duplicate key") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no load error in the summary after 10s (%q)", loadErr)
		}
		get()
		time.Sleep(20 * time.Millisecond)
	}
	if got := get(); got != 400 {
		t.Errorf("status %d after a broken change, want the last good document's 400", got)
	}
	// back to the original
	if err := os.WriteFile(spec, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(200)

	// a file the document $refs changes: an item's price must now be at
	// least 50, so an order that was created is refused
	post := func() int {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/orders", port), "application/json",
			strings.NewReader(`{"items":[{"sku":"ABC-1","price":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(); got != 201 {
		t.Fatalf("POST status %d before the referenced file changed", got)
	}
	schemas := filepath.Join(filepath.Dir(spec), "schemas.yaml")
	origSchemas, _ := os.ReadFile(schemas)
	changedSchemas := strings.Replace(string(origSchemas), "price: {type: number, minimum: 0}", "price: {type: number, minimum: 50}", 1)
	if changedSchemas == string(origSchemas) {
		t.Fatal("the test schemas changed shape")
	}
	if err := os.WriteFile(schemas, []byte(changedSchemas), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for post() != 400 {
		if time.Now().After(deadline) {
			t.Fatal("a change of the referenced file not used after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
