package caddydocker

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/golang-jwt/jwt/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// Ports of this package (see the team brief): admin 2905, listeners 19500-19599.
const (
	adminAddr   = "localhost:2905"
	gatewayAddr = "127.0.0.1:19501"
	testSecret  = "caddydocker-test-secret-0123456789abcdef"
)

func token(t testing.TB, sub string, roles ...string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "roles": roles, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func getAuth(path, tok string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+gatewayAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

var (
	podOnce sync.Once
	pod     *podmantest.Podman
	podErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pod != nil {
		pod.Close()
	}
	os.Exit(code)
}

// getPodman starts the package's private Podman once.
func getPodman(t testing.TB) *podmantest.Podman {
	t.Helper()
	podOnce.Do(func() { pod, podErr = podmantest.New("..", "cd") })
	return podmantest.Require(t, pod, podErr)
}

func gatewayConfig(p *podmantest.Podman, stateFile string) string {
	return dockerConfig(p.Host(), stateFile, fmt.Sprintf(`debounce 100ms
		resync_interval 2s
		jwt_auth {
			hmac_secret %s
		}
		rbac {
			roles_claim roles
		}`, testSecret), ownSite)
}

// ownSite is the gateway server's site with a route of its own.
const ownSite = `handle /own {
		respond "own route"
	}`

// dockerConfig is a gateway whose server gateway (on gatewayAddr) has the
// site body site, with a docker app listing host, keeping stateFile, and
// the further docker options docker.
func dockerConfig(host, stateFile, docker, site string) string {
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port 19500
	https_port 19599
	servers :19501 {
		name gateway
	}
	docker {
		host %s
		state_file %s
		server gateway
		%s
	}
}

:19501 {
	%s
}
`, adminAddr, host, stateFile, docker, site)
}

func startGateway(t testing.TB, caddyfile string) {
	t.Helper()
	cfg, warns, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v", err)
	}
	for _, w := range warns {
		t.Logf("caddyfile warning: %s", w.String())
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
}

func stopGateway(t testing.TB) {
	t.Helper()
	if err := caddy.Stop(); err != nil {
		t.Logf("stopping caddy: %v", err)
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(path string) (int, string, error) { return podmantest.Get("http://" + gatewayAddr + path) }

func expect(path string, status int, body string) func() string {
	return podmantest.Expect("http://"+gatewayAddr+path, status, body)
}

func labels(name string, port int, path string, extra ...string) map[string]string {
	m := map[string]string{
		"gateway.enable":                        "true",
		"gateway.name":                          name,
		"gateway.port":                          fmt.Sprint(port),
		"gateway.router.api.path_prefix":        path,
		"gateway.router.api.auth.required":      "false",
		"gateway.router.api.audit":              "false",
		"gateway.router.stripped.path_prefix":   path + "-stripped",
		"gateway.router.stripped.strip_prefix":  "true",
		"gateway.router.stripped.auth.required": "false",
		"gateway.router.stripped.audit":         "false",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func snapshot(t testing.TB) Snapshot {
	t.Helper()
	s, ok := Current("gateway")
	if !ok {
		t.Fatalf("no running docker app for server gateway")
	}
	return s
}

// TestPodman runs the gateway in process against a real Podman, step by
// step: each step builds on the state the previous one left.
func TestPodman(t *testing.T) {
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	stateFile := filepath.Join(t.TempDir(), "routes.json")
	cfg := gatewayConfig(p, stateFile)
	startGateway(t, cfg)
	t.Cleanup(func() { stopGateway(t) })

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("own routes and the catch-all 404", func(t *testing.T) {
		podmantest.Eventually(t, "own route", 10*time.Second, expect("/own", 200, "own route"))
		podmantest.Eventually(t, "no_route", 10*time.Second, expect("/nothing/here", 404, answerBody("no_route", "/nothing/here")))
	})

	p1 := freeport.Port(t)
	step("start a container: routed", func(t *testing.T) {
		if err := p.Run("one", p1, labels("one", p1, "/one")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "route to one", 20*time.Second, expect("/one/x", 200, "one /one/x"))
		podmantest.Eventually(t, "strip_prefix", 5*time.Second, expect("/one-stripped/x", 200, "one /x"))
		// the server's own routes are kept
		podmantest.Eventually(t, "own route", 5*time.Second, expect("/own", 200, "own route"))
	})

	p2, pb := freeport.Port(t), freeport.Port(t)
	step("bad labels beside a good one", func(t *testing.T) {
		if err := p.Run("bad", pb, labels("bad", pb, "/bad", "gateway.port", "http", "gateway.router.api.rate_limit", "lots")); err != nil {
			t.Fatal(err)
		}
		if err := p.Run("two", p2, labels("two", p2, "/two")); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "route to two", 20*time.Second, expect("/two/y", 200, "two /two/y"))
		podmantest.Eventually(t, "bad is not routed", 5*time.Second, expect("/bad/z", 404, answerBody("no_route", "/bad/z")))
		podmantest.Eventually(t, "one still routed", 5*time.Second, expect("/one/x", 200, "one /one/x"))
		podmantest.Eventually(t, "label errors in the snapshot", 5*time.Second, func() string {
			for _, d := range snapshot(t).Containers {
				if d.Container.Name == p.Prefix+"bad" {
					var got []string
					for _, e := range d.Errors {
						got = append(got, e.Label)
					}
					if strings.Join(got, " ") == "gateway.port gateway.router.api.rate_limit" {
						return ""
					}
					return fmt.Sprintf("errors %v", got)
				}
			}
			return "bad container not in snapshot"
		})
	})

	pa, pc := freeport.Port(t), freeport.Port(t)
	step("two containers, one name: both get traffic", func(t *testing.T) {
		if err := p.Run("pair-a", pa, labels("pair", pa, "/pair")); err != nil {
			t.Fatal(err)
		}
		if err := p.Run("pair-b", pc, labels("pair", pc, "/pair")); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		podmantest.Eventually(t, "traffic to both", 20*time.Second, func() string {
			code, body, err := get("/pair/q")
			if err == nil && code == 200 {
				seen[strings.Fields(body)[0]] = true
			}
			if seen["pair-a"] && seen["pair-b"] {
				return ""
			}
			return fmt.Sprintf("seen %v (last %d %q %v)", seen, code, body, err)
		})
	})

	step("an unrelated change causes no reload", func(t *testing.T) {
		// The previous step saw the new routes serve as soon as the
		// PATCH reloaded the config; the watcher counts the apply just
		// after the PATCH returns. Wait for that first.
		podmantest.Eventually(t, "the previous apply counted", 20*time.Second, func() string {
			if s := snapshot(t); s.AppliedHash != s.Hash {
				return "not applied yet"
			}
			return ""
		})
		before := counterValue(t, "changed")
		t0 := time.Now()
		// A container without gateway labels: events arrive, a re-list
		// runs, the route set is unchanged.
		if err := p.Run("unrelated", freeport.Port(t), map[string]string{"other": "x"}); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "a re-list after the event", 20*time.Second, func() string {
			if snapshot(t).LastList.After(t0.Add(50 * time.Millisecond)) {
				return ""
			}
			return "no re-list yet"
		})
		if after := counterValue(t, "changed"); after != before {
			t.Fatalf("route set applied %v times for an unrelated container", after-before)
		}
	})

	step("stop a container: route gone", func(t *testing.T) {
		if err := p.Stop("one"); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "one removed", 20*time.Second, expect("/one/x", 404, answerBody("no_route", "/one/x")))
		podmantest.Eventually(t, "two still routed", 5*time.Second, expect("/two/y", 200, "two /two/y"))
	})

	step("kill a container: route gone", func(t *testing.T) {
		if err := p.Kill("pair-b"); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "pair-b removed from the applied routes", 20*time.Second, func() string {
			s := snapshot(t)
			for _, d := range s.Containers {
				if d.Container.Name == p.Prefix+"pair-b" {
					return "pair-b still discovered"
				}
			}
			if s.AppliedHash != s.Hash {
				return "not applied yet"
			}
			return ""
		})
		for i := 0; i < 4; i++ {
			podmantest.Eventually(t, "pair-a only", 5*time.Second, expect("/pair/q", 200, "pair-a /pair/q"))
		}
	})

	ps := freeport.Port(t)
	step("auth chain from labels: jwt_auth, rbac, rate_limit, audit", func(t *testing.T) {
		err := p.Run("secure", ps, map[string]string{
			"gateway.enable":                    "true",
			"gateway.port":                      fmt.Sprint(ps),
			"gateway.router.api.path_prefix":    "/secure",
			"gateway.router.api.auth.roles":     "admin,editor",
			"gateway.router.api.rate_limit":     "3/1m",
			"gateway.router.api.methods":        "GET",
			"gateway.router.api.strip_prefix":   "true",
			"gateway.router.open.path_prefix":   "/open",
			"gateway.router.open.auth.required": "false",
		})
		if err != nil {
			t.Fatal(err)
		}
		// Wait on the open router, so that polling spends no rate limit.
		podmantest.Eventually(t, "container serving", 20*time.Second, expect("/open/x", 200, "secure /open/x"))
		admin := token(t, "alice", "admin")
		if code, body, err := getAuth("/secure/x", admin); err != nil || code != 200 || body != "secure /x" {
			t.Fatalf("valid token: %d %q %v", code, body, err)
		}
		for _, tc := range []struct {
			name, tok string
			want      int
		}{
			{"no token", "", 401},
			{"bad signature", admin[:len(admin)-4] + "AAAA", 401},
			{"missing role", token(t, "bob", "viewer"), 403},
		} {
			if code, body, err := getAuth("/secure/x", tc.tok); err != nil || code != tc.want {
				t.Errorf("%s: got %d %q %v, want %d", tc.name, code, body, err, tc.want)
			}
		}
		// carol's own bucket (3 per minute) gives 3 x 200, then 429.
		carol := token(t, "carol", "editor")
		for i := 1; i <= 4; i++ {
			code, _, err := getAuth("/secure/x", carol)
			want := 200
			if i == 4 {
				want = 429
			}
			if err != nil || code != want {
				t.Fatalf("request %d for carol: %d %v, want %d", i, code, err, want)
			}
		}
		if code, body, _ := getAuth("/secure/x", token(t, "dave", "admin")); code != 200 {
			t.Errorf("another subject is not limited by carol's bucket: %d %q", code, body)
		}
	})

	step("podman service killed: routes stay", func(t *testing.T) {
		p.KillService()
		podmantest.Eventually(t, "engine seen unreachable", 30*time.Second, func() string {
			if !snapshot(t).EngineReachable {
				return ""
			}
			return "still reachable"
		})
		for _, path := range []string{"/two/y", "/pair/q"} {
			podmantest.Eventually(t, path, 5*time.Second, expect(path, 200, ""))
		}
	})

	step("gateway restarted with podman down: routes from the state file", func(t *testing.T) {
		stopGateway(t)
		if _, err := os.Stat(stateFile); err != nil {
			t.Fatalf("state file: %v", err)
		}
		startGateway(t, cfg)
		podmantest.Eventually(t, "two from state file", 20*time.Second, expect("/two/y", 200, "two /two/y"))
		podmantest.Eventually(t, "pair from state file", 5*time.Second, expect("/pair/q", 200, "pair-a /pair/q"))
		podmantest.Eventually(t, "one stays removed", 5*time.Second, expect("/one/x", 404, answerBody("no_route", "/one/x")))
		if s := snapshot(t); !s.FromStateFile || s.EngineReachable {
			t.Fatalf("snapshot: from_state_file=%v engine_reachable=%v", s.FromStateFile, s.EngineReachable)
		}
	})

	step("podman back: the watcher reconnects", func(t *testing.T) {
		if err := p.StartService(); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "engine reachable", 30*time.Second, func() string {
			if snapshot(t).EngineReachable {
				return ""
			}
			return "unreachable"
		})
		if err := p.Stop("two"); err != nil {
			t.Fatal(err)
		}
		podmantest.Eventually(t, "two removed", 20*time.Second, expect("/two/y", 404, answerBody("no_route", "/two/y")))
	})
}

func counterValue(t testing.TB, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := globalMetrics().applies.WithLabelValues(result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
