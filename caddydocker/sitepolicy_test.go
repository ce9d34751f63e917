package caddydocker

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// writeState writes a state file routing the containers (their routes as
// BuildRoutes makes them), as a gateway that saw them would have.
func writeState(t *testing.T, path string, cs ...Container) {
	t.Helper()
	plan, err := BuildRoutes(Discover(cs, LabelOptions{}), BuildOptions{Server: "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteState(path, State{Written: time.Now(), Server: "gateway", Hash: plan.Hash,
		Containers: cs, Routes: plan.Routes, Pools: plan.Pools}); err != nil {
		t.Fatal(err)
	}
}

// hostContainer is a container on the host network whose router r serves
// prefix without auth or audit.
func hostContainer(name string, port string, prefix string) Container {
	return Container{ID: "id-" + name, Name: name, HostNetwork: true, Labels: map[string]string{
		"gateway.enable": "true", "gateway.port": port,
		"gateway.router.api.path_prefix": prefix, "gateway.router.api.auth.required": "false", "gateway.router.api.audit": "false",
	}}
}

// TestSitePoliciesCoverDiscoveredRoutes: a site's policies apply to the
// discovered routes that run in it (docker_routes in the site's catch-all
// handle): an allowlist (a handle block of the blocked addresses, by the
// client IP of a trusted proxy), a request body limit, compression and a
// response header, on Caddy's path and on the fast path. The discovered
// service comes from the state file (the engine is away): what is
// checked is where its routes run.
func TestSitePoliciesCoverDiscoveredRoutes(t *testing.T) {
	big := strings.Repeat(`{"order":42,"item":"a line item of an order"},`, 100) // 4.7 KB
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/orders/big" {
			io.WriteString(w, big)
			return
		}
		fmt.Fprintf(w, "orders %s %s %d", r.Method, r.URL.Path, len(b))
	}))
	t.Cleanup(up.Close)
	_, upPort, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	stateFile := filepath.Join(t.TempDir(), "routes.json")
	writeState(t, stateFile, hostContainer("orders", upPort, "/orders"))

	cfg := fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port 19500
	https_port 19599
	servers :19503 {
		name gateway
		trusted_proxies static 127.0.0.1/32
	}
	docker {
		host unix:///nonexistent/docker.sock
		state_file %s
		server gateway
	}
}

:19503 {
	request_body {
		max_size 1KB
	}
	encode gzip
	header X-Site-Policy applied
	@blocked not client_ip 10.0.0.0/8
	handle @blocked {
		respond `+"`"+`{"error":"blocked"}`+"`"+` 403
	}
	handle /health {
		respond "ok"
	}
	handle {
		docker_routes
		respond "public"
	}
}
`, adminAddr, stateFile)

	const base = "http://127.0.0.1:19503"
	send := func(t *testing.T, method, path, from string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", from)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s %s: gzip: %v", method, path, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s %s: gzip: %v", method, path, err)
			}
		}
		return resp, b
	}
	const allowed, blocked = "10.1.2.3", "192.0.2.7"

	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		p.Load(t, 2905, cfg, "gateway")
		cases := []struct {
			name, method, path, from string
			body                     []byte
			status                   int
			want                     string
			reachesService           bool
			gzip                     bool
		}{
			{"allowed address, routed", "GET", "/orders/1", allowed, nil, 200, "orders GET /orders/1 0", true, false},
			{"blocked address, not routed", "GET", "/orders/1", blocked, nil, 403, `{"error":"blocked"}`, false, false},
			{"blocked address, a POST", "POST", "/orders/1", blocked, []byte(`{"order":1}`), 403, `{"error":"blocked"}`, false, false},
			{"blocked address, the site's own route", "GET", "/health", blocked, nil, 403, `{"error":"blocked"}`, false, false},
			{"a body within the limit", "POST", "/orders/1", allowed, bytes.Repeat([]byte("x"), 512), 200, "orders POST /orders/1 512", true, false},
			{"a body over the limit", "POST", "/orders/1", allowed, bytes.Repeat([]byte("x"), 2048), 413, "", false, false},
			{"a large answer is compressed", "GET", "/orders/big", allowed, nil, 200, big, true, true},
			{"what no route matches: the site's catch-all", "GET", "/elsewhere", allowed, nil, 200, "public", false, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := hits.Load()
				resp, body := send(t, tc.method, tc.path, tc.from, tc.body)
				rec.Add(p, p.Key(t), map[string]any{"status": resp.StatusCode, "body": string(body),
					"encoding": resp.Header.Get("Content-Encoding"), "policy": resp.Header.Get("X-Site-Policy")})
				if resp.StatusCode != tc.status || (tc.want != "" && string(body) != tc.want) {
					t.Errorf("%d %.80q, want %d %.80q", resp.StatusCode, body, tc.status, tc.want)
				}
				if got := hits.Load() > before; got != tc.reachesService {
					t.Errorf("reached the service: %v, want %v", got, tc.reachesService)
				}
				if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tc.gzip {
					t.Errorf("gzip-encoded: %v, want %v", got, tc.gzip)
				}
				if resp.Header.Get("X-Site-Policy") != "applied" {
					t.Errorf("the site's header is missing")
				}
			})
		}
	})
}
