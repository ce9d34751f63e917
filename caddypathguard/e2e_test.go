package caddypathguard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

const secret = "path-guard-test-secret-0123456789abcdef"

// ports are this package's: the admin API's, the gateway site's, the
// metrics site's and Caddy's http and https ports. Chosen free once for
// the test binary (the admin API of its Caddy stays where the first
// config put it).
var ports = struct {
	once                              sync.Once
	admin, site, metrics, http, https int
}{}

func freePorts(t *testing.T) {
	ports.once.Do(func() {
		p := freeport.Ports(t, 5)
		ports.admin, ports.site, ports.metrics, ports.http, ports.https = p[0], p[1], p[2], p[3], p[4]
	})
}

// echo is the upstream: it answers 200 "echo <request-target>" and keeps
// what it received for each request (by its X-Case header).
type echo struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  map[string]string
	auth map[string]bool
}

func newEcho(t *testing.T) *echo {
	e := &echo{got: map[string]string{}, auth: map[string]bool{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.got[r.Header.Get("X-Case")] = r.RequestURI
		e.auth[r.Header.Get("X-Case")] = r.Header.Get("Authorization") != ""
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "echo "+r.RequestURI)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// received returns what the upstream received for a case, and whether
// it did.
func (e *echo) received(id string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.got[id]
	return v, ok
}

// site is the gateway's config: a protected /admin/* route, an open
// /public/* route, 404 for the rest, every request audited; guard is the
// path_guard line ("" for none); errors is a handle_errors block or "".
func site(upstream, auditFile, guard, errors string) string {
	return fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port %[2]d
	https_port %[3]d
	grace_period 1ms
	servers :%[4]d {
		name gw
	}
	audit {
		sink file %[5]s
	}
}

http://127.0.0.1:%[4]d {
	audit
	%[6]s
	handle /admin/* {
		jwt_auth {
			hmac_secret %[7]s
		}
		reverse_proxy %[8]s
	}
	handle /public/* {
		reverse_proxy %[8]s
	}
	handle {
		header Content-Type application/json
		respond `+"`"+`{"error":"no_route"}`+"`"+` 404
	}
%[9]s
}

# the metrics of this config (a server of its own, on Caddy's path)
http://127.0.0.1:%[10]d {
	metrics
}
`, ports.admin, ports.http, ports.https, ports.site, auditFile, guard, secret,
		strings.TrimPrefix(upstream, "http://"), errors, ports.metrics)
}

func token(t *testing.T) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawGet sends target as written, on a connection of its own (Go's
// client would clean it), and returns the response with its body.
func rawGet(t *testing.T, port int, target, id, bearer string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Case: " + id + "\r\nConnection: close\r\n"
	if bearer != "" {
		req += "Authorization: Bearer " + bearer + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %q: %v", target, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// corpus are request targets an attacker tries against the site, to reach
// /admin/x through the open /public/* route (or past the matchers).
var corpus = []string{
	// dot segments, plain, encoded in every case, mixed
	"/public/../admin/x",
	"/public/./../admin/x",
	"/public/x/../../admin/x",
	"/public/%2e%2e/admin/x",
	"/public/%2E%2E/admin/x",
	"/public/.%2e/admin/x",
	"/public/%2e./admin/x",
	"/public/%2E%2e/admin/x",
	"/public/%2e/../admin/x",
	"/public/x/..",
	"/public/.../admin/x",
	"/public/..%20/admin/x",
	// double and triple encoding
	"/public/%252e%252e/admin/x",
	"/public/%252E%252E/admin/x",
	"/public/.%252e/admin/x",
	"/public/%25252e%25252e/admin/x",
	// servlet path parameters
	"/public/..;/admin/x",
	"/public/..;jsessionid=1/admin/x",
	"/public/.;/..;/admin/x",
	"/public/%2e%2e;/admin/x",
	"/public/..%3b/admin/x",
	"/public/..%3B/admin/x",
	"/public/..%253b/admin/x",
	"/;/admin/x",
	"/;x=1/admin/x",
	// backslashes
	"/public/..\\admin/x",
	"/public\\..\\admin\\x",
	"/public/..%5cadmin/x",
	"/public/..%5Cadmin/x",
	"/public/%2e%2e%5cadmin/x",
	"/public/..%255cadmin/x",
	"/public/..%255Cadmin/x",
	// encoded slashes
	"/public/..%2fadmin/x",
	"/public/..%2Fadmin/x",
	"/public%2f..%2fadmin/x",
	"/public/%2e%2e%2fadmin/x",
	"/public/..%252fadmin/x",
	"/public/..%252Fadmin/x",
	// NUL and control bytes
	"/public/..%00/admin/x",
	"/public/x%00/../../admin/x",
	"/public/..%2500/admin/x",
	"/public/..%0a/admin/x",
	"/public/..%0d%0a/admin/x",
	"/public/..%09/admin/x",
	"/public/..%7f/admin/x",
	// overlong and invalid UTF-8
	"/public/%c0%ae%c0%ae/admin/x",
	"/public/%C0%AE%C0%AE/admin/x",
	"/public/..%c0%afadmin/x",
	"/public/..%C0%AFadmin/x",
	"/public/..%c1%9cadmin/x",
	"/public/%e0%80%ae%e0%80%ae/admin/x",
	"/public/%25c0%25ae%25c0%25ae/admin/x",
	"/public/..%ff/admin/x",
	// Unicode look-alikes
	"/public/%ef%bc%8e%ef%bc%8e/admin/x",
	"/public/..%ef%bc%8fadmin/x",
	"/public/..%EF%BC%BCadmin/x",
	"/public/..%e2%88%95admin/x",
	// merged slashes
	"//admin/x",
	"/public//..//admin/x",
	"///admin//x",
	"/public/..//admin/x",
	// case
	"/ADMIN/x",
	"/public/../Admin/x",
	// IIS %u (Go refuses it)
	"/public/%u002e%u002e/admin/x",
	// absolute form
	"http://127.0.0.1/public/..;/admin/x",
	"http://127.0.0.1/public/%2e%2e/admin/x",
}

// issueBypasses are the targets that reached the upstream without the
// protected route's duties on both request paths before path_guard
// (issue 35): the "off" run must find each of them, or the oracle is
// blind.
var issueBypasses = []string{
	"/public/..;/admin/x",
	"/public/..\\admin/x",
	"/public/%252e%252e/admin/x",
	"/public/..%00/admin/x",
}

// notRefused are the corpus targets each mode does not refuse: the
// matchers judge them as the upstream will read them (merged slashes,
// letter case; normalize resolves dot segments first), or Go's server
// refuses them itself (%u). Every other target must get 400
// ambiguous_path.
var notRefused = map[string][]string{
	"reject": {"//admin/x", "///admin//x", "/ADMIN/x", "/public/%u002e%u002e/admin/x"},
	"normalize": {"//admin/x", "///admin//x", "/ADMIN/x", "/public/%u002e%u002e/admin/x",
		"/public/../admin/x", "/public/./../admin/x", "/public/x/../../admin/x",
		"/public/%2e%2e/admin/x", "/public/%2E%2E/admin/x", "/public/.%2e/admin/x", "/public/%2e./admin/x",
		"/public/%2E%2e/admin/x", "/public/%2e/../admin/x", "/public/x/..",
		"/public//..//admin/x", "/public/..//admin/x", "/public/../Admin/x",
		"http://127.0.0.1/public/%2e%2e/admin/x"},
}

// readsAsAdmin returns the name of a backend view that resolves what
// the upstream received to the protected path, or "".
func readsAsAdmin(received string) string {
	p, _, _ := strings.Cut(received, "?")
	if strings.HasPrefix(p, "http://") { // (never sent so, but an upstream reads that too)
		if i := strings.IndexByte(p[len("http://"):], '/'); i >= 0 {
			p = p[len("http://")+i:]
		}
	}
	for _, b := range backendViews {
		if v := strings.ToLower(b.view(p)); v == "/admin" || strings.HasPrefix(v, "/admin/") {
			return b.name
		}
	}
	return ""
}

// TestTraversalCorpus sends the corpus, without a token, to the site
// without path_guard, with `path_guard reject` and with `path_guard
// normalize`, on both request paths, and checks what the echo upstream
// received:
//   - without path_guard, the oracle (backend views) finds the bypasses
//     of the issue, so it can find them;
//   - with path_guard, no target reaches the upstream in a form that a
//     backend view resolves to /admin; reject mode forwards what it
//     passes byte for byte as without it, and answers every refusal
//     with 400 ambiguous_path, audited with decided_by path_guard.
//
// Both paths must answer alike: each response, what the upstream
// received, the audit events and the metric's growth.
func TestTraversalCorpus(t *testing.T) {
	pathtest.Run(t, testTraversalCorpus)
}

func testTraversalCorpus(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	freePorts(t)
	up := newEcho(t)
	forwardedOff := map[string]string{} // target -> what the upstream received without path_guard
	for _, mode := range []string{"off", "reject", "normalize"} {
		t.Run(mode, func(t *testing.T) {
			auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
			guard := "path_guard " + mode
			if mode == "off" {
				guard = ""
			}
			p.Load(t, ports.admin, site(up.srv.URL, auditFile, guard, ""), "gw")
			before := metricsOf(t)
			var bypasses []string
			refused := 0
			for i, target := range corpus {
				id := fmt.Sprintf("%s-%s-%d", p.Name, mode, i)
				resp, body := rawGet(t, ports.site, target, id, "")
				got, reached := up.received(id)
				answer := pathtest.Resp(resp.StatusCode, resp.Header, strings.ReplaceAll(body, id, "<id>"))
				if _, err := url.ParseRequestURI(target); err != nil {
					// the server refuses a target it cannot parse before any
					// handler runs: net/http with its own text/plain, the
					// fast path with problem+json (issue 46). The paths
					// agree on the status; the body is each server's.
					if p.Fast && resp.Header.Get("Content-Type") != "application/problem+json" {
						t.Errorf("%q: the fast path refused it as %q, want application/problem+json", target, resp.Header.Get("Content-Type"))
					}
					answer = pathtest.Response{Status: resp.StatusCode, Body: "(the server's refusal)"}
				}
				rec.Add(p, mode+" "+target, map[string]any{
					"response": answer,
					"upstream": got,
				})
				if reached {
					if view := readsAsAdmin(got); view != "" {
						bypasses = append(bypasses, fmt.Sprintf("%q reached the upstream as %q, which a %s backend serves as /admin", target, got, view))
					}
				}
				switch mode {
				case "off":
					if reached {
						forwardedOff[target] = got
					}
				case "reject":
					if reached && got != forwardedOff[target] {
						t.Errorf("%q: reject mode forwarded %q, without path_guard %q", target, got, forwardedOff[target])
					}
				}
				isRefused := resp.StatusCode == 400 && strings.Contains(body, ErrorCode)
				if mode != "off" && isRefused == slices.Contains(notRefused[mode], target) {
					t.Errorf("%q: %d %q; refused by path_guard %s: %v, want %v", target, resp.StatusCode, body, mode, isRefused, !isRefused)
				}
				if mode != "off" && isRefused {
					refused++
					var b struct{ Type, Error, Reason string }
					if err := json.Unmarshal([]byte(body), &b); err != nil || b.Error != ErrorCode || b.Reason == "" || b.Type != "urn:apigate:problem:"+ErrorCode {
						t.Errorf("%q: body %q, want the contract's {\"error\":%q,\"reason\":...}", target, body, ErrorCode)
					}
				}
			}
			if mode == "off" {
				for _, target := range issueBypasses {
					got, ok := forwardedOff[target]
					if !ok || readsAsAdmin(got) == "" {
						t.Errorf("without path_guard, the oracle misses the issue's bypass %q (upstream received %q, %v)", target, got, ok)
					}
				}
				t.Logf("without path_guard: %d bypasses:\n%s", len(bypasses), strings.Join(bypasses, "\n"))
			} else if len(bypasses) > 0 {
				t.Errorf("path_guard %s: %d targets reached the upstream in a form a backend resolves to /admin:\n%s",
					mode, len(bypasses), strings.Join(bypasses, "\n"))
			}

			// audit: one event per request that reached the handlers (Go
			// refuses a target it cannot parse itself), the refusals
			// decided by path_guard
			want := 0
			for _, target := range corpus {
				if _, err := url.ParseRequestURI(target); err == nil {
					want++
				}
			}
			events := pathtest.WaitEvents(t, auditFile, want)
			if len(events) != want {
				t.Errorf("%d audit events, want %d", len(events), want)
			}
			denied := 0
			for i, ev := range events {
				rec.Add(p, fmt.Sprintf("%s event %d", mode, i), pathtest.Event(ev))
				if ev.DecidedBy == "path_guard" {
					denied++
					if ev.Status != 400 || ev.Decision != caddyaudit.DecisionDeny || ev.Reason == "" {
						t.Errorf("event %d: status %d, decision %q, reason %q; want 400, deny and a reason", i, ev.Status, ev.Decision, ev.Reason)
					}
				}
			}
			if denied != refused {
				t.Errorf("%d events decided by path_guard, %d refusals", denied, refused)
			}
			grew := pathtest.Grew(before, metricsOf(t))
			rec.Add(p, mode+" metrics", grew)
			if mode != "off" && grew[`gateway_path_guard_total{action="rejected"}`] != float64(refused) {
				t.Errorf("gateway_path_guard_total{action=\"rejected\"} grew by %v, %d refusals (%v)", grew[`gateway_path_guard_total{action="rejected"}`], refused, grew)
			}
			t.Logf("path_guard %s: %d of %d targets refused", mode, refused, len(corpus))
		})
	}
}

// metricsOf scrapes the metrics site (this config's registry).
func metricsOf(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports.metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return pathtest.Series(string(b), "gateway_path_guard_total{")
}

// legit are real API paths, each with what the upstream must receive
// in normalize mode when that differs from what it receives without
// path_guard.
var legit = []struct{ target, normalized string }{
	{"/public/orders/12345/items", ""},
	{"/public/files/my%20file.txt", ""},
	{"/public/a+b/c%2Bd", ""},
	{"/public/projects/group%2Fproject/issues", ""},
	{"/public/projects/group%2fsub%2fproject", ""},
	{"/public/caf%C3%A9/%E2%82%AC/%F0%9F%98%80", ""},
	{"/public/caf\xc3\xa9", ""},
	{"/public/urn%3Aisbn%3A0451450523/reviews", ""},
	{"/public/v1.2/app.3f2a1b.min.js", ""},
	{"/public/.well-known/openid-configuration", ""},
	{"/public/shop/cart;jsessionid=ABC123", ""},
	{"/public/discount/100%25", ""},
	{"/public/odd/%2541", ""},
	{"/public/a'b(c)*!$&=:@,", ""},
	{"/public/dir/", ""},
	{"/public/search?q=..%2F..%2Fetc%00&next=/../admin&sort=a%20b", ""},
	{"/public/long?" + strings.Repeat("filter=a%20b&", 300), ""},
	{"/public/%7Euser/%41bc", "/public/~user/Abc"},
	{"/public//double//slash", "/public/double/slash"},
}

// TestLegitPathsUnchanged: real API paths reach the upstream as without
// path_guard: byte for byte in reject mode, and in normalize mode but
// for the normalizations it makes (unreserved characters decoded,
// slashes merged); keep_encoded_slash keeps %2F in a segment, and
// without it reject mode refuses one. Same on both request paths.
func TestLegitPathsUnchanged(t *testing.T) {
	pathtest.Run(t, testLegitPathsUnchanged)
}

func testLegitPathsUnchanged(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	freePorts(t)
	up := newEcho(t)
	bearer := token(t)
	off := map[string]string{}
	for _, mode := range []string{"off", "reject", "normalize"} {
		t.Run(mode, func(t *testing.T) {
			guard := "path_guard " + mode + " {\n\t\tkeep_encoded_slash\n\t}"
			if mode == "off" {
				guard = ""
			}
			p.Load(t, ports.admin, site(up.srv.URL, filepath.Join(t.TempDir(), "audit.jsonl"), guard, ""), "gw")
			targets := append([]string{"/admin/orders/1?x=%2F"}, func() (out []string) {
				for _, l := range legit {
					out = append(out, l.target)
				}
				return out
			}()...)
			for i, target := range targets {
				id := fmt.Sprintf("%s-legit-%s-%d", p.Name, mode, i)
				resp, body := rawGet(t, ports.site, target, id, bearer)
				got, _ := up.received(id)
				rec.Add(p, mode+" "+target, map[string]any{"status": resp.StatusCode, "upstream": got})
				if resp.StatusCode != 200 {
					t.Errorf("%q: status %d (%s)", target, resp.StatusCode, body)
					continue
				}
				want := off[target]
				if mode == "off" {
					off[target] = got
					continue
				}
				if mode == "normalize" && i > 0 && legit[i-1].normalized != "" {
					want = legit[i-1].normalized
				}
				if got != want {
					t.Errorf("%q: the upstream received %q, want %q", target, got, want)
				}
			}
		})
	}
	t.Run("encoded slash without keep_encoded_slash", func(t *testing.T) {
		p.Load(t, ports.admin, site(up.srv.URL, filepath.Join(t.TempDir(), "audit.jsonl"), "path_guard", ""), "gw")
		resp, body := rawGet(t, ports.site, "/public/projects/group%2Fproject/issues", p.Name+"-slash", "")
		rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, body))
		if want := problemtest.Body(400, `{"error":"ambiguous_path","reason":"encoded slash"}`, "/public/projects/group%2Fproject/issues"); resp.StatusCode != 400 || body != want {
			t.Fatalf("%d %q, want 400 %q", resp.StatusCode, body, want)
		}
	})
}

// TestNormalizeForwards: normalize mode forwards the path the matchers
// saw, so the protected route's duties run for a target that resolves
// into it, and the upstream receives that path (URL and request line
// coherent), on both request paths.
func TestNormalizeForwards(t *testing.T) {
	pathtest.Run(t, testNormalizeForwards)
}

func testNormalizeForwards(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	freePorts(t)
	up := newEcho(t)
	bearer := token(t)
	p.Load(t, ports.admin, site(up.srv.URL, filepath.Join(t.TempDir(), "audit.jsonl"), "path_guard normalize", ""), "gw")
	for i, tc := range []struct {
		target, bearer string
		status         int
		upstream       string
	}{
		{"/public/%2e%2e/admin/x", "", 401, ""},
		{"/public/%2e%2e/admin/x", bearer, 200, "/admin/x"},
		{"/public/../admin/x?a=%2F..", bearer, 200, "/admin/x?a=%2F.."},
		{"/public/./a//b/../c", "", 200, "/public/a/c"},
		{"/public/x/%2E%2E/y%20z/", "", 200, "/public/y%20z/"},
		{"/public/x/%2E%2E/y%3Az", "", 200, "/public/y%3Az"},
		{"//public///%7e", "", 200, "/public/~"},
		{"/public/a/b/..", "", 200, "/public/a/"},
		{"/public/../x", "", 404, ""},
		{"http://127.0.0.1/public/%2e/q", "", 200, "/public/q"},
	} {
		id := fmt.Sprintf("%s-norm-%d", p.Name, i)
		resp, body := rawGet(t, ports.site, tc.target, id, tc.bearer)
		got, _ := up.received(id)
		rec.Add(p, fmt.Sprintf("%s (token %v)", tc.target, tc.bearer != ""), map[string]any{"status": resp.StatusCode, "upstream": got})
		if resp.StatusCode != tc.status || got != tc.upstream {
			t.Errorf("%q: %d, upstream received %q; want %d, %q (%s)", tc.target, resp.StatusCode, got, tc.status, tc.upstream, body)
		}
		if tc.status == 200 && body != "echo "+tc.upstream {
			t.Errorf("%q: body %q", tc.target, body)
		}
	}
}

// TestRefusalThroughErrorRoutes: path_guard refuses through the gateway's
// denial, so a site's handle_errors restyles its 400 (status and reason
// at hand), on both request paths.
func TestRefusalThroughErrorRoutes(t *testing.T) {
	pathtest.Run(t, testRefusalThroughErrorRoutes)
}

func testRefusalThroughErrorRoutes(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	freePorts(t)
	up := newEcho(t)
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	p.Load(t, ports.admin, site(up.srv.URL, auditFile, "path_guard", `
	handle_errors {
		header Content-Type text/plain
		respond "styled {http.error.status_code}: {http.error.message}"
	}`), "gw")
	resp, body := rawGet(t, ports.site, "/public/..;/admin/x", p.Name+"-styled", "")
	rec.Add(p, "response", pathtest.Resp(resp.StatusCode, resp.Header, body))
	if want := "styled 400: " + ReasonDotParams; resp.StatusCode != 400 || body != want {
		t.Fatalf("%d %q, want 400 %q", resp.StatusCode, body, want)
	}
	evs := pathtest.WaitEvents(t, auditFile, 1)
	rec.Add(p, "event", pathtest.Event(evs[0]))
	if ev := evs[0]; ev.DecidedBy != "path_guard" || ev.Reason != ReasonDotParams || ev.Status != 400 || ev.Path != "/public/..;/admin/x" {
		t.Fatalf("event %+v", ev)
	}
}
