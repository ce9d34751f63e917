package caddyrbac_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/caddyjwt"

	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package (see the team brief): admin 2902, listeners
// 19200-19299.
const (
	e2eAdminPort = 2902
	e2ePort      = 19201
)

const e2eSecret = "caddyrbac-e2e-secret-0123456789abcdef0123456789"

func signHS256(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(e2eSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestEndToEnd runs the real chain in process: jwt_auth verifies an HS256
// token, rbac checks its Keycloak-style roles, rate_limit counts per user
// (falling back to the client address for anonymous requests), and
// reverse_proxy forwards to a real upstream.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body) and how much each
// gateway_rbac_decisions_total series grew between them.
func TestEndToEnd(t *testing.T) {
	pathtest.Run(t, testEndToEnd)
}

func testEndToEnd(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "upstream %s roles=%s", r.URL.Path, r.Header.Get("X-Roles"))
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream.Listener = ln
	upstream.Start()
	t.Cleanup(upstream.Close)

	// rate limit state lives in a process-wide pool keyed by zone name and
	// survives config loads; fresh zone names and subjects keep reruns
	// (-count=N) independent
	run := randomSuffix(t)
	alice, bob, carol := "alice-"+run, "bob-"+run, "carol-"+run

	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19210
	https_port 19211
	grace_period 1s
}

:%[2]d {
	@write method POST PUT PATCH DELETE

	# per-method rules with Caddy's matchers: any role may read,
	# writing needs editor or admin
	route /items/* {
		jwt_auth {
			hmac_secret %[3]s
		}
		rbac {
			roles_claim realm_access.roles
		}
		rbac @write {
			roles_claim realm_access.roles
			require any editor admin
		}
		respond "items {method}"
	}

	route /orders/* {
		jwt_auth {
			hmac_secret %[3]s
		}
		rbac {
			roles_claim realm_access.roles
			require any orders admin
			require_scope any orders:read
		}
		rate_limit {
			zone e2e_orders_per_user_%[5]s {
				key {http.auth.user.id}
				events 3
				window 1m
			}
		}
		reverse_proxy %[4]s {
			header_up X-Roles {http.auth.rbac.roles}
		}
	}

	route /mixed/* {
		jwt_auth {
			hmac_secret %[3]s
			optional
		}
		map {http.auth.user.id} {rl_key} {
			"" ip:{remote_host}
			default user:{http.auth.user.id}
		}
		rate_limit {
			zone e2e_mixed_per_client_%[5]s {
				key {rl_key}
				events 2
				window 1m
			}
		}
		reverse_proxy %[4]s
	}

	route /identity-only/* {
		jwt_auth {
			hmac_secret %[3]s
			optional
		}
		rbac
		reverse_proxy %[4]s
	}

	# the caveat: two handlers that name the same zone share its counters
	route /shared-a {
		rate_limit {
			zone e2e_shared_%[5]s {
				key static
				events 2
				window 1m
			}
		}
		respond "a"
	}
	route /shared-b {
		rate_limit {
			zone e2e_shared_%[5]s {
				key static
				events 2
				window 1m
			}
		}
		respond "b"
	}
}
`, e2eAdminPort, e2ePort, e2eSecret, ln.Addr().String(), run)

	tester := p.Load(t, e2eAdminPort, config, "srv0")
	const decisions = "gateway_rbac_decisions_total{"
	decisionsBefore := pathtest.Metrics(t, e2eAdminPort, decisions)
	// record records a response under the subtest's name and the request
	record := func(t *testing.T, method, path string, resp *http.Response, body string) {
		rec.AddNext(p, p.Key(t)+" "+method+" "+path, pathtest.Resp(resp.StatusCode, resp.Header, body, run, "RUN"))
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", e2ePort)
	get := func(t *testing.T, path, token string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		record(t, "GET", path, resp, string(body))
		return resp.StatusCode, resp.Header, string(body)
	}
	wantJSON := func(t *testing.T, body, wantErr, wantReason string) {
		t.Helper()
		var b struct{ Error, Reason string }
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatalf("body %q is not JSON: %v", body, err)
		}
		if b.Error != wantErr || b.Reason != wantReason {
			t.Errorf("body %q, want error %q reason %q", body, wantErr, wantReason)
		}
	}

	token := func(sub string, roles []string, scope string) string {
		return signHS256(t, jwt.MapClaims{
			"sub":          sub,
			"realm_access": map[string]any{"roles": roles},
			"scope":        scope,
		})
	}
	aliceTok := token(alice, []string{"viewer", "orders"}, "openid orders:read")
	bobTok := token(bob, []string{"admin"}, "orders:read orders:write")
	carolTok := token(carol, []string{"viewer"}, "orders:read")
	noScopeTok := token("dave-"+run, []string{"orders"}, "openid")

	t.Run("token with the role passes", func(t *testing.T) {
		code, _, body := get(t, "/orders/1", aliceTok)
		if code != 200 || body != "upstream /orders/1 roles=viewer,orders" {
			t.Fatalf("got %d %q", code, body)
		}
	})
	t.Run("token without the role gets 403", func(t *testing.T) {
		code, _, body := get(t, "/orders/1", carolTok)
		if code != 403 {
			t.Fatalf("got %d %q", code, body)
		}
		wantJSON(t, body, "forbidden", "missing role")
	})
	t.Run("token without the scope gets 403", func(t *testing.T) {
		code, _, body := get(t, "/orders/1", noScopeTok)
		if code != 403 {
			t.Fatalf("got %d %q", code, body)
		}
		wantJSON(t, body, "forbidden", "missing scope")
	})
	t.Run("per-method rules with a named matcher", func(t *testing.T) {
		do := func(method, tok string) (int, string) {
			req, err := http.NewRequest(method, base+"/items/1", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := tester.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			record(t, method, "/items/1", resp, string(body))
			return resp.StatusCode, string(body)
		}
		if code, body := do("GET", carolTok); code != 200 || body != "items GET" {
			t.Errorf("viewer GET: %d %q", code, body)
		}
		code, body := do("POST", carolTok)
		if code != 403 {
			t.Fatalf("viewer POST: %d %q", code, body)
		}
		wantJSON(t, body, "forbidden", "missing role")
		if code, body := do("DELETE", bobTok); code != 200 || body != "items DELETE" {
			t.Errorf("admin DELETE: %d %q", code, body)
		}
	})
	t.Run("no token gets 401 from jwt_auth", func(t *testing.T) {
		code, h, body := get(t, "/orders/1", "")
		if code != 401 {
			t.Fatalf("got %d %q", code, body)
		}
		if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer realm=") {
			t.Errorf("WWW-Authenticate %q", h.Get("WWW-Authenticate"))
		}
	})
	t.Run("no identity behind optional jwt_auth gets 401 from rbac", func(t *testing.T) {
		code, h, body := get(t, "/identity-only/x", "")
		if code != 401 {
			t.Fatalf("got %d %q", code, body)
		}
		wantJSON(t, body, "unauthorized", "missing identity")
		if h.Get("WWW-Authenticate") != `Bearer realm="gateway"` {
			t.Errorf("WWW-Authenticate %q", h.Get("WWW-Authenticate"))
		}
		code, _, body = get(t, "/identity-only/x", carolTok)
		if code != 200 {
			t.Fatalf("with a token: got %d %q", code, body)
		}
	})
	t.Run("the N+1th request in the window gets 429 with Retry-After", func(t *testing.T) {
		// alice used 1 of her 3 requests above; denied requests (403)
		// never reached rate_limit, so they did not count
		for i := 2; i <= 3; i++ {
			if code, _, body := get(t, "/orders/1", aliceTok); code != 200 {
				t.Fatalf("request %d: got %d %q", i, code, body)
			}
		}
		code, h, body := get(t, "/orders/1", aliceTok)
		if code != 429 {
			t.Fatalf("request 4: got %d %q", code, body)
		}
		ra, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || ra < 1 || ra > 60 {
			t.Errorf("Retry-After %q: want whole seconds in [1,60]", h.Get("Retry-After"))
		}
	})
	t.Run("a second user is not limited by the first", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			if code, _, body := get(t, "/orders/2", bobTok); code != 200 {
				t.Fatalf("bob request %d: got %d %q", i, code, body)
			}
		}
		if code, _, _ := get(t, "/orders/2", bobTok); code != 429 {
			t.Fatalf("bob request 4: got %d", code)
		}
		if code, _, _ := get(t, "/orders/2", aliceTok); code != 429 {
			t.Fatalf("alice is still limited: got %d", code)
		}
	})
	t.Run("anonymous requests fall back to the client address", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			if code, _, body := get(t, "/mixed/x", ""); code != 200 {
				t.Fatalf("anonymous request %d: got %d %q", i, code, body)
			}
		}
		if code, h, _ := get(t, "/mixed/x", ""); code != 429 || h.Get("Retry-After") == "" {
			t.Fatalf("third anonymous request: got %d, Retry-After %q", code, h.Get("Retry-After"))
		}
		// a user from the same address has a bucket of their own
		for i := 1; i <= 2; i++ {
			if code, _, body := get(t, "/mixed/x", carolTok); code != 200 {
				t.Fatalf("carol request %d from the limited address: got %d %q", i, code, body)
			}
		}
		if code, _, _ := get(t, "/mixed/x", carolTok); code != 429 {
			t.Fatalf("carol request 3: got %d", code)
		}
	})
	t.Run("decisions are counted on the admin metrics endpoint", func(t *testing.T) {
		resp, err := http.Get(fmt.Sprintf("http://localhost:%d/metrics", e2eAdminPort))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, result := range []string{"allow", "deny_role", "deny_scope", "unauthenticated"} {
			if !strings.Contains(string(body), `gateway_rbac_decisions_total{dry_run="false",result="`+result+`"}`) {
				t.Errorf("no gateway_rbac_decisions_total{result=%q} in /metrics", result)
			}
		}
		rec.Add(p, p.Key(t), pathtest.Grew(decisionsBefore, pathtest.Series(string(body), decisions)))
	})
	t.Run("zones with the same name share state across routes", func(t *testing.T) {
		for _, route := range []string{"/shared-a", "/shared-b"} {
			if code, _, body := get(t, route, ""); code != 200 {
				t.Fatalf("%s: got %d %q", route, code, body)
			}
		}
		// route b's limit is 2, but route a's requests counted too
		if code, _, _ := get(t, "/shared-b", ""); code != 429 {
			t.Fatalf("third request across the two routes: got %d, want 429 (shared zone)", code)
		}
	})
}
