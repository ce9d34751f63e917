package deny_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package: admin 2890, listeners 20200-20299.
const (
	adminPort   = 2890
	plainPort   = 20201 // no handle_errors: the contract's JSON
	styled      = 20202 // handle_errors restyles every denial
	metricsPort = 20204 // the metrics handler, which keeps a server on Caddy's path
	secret      = "deny-test-secret-0123456789abcdef0123"
)

// TestDenialsThroughErrorRoutes: every duty's denial goes through Caddy's
// error chain, so handle_errors decides the body (with the status, the
// reason and the WWW-Authenticate header at hand); without handle_errors
// the client gets the contract's JSON. Audit records the denial either way.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body), the audit events and how
// much the duties' counters grew between them.
func TestDenialsThroughErrorRoutes(t *testing.T) {
	pathtest.Run(t, testDenialsThroughErrorRoutes)
}

func testDenialsThroughErrorRoutes(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden) // deny everything
	}))
	defer perm.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	t.Setenv("DENY_TEST_SECRET", secret)
	site := func(port int, errors string) string {
		return fmt.Sprintf(`
http://127.0.0.1:%d {
	route /api/* {
		audit
		jwt_auth {
			hmac_secret {env.DENY_TEST_SECRET}
		}
		rbac {
			roles_claim roles
			require any admin
		}
		permission {
			url %s
			cache_ttl 0s
			negative_ttl 0s
		}
		reverse_proxy %s
	}
%s
}
`, port, perm.URL, strings.TrimPrefix(up.URL, "http://"), errors)
	}
	config := fmt.Sprintf(`{
	admin localhost:%d
	http_port 20200
	https_port 20203
	grace_period 1ms
	audit {
		sink file %s
	}
}
`, adminPort, auditFile) + site(plainPort, "") + site(styled, `
	handle_errors {
		header Content-Type text/plain
		respond "styled {http.error.status_code}: {http.error.message}"
	}`) + fmt.Sprintf(`
# this config's registry (the admin API's /metrics keeps serving the
# registry of the config it started with while its settings do not change),
# on a server of its own: the metrics handler keeps a server on Caddy's path
http://127.0.0.1:%d {
	metrics
}
`, metricsPort)
	p.Load(t, adminPort, config, "srv0", "srv1")
	names := []string{"gateway_jwt_verifications_total", "gateway_rbac_decisions_total", "gateway_audit_events_enqueued_total"}
	start := scrape(t, names)

	token := func(roles ...string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "roles": roles,
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name      string
		token     string
		status    int
		code      string // the contract's "error"
		reason    string
		challenge string // WWW-Authenticate prefix, "" for none
	}{
		{"no token", "", 401, "unauthorized", "missing token", `Bearer realm="gateway"`},
		{"bad token", "not.a.token", 401, "invalid_token", "malformed token encoding", `Bearer error="invalid_token"`},
		{"missing role", token("viewer"), 403, "forbidden", "missing role", ""},
		{"permission denied", token("admin"), 403, "forbidden", "permission denied", ""},
	}
	for _, tc := range cases {
		for _, port := range []int{plainPort, styled} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, port), func(t *testing.T) {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/api/%s", port, strings.ReplaceAll(tc.name, " ", "-")), nil)
				if tc.token != "" {
					req.Header.Set("Authorization", "Bearer "+tc.token)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, b)
				}
				if tc.challenge != "" && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), tc.challenge) {
					t.Errorf("WWW-Authenticate %q, want %q...", resp.Header.Get("WWW-Authenticate"), tc.challenge)
				}
				if port == styled {
					if want := fmt.Sprintf("styled %d: %s", tc.status, tc.reason); string(b) != want {
						t.Errorf("body %q, want handle_errors' %q", b, want)
					}
					return
				}
				var body map[string]any
				if err := json.Unmarshal(b, &body); err != nil || body["error"] != tc.code || body["reason"] != tc.reason ||
					body["type"] != deny.TypePrefix+tc.code || body["status"] != float64(tc.status) || body["detail"] != tc.reason ||
					body["instance"] != req.URL.Path || body["title"] == "" {
					t.Errorf("body %q, want the problem of %q, %q at %s", b, tc.code, tc.reason, req.URL.Path)
				}
				if resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
				}
			})
		}
	}

	// audit recorded each denial with its status and reason, on both sites
	want := 2 * len(cases)
	var events []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for len(events) < want && time.Now().Before(deadline) {
		events = events[:0]
		if f, err := os.Open(auditFile); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var ev map[string]any
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					events = append(events, ev)
				}
			}
			f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(events) != want {
		t.Fatalf("%d audit events, want %d", len(events), want)
	}
	for i, ev := range pathtest.ReadEvents(t, auditFile) {
		rec.Add(p, fmt.Sprintf("event %d", i), pathtest.Event(ev))
	}
	t.Run("counters survive a reload", func(t *testing.T) {
		before := scrape(t, names)
		for _, n := range names {
			if before[n] == 0 {
				t.Fatalf("%s is 0 before the reload", n)
			}
		}
		rec.Add(p, "counted by the requests", pathtest.Grew(start, before))
		p.Reload(t, strings.Replace(config, "grace_period 1ms", "grace_period 2ms", 1), "srv0", "srv1")
		after := scrape(t, names)
		for _, n := range names {
			if after[n] < before[n] {
				t.Errorf("%s went from %v to %v across a reload", n, before[n], after[n])
			}
		}
	})
	for _, ev := range events {
		if ev["decision"] != "deny" {
			t.Errorf("event %v: decision %v", ev["path"], ev["decision"])
		}
		for _, tc := range cases {
			if strings.HasSuffix(fmt.Sprint(ev["path"]), strings.ReplaceAll(tc.name, " ", "-")) {
				if int(ev["status"].(float64)) != tc.status || ev["reason"] != tc.reason {
					t.Errorf("event %v: status %v reason %v, want %d %q", ev["path"], ev["status"], ev["reason"], tc.status, tc.reason)
				}
			}
		}
	}
}

// scrape sums each named counter (all its label sets) from the running
// config's metrics.
func scrape(t *testing.T, names []string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				f := strings.Fields(line)
				var v float64
				fmt.Sscan(f[len(f)-1], &v)
				out[n] += v
			}
		}
	}
	return out
}
