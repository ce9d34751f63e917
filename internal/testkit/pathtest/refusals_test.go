package pathtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/apigate/gateway/caddyapikey"
	"github.com/apigate/gateway/caddyapikey/apikeys"
	_ "github.com/apigate/gateway/caddyclientcert"
	"github.com/apigate/gateway/caddydocker"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddyopenapi"
	_ "github.com/apigate/gateway/caddypathguard"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyquota"
	_ "github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of TestRefusalsOnBothPaths: 20530-20539.
const refusalsPort = 20530

const refusalsSpec = `openapi: 3.0.3
info: {title: orders, version: "1"}
paths:
  /v1/orders:
    get:
      parameters:
        - {name: limit, in: query, schema: {type: integer, maximum: 100}}
      responses:
        "200": {description: ok}
`

// TestRefusalsOnBothPaths sends each refusal the gateway writes (one per
// kind and module: jwt_auth, api_key, client_cert_auth, rbac, permission,
// quota, openapi, path_guard, docker_routes) on both request paths, and
// checks the problem+json: Content-Type, type, title, status, detail,
// instance (the path sent), and the members from before problem+json with
// their values. Each answer is compared between the paths.
func TestRefusalsOnBothPaths(t *testing.T) {
	pathtest.Run(t, testRefusals)
}

func testRefusals(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	const secret = "refusals-secret-0123456789abcdef0123456789"
	dir := t.TempDir()
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }))
	defer perm.Close()
	key, hash, err := apikeys.New("alice-1")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keys := write("keys.json", `[{"id":"alice-1","hash":"`+hash+`","sub":"alice"}]`)
	spec := write("orders.yaml", refusalsSpec)
	state := filepath.Join(dir, "routes.json")
	config := func(debounce string) string {
		return fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20531
	https_port 20532
	grace_period 1ms
	servers :%[2]d {
		name gw
	}
	quota {
		plan free {
			limit 1/day
		}
		default free
		dir %[3]s/quota
	}
	docker {
		host unix:///nonexistent/docker.sock
		state_file %[4]s
		server gw
		debounce %[5]s
	}
}

:%[2]d {
	route /jwt/* {
		jwt_auth {
			hmac_secret %[6]s
		}
		respond "ok"
	}
	route /key/* {
		api_key {
			keys_file %[7]s
		}
		quota
		respond "ok"
	}
	route /cert/* {
		client_cert_auth
		respond "ok"
	}
	route /rbac/* {
		jwt_auth {
			hmac_secret %[6]s
			optional
		}
		rbac {
			require any admin
		}
		respond "ok"
	}
	route /perm/* {
		jwt_auth {
			hmac_secret %[6]s
		}
		permission {
			url %[8]s
			cache_ttl 0s
			negative_ttl 0s
		}
		respond "ok"
	}
	route /permdown/* {
		jwt_auth {
			hmac_secret %[6]s
		}
		permission {
			url http://127.0.0.1:1/check
			timeout 200ms
			on_error deny
		}
		respond "ok"
	}
	route /nokey/* {
		quota
		respond "ok"
	}
	route /v1/* {
		openapi {
			spec %[9]s
			validate request
		}
		respond "ok"
	}
	route /pg/* {
		path_guard
		respond "ok"
	}
}
`, adminPort, refusalsPort, dir, state, debounce, secret, keys, perm.URL, spec)
	}
	token := func(roles ...string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "roles": roles,
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	type refusal struct {
		name, path string
		header     map[string]string
		status     int
		typ        string
		detail     string         // "" for any
		members    map[string]any // extension members with their values
	}
	legacy := func(code, reason string) map[string]any { return map[string]any{"error": code, "reason": reason} }
	send := func(t *testing.T, tc refusal) {
		req, err := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", refusalsPort, tc.path), nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(b)))
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%d %s %s, want %d application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("body %s: %v", b, err)
		}
		title := ""
		for _, k := range deny.Kinds {
			if deny.TypePrefix+k.Code == tc.typ {
				title = k.Title
			}
		}
		if got["type"] != tc.typ || got["status"] != float64(tc.status) || got["instance"] != req.URL.EscapedPath() ||
			got["title"] == "" || title != "" && got["title"] != title || got["detail"] == "" || tc.detail != "" && got["detail"] != tc.detail {
			t.Errorf("body %s\nwant type %s, status %d, instance %s, title %q, detail %q", b, tc.typ, tc.status, req.URL.EscapedPath(), title, tc.detail)
		}
		for name, want := range tc.members {
			if g, _ := json.Marshal(got[name]); string(g) != mustJSON(want) {
				t.Errorf("member %s: %s, want %s", name, g, mustJSON(want))
			}
		}
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	apiKey := map[string]string{"X-API-Key": key}

	// no state file yet: discovered routes are not known
	p.Load(t, adminPort, config("100ms"), "gw")
	t.Run("docker_routes: discovery starting", func(t *testing.T) {
		send(t, refusal{path: "/nothing/here", status: 503, typ: deny.TypePrefix + "discovery_starting",
			members: map[string]any{"error": "discovery_starting"}})
	})

	// a route set: one service whose only replica is unhealthy
	hc := caddydocker.Container{ID: "id-hc", Name: "hc", HostNetwork: true, Health: "unhealthy", Labels: map[string]string{
		"gateway.enable": "true", "gateway.port": "1", "gateway.router.api.path_prefix": "/hc",
		"gateway.router.api.auth.required": "false", "gateway.router.api.audit": "false",
	}}
	plan, err := caddydocker.BuildRoutes(caddydocker.Discover([]caddydocker.Container{hc}, caddydocker.LabelOptions{}), caddydocker.BuildOptions{Server: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if err := caddydocker.WriteState(state, caddydocker.State{Written: time.Now(), Server: "gw", Hash: plan.Hash,
		Containers: []caddydocker.Container{hc}, Routes: plan.Routes, Pools: plan.Pools}); err != nil {
		t.Fatal(err)
	}
	// (another debounce: a new watcher, which reads the state file)
	p.Load(t, adminPort, config("101ms"), "gw")

	for _, tc := range []refusal{
		{"jwt_auth: no token", "/jwt/x", nil, 401, deny.TypePrefix + "unauthorized", "missing token", legacy("unauthorized", "missing token")},
		{"jwt_auth: bad token", "/jwt/x", bearer("not.a.token"), 401, deny.TypePrefix + "invalid_token", "", map[string]any{"error": "invalid_token"}},
		{"api_key: no key", "/key/x", nil, 401, deny.TypePrefix + "unauthorized", "missing api key", legacy("unauthorized", "missing api key")},
		{"api_key: malformed key", "/key/x", map[string]string{"X-API-Key": "nope"}, 401, deny.TypePrefix + "invalid_token",
			"malformed key: does not start with gk_ (a key is gk_<id>_<secret>)", legacy("invalid_token", "malformed key: does not start with gk_ (a key is gk_<id>_<secret>)")},
		{"client_cert_auth: no certificate", "/cert/x", nil, 401, deny.TypePrefix + "unauthorized", "missing client certificate", legacy("unauthorized", "missing client certificate")},
		{"rbac: no identity", "/rbac/x", nil, 401, deny.TypePrefix + "unauthorized", "missing identity", legacy("unauthorized", "missing identity")},
		{"rbac: missing role", "/rbac/x", bearer(token("viewer")), 403, deny.TypePrefix + "forbidden", "missing role", legacy("forbidden", "missing role")},
		{"permission: denied", "/perm/x", bearer(token()), 403, deny.TypePrefix + "forbidden", "permission denied", legacy("forbidden", "permission denied")},
		{"permission: service down", "/permdown/x", bearer(token()), 503, deny.TypePrefix + "permission_unavailable", "permission service unavailable",
			legacy("permission_unavailable", "permission service unavailable")},
		{"quota: the first request passes", "", nil, 0, "", "", nil},
		{"quota: exceeded", "/key/x", apiKey, 429, deny.TypePrefix + "quota_exceeded", "quota exceeded: free 1/day",
			map[string]any{"error": "quota_exceeded", "plan": "free", "window": "day"}},
		{"quota: key resolved empty", "/nokey/x", nil, 500, deny.TypePrefix + "quota_key_empty", "quota key resolved empty: {http.auth.user.id} has no value for this request",
			map[string]any{"error": "quota_key_empty"}},
		{"openapi: invalid request", "/v1/orders?limit=500", nil, 400, "urn:apigate:openapi:invalid-request", "1 violation",
			map[string]any{"errors": []map[string]string{{"location": "query.limit", "keyword": "maximum", "message": "must be <= 100"}}}},
		{"path_guard: ambiguous path", "/pg/..;/admin", nil, 400, deny.TypePrefix + "ambiguous_path", "", map[string]any{"error": "ambiguous_path"}},
		{"docker_routes: no healthy upstream", "/hc/x", nil, 503, deny.TypePrefix + "no_healthy_upstream", "", map[string]any{"error": "no_healthy_upstream"}},
		{"docker_routes: no route", "/nothing/here", nil, 404, deny.TypePrefix + "no_route", "", map[string]any{"error": "no_route"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.status == 0 { // the request before the quota's refusal
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/key/x", refusalsPort), nil)
				req.Header.Set("X-API-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("the first request with the key: %v %v", resp, err)
				}
				resp.Body.Close()
				return
			}
			send(t, tc)
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
