package caddyaudit_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddyaudit/auditchain"
	_ "github.com/apigate/gateway/caddypermcache"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestDecisionsEndToEnd runs jwt_auth, rbac and permission (against a real
// permission service) with and without dry_run behind audit, with a
// chained file sink and a JSON log file: a request that rbac or
// permission would deny in dry run reaches the upstream, and its event
// says would_deny with the reason and decided_by, the dry_run="true"
// series of the module's denial metric counts it, and a log line names
// it; without dry_run the same request is denied. Every event says which
// duty and rule decided, whether the permission answer came from the
// cache, and how the client authenticated; the trail verifies.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// each request's status and audit event between them.
func TestDecisionsEndToEnd(t *testing.T) {
	pathtest.Run(t, testDecisionsEndToEnd)
}

func testDecisionsEndToEnd(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	var upMu sync.Mutex
	upstreamHits := map[string]int{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upMu.Lock()
		upstreamHits[r.URL.Path]++
		upMu.Unlock()
		io.WriteString(w, "upstream")
	}))
	defer upstream.Close()
	reached := func(path string) int {
		upMu.Lock()
		defer upMu.Unlock()
		return upstreamHits[path]
	}
	// the permission service: allows paths with /allow/ in them
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Path string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if !strings.Contains(req.Path, "/allow/") {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer perm.Close()

	dir := t.TempDir()
	pub, keyFile := writeChainKey(t, dir, "decisions-key.pem")
	trail := filepath.Join(dir, "audit.jsonl")
	logFile := filepath.Join(dir, "dryrun.log")
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	duties := func(route, rbacRule, extra string) string {
		return fmt.Sprintf(`
	route /%[1]s/* {
		audit %[1]s-%[5]s
		jwt_auth {
			hmac_secret %[2]s
		}
		rbac {
			roles_claim realm_access.roles
			%[3]s
		}
		%[4]s
		reverse_proxy %[6]s
	}`, route, e2eSecret, rbacRule, extra, run, upstream.Listener.Addr().String())
	}
	permission := func(route, dry string) string {
		return fmt.Sprintf(`permission {
			url %s/check
			timeout 30s
			route %s-%s
			%s
		}`, perm.URL, route, run, dry)
	}
	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19440
	https_port 19441
	grace_period 1s
	log dryrun {
		output file %[2]s
		format json
		include http.handlers.rbac http.handlers.permission
	}
	audit {
		chain %[3]s
		sink file %[4]s {
			flush_interval 10ms
		}
	}
}

:19405 {%[5]s%[6]s%[7]s%[8]s%[9]s
	route /jwt/* {
		audit jwt-%[10]s
		jwt_auth {
			hmac_secret %[11]s
		}
		reverse_proxy %[12]s
	}
}
`, e2eAdminPort, logFile, keyFile, trail,
		duties("rbac-dry", "require any admin\n\t\t\tdry_run", ""),
		duties("rbac", "require any admin", ""),
		duties("perm-dry", "", permission("perm-dry", "dry_run")),
		duties("perm", "", permission("perm", "")),
		duties("both-dry", "require any admin\n\t\t\tdry_run", permission("both-dry", "dry_run true")),
		run, e2eSecret, upstream.Listener.Addr().String())

	tester := p.Load(t, e2eAdminPort, config, "srv0")

	sign := func(sub string, roles ...string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
			"realm_access": map[string]any{"roles": roles},
		}).SignedString([]byte(e2eSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice, bob := "alice-"+run, "bob-"+run
	aliceTok, bobTok := sign(alice, "admin"), sign(bob, "viewer")

	get := func(path, token string) int {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:19405"+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// eventFor waits for the n-th event (1-based) of path in the trail.
	eventFor := func(t *testing.T, path string, n int) caddyaudit.Event {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var found []caddyaudit.Event
			if f, err := os.Open(trail); err == nil {
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					var ev caddyaudit.Event
					if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
						t.Fatalf("bad line %q: %v", sc.Bytes(), err)
					}
					if ev.Path == path {
						found = append(found, ev)
					}
				}
				f.Close()
			}
			if len(found) >= n {
				return found[n-1]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no event %d for %s in the trail", n, path)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	metric := func(t *testing.T, series string) float64 {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://localhost:%d/metrics", e2eAdminPort))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return f
			}
		}
		return 0 // not yet created
	}
	// logLine waits for the n-th dry-run log line of path.
	logLine := func(t *testing.T, path string, n int) map[string]any {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(logFile)
			seen := 0
			for _, line := range bytes.Split(b, []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil && m["path"] == path && m["msg"] == "request would be denied (dry run)" {
					if seen++; seen == n {
						return m
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no dry-run log line for %s in %s:\n%s", path, logFile, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	rbacSeries := func(dry string) string {
		return `gateway_rbac_decisions_total{dry_run="` + dry + `",result="deny_role"}`
	}
	permSeries := func(route, dry string) string {
		return `gateway_permission_denials_total{dry_run="` + dry + `",result="deny",route="` + route + `-` + run + `"}`
	}

	for _, tc := range []struct {
		name, path, token string
		status            int
		series            string           // a denial metric that must grow by one
		log               string           // the logger of the dry-run line, if one is expected
		want              caddyaudit.Event // the fields checked
	}{
		{
			name: "rbac dry run lets a denied request through", path: "/rbac-dry/1", token: bobTok, status: 200,
			series: rbacSeries("true"), log: "http.handlers.rbac",
			want: caddyaudit.Event{Subject: bob, Decision: "would_deny", Reason: "missing role", DecidedBy: "rbac: require any admin", Auth: "jwt"},
		},
		{
			name: "rbac without dry run denies it", path: "/rbac/1", token: bobTok, status: 403, series: rbacSeries("false"),
			want: caddyaudit.Event{Subject: bob, Decision: "deny", Reason: "missing role", DecidedBy: "rbac: require any admin", Auth: "jwt"},
		},
		{
			name: "rbac allows", path: "/rbac/2", token: aliceTok, status: 200,
			want: caddyaudit.Event{Subject: alice, Decision: "allow", DecidedBy: "rbac: require any admin", Auth: "jwt"},
		},
		{
			name: "permission dry run lets a denied request through (miss)", path: "/perm-dry/1", token: bobTok, status: 200,
			series: permSeries("perm-dry", "true"), log: "http.handlers.permission",
			want: caddyaudit.Event{Subject: bob, Decision: "would_deny", Reason: "permission denied", DecidedBy: "permission: service", PermissionCache: "miss", Auth: "jwt"},
		},
		{
			name: "permission dry run, the cached deny (hit)", path: "/perm-dry/1", token: bobTok, status: 200,
			series: permSeries("perm-dry", "true"), log: "http.handlers.permission",
			want: caddyaudit.Event{Subject: bob, Decision: "would_deny", Reason: "permission denied", DecidedBy: "permission: service", PermissionCache: "hit", Auth: "jwt"},
		},
		{
			name: "permission without dry run denies it (miss)", path: "/perm/1", token: bobTok, status: 403, series: permSeries("perm", "false"),
			want: caddyaudit.Event{Subject: bob, Decision: "deny", Reason: "permission denied", DecidedBy: "permission: service", PermissionCache: "miss", Auth: "jwt"},
		},
		{
			name: "permission without dry run, the cached deny (hit)", path: "/perm/1", token: bobTok, status: 403, series: permSeries("perm", "false"),
			want: caddyaudit.Event{Subject: bob, Decision: "deny", Reason: "permission denied", DecidedBy: "permission: service", PermissionCache: "hit", Auth: "jwt"},
		},
		{
			name: "permission allows after rbac allowed: the last duty decided", path: "/perm/allow/1", token: bobTok, status: 200,
			want: caddyaudit.Event{Subject: bob, Decision: "allow", DecidedBy: "permission: service", PermissionCache: "miss", Auth: "jwt"},
		},
		{
			name: "two duties in dry run: the first that would deny is named", path: "/both-dry/1", token: bobTok, status: 200,
			series: rbacSeries("true"), log: "http.handlers.rbac",
			want: caddyaudit.Event{Subject: bob, Decision: "would_deny", Reason: "missing role", DecidedBy: "rbac: require any admin", PermissionCache: "miss", Auth: "jwt"},
		},
		{
			name: "jwt_auth allows", path: "/jwt/1", token: aliceTok, status: 200,
			want: caddyaudit.Event{Subject: alice, Decision: "allow", DecidedBy: "jwt_auth", Auth: "jwt"},
		},
		{
			name: "jwt_auth denies", path: "/jwt/2", status: 401,
			want: caddyaudit.Event{Decision: "deny", Reason: "missing token", DecidedBy: "jwt_auth"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before float64
			if tc.series != "" {
				before = metric(t, tc.series)
			}
			hitsBefore := reached(tc.path)
			if got := get(tc.path, tc.token); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
			if up := reached(tc.path) - hitsBefore; (tc.status == 200) != (up == 1) {
				t.Fatalf("upstream reached %d times for a %d", up, tc.status)
			}
			n := 1
			if strings.Contains(tc.name, "(hit)") {
				n = 2
			}
			ev := eventFor(t, tc.path, n)
			got := caddyaudit.Event{Subject: ev.Subject, Decision: ev.Decision, Reason: ev.Reason, DecidedBy: ev.DecidedBy,
				PermissionCache: ev.PermissionCache, Auth: ev.Auth, CredentialID: ev.CredentialID}
			if !reflect.DeepEqual(got, tc.want) || ev.Status != tc.status {
				t.Fatalf("event %d %+v\nwant %d %+v", ev.Status, got, tc.status, tc.want)
			}
			rec.Add(p, tc.name, pathtest.Event(ev, run, "RUN"))
			if tc.series != "" {
				if after := metric(t, tc.series); after != before+1 {
					t.Errorf("%s went from %v to %v, want +1", tc.series, before, after)
				}
			}
			if tc.log != "" {
				m := logLine(t, tc.path, n)
				if m["logger"] != tc.log || m["level"] != "info" || m["decided_by"] != tc.want.DecidedBy ||
					m["reason"] != tc.want.Reason || m["subject"] != tc.want.Subject {
					t.Errorf("log line %v", m)
				}
			}
		})
	}

	// The trail, with the new fields in its events, verifies.
	b, err := os.ReadFile(trail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auditchain.Verify(bytes.NewReader(b), pub, auditchain.VerifyOptions{}); err != nil {
		t.Fatalf("trail does not verify: %v", err)
	}
	if !bytes.Contains(b, []byte(`"decided_by":"rbac: require any admin","decision":"would_deny"`)) {
		t.Fatalf("no would_deny event in the trail:\n%s", b)
	}
}
