package caddypermcache

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt" // jwt_auth
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

// Ports of this package (see the team brief): admin 2903, listeners 19300-19399.
const (
	e2eAdminPort = 2903
	e2eHTTPPort  = 19300
)

const e2eSecret = "permcache-e2e-secret-0123456789abcdef"

func e2eConfig(serviceURL, version string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
}

http://localhost:%d {
	route {
		jwt_auth {
			hmac_secret %s
			optional
		}
		permission {
			url %s
			timeout 30s
			route e2e
		}
		respond "%s {path}"
	}
}
`, e2eAdminPort, e2eHTTPPort, e2eHTTPPort+1, e2eHTTPPort, e2eSecret, serviceURL, version)
}

func e2eToken(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "roles": roles, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(e2eSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestE2EReloadKeepsCache runs the real jwt_auth and permission handlers in
// an in-process Caddy, against a real permission service, and reloads the
// config: the new config answers from the old config's cache.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body), and what the permission
// service received, between them.
func TestE2EReloadKeepsCache(t *testing.T) {
	t.Cleanup(func() {
		if t.Skipped() && os.Getenv("CI") != "" {
			t.Error("CI=true: the in-process Caddy did not start, so the end-to-end test could not run")
		}
	})
	pathtest.Run(t, testE2EReloadKeepsCache)
}

func testE2EReloadKeepsCache(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	svc := newPermService(t, nil) // a new URL: a cache of its own
	tester := p.Load(t, e2eAdminPort, e2eConfig(svc.URL+"/check", "v1"), "srv0")

	alice := e2eToken(t, "alice", "admin", "editor")
	get := func(path, token string, status int, body string) {
		t.Helper()
		req, err := http.NewRequest("GET", fmt.Sprintf("http://localhost:%d%s", e2eHTTPPort, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if status >= 400 {
			body = problemtest.Body(status, body, path)
		}
		resp, got := tester.AssertResponse(req, status, body)
		who := "anonymous"
		if token != "" {
			who = "alice"
		}
		rec.AddNext(p, "GET "+path+" "+who, pathtest.Resp(resp.StatusCode, resp.Header, got))
	}

	steps := []struct {
		name   string
		path   string
		token  string
		status int
		body   string
		calls  int64
	}{
		{"allow asks the service", "/allow/orders/7", alice, 200, "v1 /allow/orders/7", 1},
		{"allow is cached", "/allow/orders/7", alice, 200, "v1 /allow/orders/7", 1},
		{"deny asks the service", "/admin", alice, 403, deniedBody, 2},
		{"deny is cached", "/admin", alice, 403, deniedBody, 2},
		{"anonymous asks with an empty subject", "/allow/orders/7", "", 200, "v1 /allow/orders/7", 3},
	}
	for _, st := range steps {
		get(st.path, st.token, st.status, st.body)
		rec.Add(p, st.name+": service calls", svc.calls.Load())
		expectCalls(t, svc, st.calls)
	}
	wantFirst := CheckRequest{Subject: "alice", Roles: []string{"admin", "editor"}, Method: "GET", Host: "localhost", Path: "/allow/orders/7", Route: "e2e"}
	svc.mu.Lock()
	first, last := svc.reqs[0], svc.reqs[len(svc.reqs)-1]
	rec.Add(p, "the service's requests", svc.reqs)
	svc.mu.Unlock()
	if !reflect.DeepEqual(first, wantFirst) {
		t.Fatalf("service got %+v\nwant %+v", first, wantFirst)
	}
	if last.Subject != "" || len(last.Roles) != 0 {
		t.Fatalf("anonymous request sent %+v", last)
	}

	// reload: a changed config (the response) with the same permission settings
	p.Reload(t, e2eConfig(svc.URL+"/check", "v2"), "srv0")
	get("/allow/orders/7", alice, 200, "v2 /allow/orders/7")
	get("/admin", alice, 403, deniedBody)
	get("/allow/orders/7", "", 200, "v2 /allow/orders/7")
	rec.Add(p, "after the reload: service calls", svc.calls.Load())
	expectCalls(t, svc, 3)
	if !strings.HasPrefix(svc.URL, "http://127.0.0.1:") {
		t.Fatalf("permission service is not on loopback: %s", svc.URL)
	}
}

// TestE2EDryRun runs TestDryRun's and TestDecidedBy's cases in the real
// Caddy, behind audit and jwt_auth, against a real permission service
// that a case can take down: in dry run the service's deny and on_error
// deny let the request through and the audit event says would_deny, with
// the reason, decided_by and cache status; the same requests without dry
// run are denied (403, 503), and on_error allow lets them pass. Each case
// checks the denial series it grows (dry_run "true" or "false") and the
// dashboard's view (ReadStats).
//
// It runs on both request paths (Caddy's and the fast path) from one
// table and compares every response, audit event, metric and stats
// change between them.
func TestE2EDryRun(t *testing.T) {
	pathtest.Run(t, testE2EDryRun)
}

func testE2EDryRun(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	var down atomic.Bool
	svc := newPermService(t, func(w http.ResponseWriter, r *http.Request, req CheckRequest) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if !strings.Contains(req.Path, "/allow") {
			w.WriteHeader(http.StatusForbidden)
		}
	})
	trail := filepath.Join(t.TempDir(), "audit.jsonl")
	route := func(name, extra string) string {
		return fmt.Sprintf(`
	route /%[1]s/* {
		audit %[1]s
		jwt_auth {
			hmac_secret %[2]s
			optional
		}
		permission {
			url %[3]s/check
			timeout 30s
			route e2e-%[1]s
			%[4]s
		}
		respond "passed {path}"
	}`, name, e2eSecret, svc.URL, extra)
	}
	tester := p.Load(t, e2eAdminPort, fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
	audit {
		sink file %s {
			flush_interval 10ms
		}
	}
}

http://localhost:%d {%s%s%s
}
`, e2eAdminPort, e2eHTTPPort, e2eHTTPPort+1, trail, e2eHTTPPort,
		route("dry", "dry_run"), route("enforced", ""), route("lenient", "on_error allow")), "srv0")
	alice := e2eToken(t, "alice", "admin")

	const denials = "gateway_permission_denials_total{"
	for i, tc := range []struct {
		name, path string
		down       bool
		status     int
		body       string
		want       caddyaudit.Event // the fields checked
		series     string           // the denial series that grows by one
		stats      Stats            // the change of the fields checked
	}{
		{name: "dry run: service denies (miss)", path: "/dry/deny", status: 200, body: "passed /dry/deny",
			want:   caddyaudit.Event{Decision: "would_deny", DecidedBy: "permission: service", Reason: "permission denied", PermissionCache: "miss"},
			series: `{dry_run="true",result="deny",route="e2e-dry"}`, stats: Stats{WouldDeny: 1}},
		{name: "dry run: cached deny (hit)", path: "/dry/deny", status: 200, body: "passed /dry/deny",
			want:   caddyaudit.Event{Decision: "would_deny", DecidedBy: "permission: service", Reason: "permission denied", PermissionCache: "hit"},
			series: `{dry_run="true",result="deny",route="e2e-dry"}`, stats: Stats{WouldDeny: 1}},
		{name: "dry run: service down, on_error deny", path: "/dry/new", down: true, status: 200, body: "passed /dry/new",
			want:   caddyaudit.Event{Decision: "would_deny", DecidedBy: "permission: on_error deny", Reason: "permission service unavailable", PermissionCache: "miss"},
			series: `{dry_run="true",result="unavailable",route="e2e-dry"}`, stats: Stats{WouldDeny: 1}},
		{name: "dry run: allowed", path: "/dry/allow", status: 200, body: "passed /dry/allow",
			want: caddyaudit.Event{Decision: "allow", DecidedBy: "permission: service", PermissionCache: "miss"}},
		{name: "enforced: service denies (miss)", path: "/enforced/deny", status: 403, body: deniedBody,
			want:   caddyaudit.Event{Decision: "deny", DecidedBy: "permission: service", Reason: "permission denied", PermissionCache: "miss"},
			series: `{dry_run="false",result="deny",route="e2e-enforced"}`, stats: Stats{Denied: 1}},
		{name: "enforced: cached deny (hit)", path: "/enforced/deny", status: 403, body: deniedBody,
			want:   caddyaudit.Event{Decision: "deny", DecidedBy: "permission: service", Reason: "permission denied", PermissionCache: "hit"},
			series: `{dry_run="false",result="deny",route="e2e-enforced"}`, stats: Stats{Denied: 1}},
		{name: "enforced: service down, on_error deny", path: "/enforced/new", down: true, status: 503, body: unavailableBody,
			want:   caddyaudit.Event{Decision: "deny", DecidedBy: "permission: on_error deny", Reason: "permission service unavailable", PermissionCache: "miss"},
			series: `{dry_run="false",result="unavailable",route="e2e-enforced"}`, stats: Stats{Unavailable: 1}},
		{name: "enforced: allowed (miss)", path: "/enforced/allow", status: 200, body: "passed /enforced/allow",
			want: caddyaudit.Event{Decision: "allow", DecidedBy: "permission: service", PermissionCache: "miss"}},
		{name: "enforced: cached allow (hit)", path: "/enforced/allow", status: 200, body: "passed /enforced/allow",
			want: caddyaudit.Event{Decision: "allow", DecidedBy: "permission: service", PermissionCache: "hit"}},
		{name: "on_error allow", path: "/lenient/new", down: true, status: 200, body: "passed /lenient/new",
			want: caddyaudit.Event{Decision: "allow", DecidedBy: "permission: on_error allow", PermissionCache: "miss"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down.Store(tc.down)
			m0, s0 := pathtest.Metrics(t, e2eAdminPort, denials), ReadStats()
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://localhost:%d%s", e2eHTTPPort, tc.path), nil)
			req.Header.Set("Authorization", "Bearer "+alice)
			resp, err := tester.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rec.Add(p, tc.name, pathtest.Resp(resp.StatusCode, resp.Header, string(body)))
			wantBody := tc.body
			if tc.status >= 400 {
				wantBody = problemtest.Body(tc.status, wantBody, tc.path)
			}
			if resp.StatusCode != tc.status || string(body) != wantBody {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}

			ev := pathtest.WaitEvents(t, trail, i+1)[i]
			rec.Add(p, tc.name+": event", pathtest.Event(ev))
			got := caddyaudit.Event{Decision: ev.Decision, DecidedBy: ev.DecidedBy, Reason: ev.Reason, PermissionCache: ev.PermissionCache}
			if !reflect.DeepEqual(got, tc.want) || ev.Path != tc.path || ev.Status != tc.status || ev.Subject != "alice" {
				t.Errorf("event %s %d %s %+v\nwant %s %d alice %+v", ev.Path, ev.Status, ev.Subject, got, tc.path, tc.status, tc.want)
			}

			grew := pathtest.Grew(m0, pathtest.Metrics(t, e2eAdminPort, denials))
			rec.Add(p, tc.name+": denials counted", grew)
			want := map[string]float64{}
			if tc.series != "" {
				want["gateway_permission_denials_total"+tc.series] = 1
			}
			if !reflect.DeepEqual(grew, want) {
				t.Errorf("denial series grew %v, want %v", grew, want)
			}
			s1 := ReadStats()
			ds := Stats{WouldDeny: s1.WouldDeny - s0.WouldDeny, Denied: s1.Denied - s0.Denied, Unavailable: s1.Unavailable - s0.Unavailable}
			rec.Add(p, tc.name+": stats", ds)
			if ds != tc.stats {
				t.Errorf("ReadStats changed %+v, want %+v", ds, tc.stats)
			}
		})
	}
}
