package caddydocker

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/apigate/gateway/caddyready" // gateway_ready in the sites
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// startConfig is a gateway whose engine never answers (a socket that does
// not exist), so what it routes comes from the state file alone.
func startConfig(stateFile, debounce string) string {
	return dockerConfig("unix:///nonexistent/docker.sock", stateFile, "debounce "+debounce, ownSite)
}

// ask sends one request and returns its's status, Retry-After and body.
func ask(t *testing.T, method, path string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+gatewayAddr+path, strings.NewReader("order"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// echoUpstream serves "<name> <method> <path> <body>" until t ends and
// returns its port.
func echoUpstream(t *testing.T, name string) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s %s", name, r.Method, r.URL.Path, b)
	}))
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	return port
}

// TestStartsFromStateFile: the config a gateway starts with runs the
// discovered routes from its first request: the state file's, or,
// without one, a 503 discovery_starting for what no route matches. A
// reload (the same config, or one that changes the docker options and so
// starts a new watcher) runs them from its first request too.
func TestStartsFromStateFile(t *testing.T) {
	upPort := echoUpstream(t, "svc")
	stateFile := filepath.Join(t.TempDir(), "routes.json")

	t.Run("no state file: 503 discovery_starting for what no route matches", func(t *testing.T) {
		startGateway(t, startConfig(stateFile, "100ms"))
		t.Cleanup(func() { stopGateway(t) })
		for _, m := range []string{"GET", "POST"} {
			status, retry, body := ask(t, m, "/svc/1")
			if want := answerBody("discovery_starting", "/svc/1"); status != 503 || retry != "1" || body != want {
				t.Errorf("%s /svc/1: %d Retry-After %q %q, want 503 Retry-After 1 %s", m, status, retry, body, want)
			}
		}
		if status, _, body := ask(t, "GET", "/own"); status != 200 || body != "own route" {
			t.Errorf("/own: %d %q", status, body)
		}
	})

	svc := Container{ID: "id-svc", Name: "svc", HostNetwork: true, Labels: map[string]string{
		"gateway.enable": "true", "gateway.port": upPort,
		"gateway.router.api.path_prefix": "/svc", "gateway.router.api.auth.required": "false", "gateway.router.api.audit": "false",
	}}
	plan, err := BuildRoutes(Discover([]Container{svc}, LabelOptions{}), BuildOptions{Server: "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteState(stateFile, State{Written: time.Now(), Server: "gateway", Hash: plan.Hash,
		Containers: []Container{svc}, Routes: plan.Routes, Pools: plan.Pools}); err != nil {
		t.Fatal(err)
	}
	routed := func(t *testing.T, when string) {
		t.Helper()
		for _, m := range []string{"GET", "POST"} {
			want := "svc " + m + " /svc/1 order"
			if status, _, body := ask(t, m, "/svc/1"); status != 200 || body != want {
				t.Errorf("%s, %s /svc/1: %d %q, want 200 %q", when, m, status, body, want)
			}
		}
		if status, _, body := ask(t, "GET", "/nothing"); status != 404 || body != answerBody("no_route", "/nothing") {
			t.Errorf("%s, /nothing: %d %q, want 404 %s", when, status, body, answerBody("no_route", "/nothing"))
		}
	}

	t.Run("state file: routed from the first request", func(t *testing.T) {
		startGateway(t, startConfig(stateFile, "100ms"))
		t.Cleanup(func() { stopGateway(t) })
		routed(t, "right after the start")
		startGateway(t, startConfig(stateFile, "100ms")+"\n# changed\n")
		routed(t, "right after a reload")
		startGateway(t, startConfig(stateFile, "150ms"))
		routed(t, "right after a reload that replaces the docker app's options")
		if s := snapshot(t); !s.FromStateFile || s.Routes != 1 || s.EngineReachable || s.Engine != "unix:///nonexistent/docker.sock" {
			t.Errorf("snapshot: from state file %v, %d routes, engine %q reachable %v", s.FromStateFile, s.Routes, s.Engine, s.EngineReachable)
		}
		if routes, ok := ServedRoutes("gateway"); !ok || len(routes) != 1 || RouteID(routes[0]) != "docker:gateway:svc:api" {
			t.Errorf("served routes: %v %s", ok, routes)
		}
	})
}

// TestPlacedHandlerWhileStarting: before the first list, with no state
// file, a docker_routes placed in a site's catch-all handle answers 503
// discovery_starting with Retry-After: 1 to what reaches it (a GET and a
// POST for a path about to be discovered, and any other path), not the
// site's catch-all answer after it; the site's own handle blocks before
// it answer as usual. Once a route set is known (here the state file's,
// at a reload that starts a new watcher) the same site routes the
// service and its catch-all answers the rest. The readiness route
// (gateway_ready) answers 503 starting until then, 200 once the route set
// is known. On both request paths.
func TestPlacedHandlerWhileStarting(t *testing.T) {
	upPort := echoUpstream(t, "orders")
	site := `handle /health {
		respond "ok"
	}
	handle /ready {
		gateway_ready
	}
	handle {
		docker_routes
		respond "public" 404
	}`
	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		stateFile := filepath.Join(t.TempDir(), "routes.json")
		p.Load(t, 2905, dockerConfig("unix:///nonexistent/docker.sock", stateFile, "debounce 100ms", site), "gateway")
		check := func(t *testing.T, when, method, path string, status int, retry, body string) {
			t.Helper()
			got, gotRetry, gotBody := ask(t, method, path)
			rec.Add(p, when+" "+method+" "+path, fmt.Sprintf("%d %q %s", got, gotRetry, gotBody))
			if got != status || gotRetry != retry || gotBody != body {
				t.Errorf("%s, %s %s: %d Retry-After %q %q, want %d Retry-After %q %q", when, method, path, got, gotRetry, gotBody, status, retry, body)
			}
		}
		const starting = "starting"
		check(t, starting, "GET", "/orders/1", 503, "1", answerBody("discovery_starting", "/orders/1"))
		check(t, starting, "POST", "/orders/1", 503, "1", answerBody("discovery_starting", "/orders/1"))
		check(t, starting, "GET", "/elsewhere", 503, "1", answerBody("discovery_starting", "/elsewhere"))
		check(t, starting, "GET", "/health", 200, "", "ok")
		check(t, starting, "GET", "/ready", 503, "1", `{"status":"starting","reason":"docker: discovered routes not loaded yet (no state file, engine not listed yet)"}`+"\n")

		writeState(t, stateFile, hostContainer("orders", upPort, "/orders"))
		p.Reload(t, dockerConfig("unix:///nonexistent/docker.sock", stateFile, "debounce 150ms", site), "gateway")
		const known = "with a route set"
		check(t, known, "GET", "/orders/1", 200, "", "orders GET /orders/1 order")
		check(t, known, "POST", "/orders/1", 200, "", "orders POST /orders/1 order")
		check(t, known, "GET", "/elsewhere", 404, "", "public")
		check(t, known, "GET", "/health", 200, "", "ok")
		check(t, known, "GET", "/ready", 200, "", `{"status":"ready"}`+"\n")
	})
}
