package fastpath

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// namedUpstream answers "<name>" to every request but /hc (its health
// check), which answers hc.
func namedUpstream(t *testing.T, name string, status, hc int) *difftest.Upstream {
	return difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		code := status
		if req.URL.Path == "/hc" {
			code = hc
		}
		return difftest.Reply(c, fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(name), name))
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func get(t *testing.T, port int, path string) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	res, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return "error: " + err.Error()
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return fmt.Sprintf("%d %s", res.StatusCode, b)
}

// TestRetries: lb_retries and lb_try_duration move a request past an
// upstream that refuses connections, as on Caddy's path.
func TestRetries(t *testing.T) {
	a := namedUpstream(t, "A", 200, 200)
	dead := deadAddr(t)
	loadTwin(t, "", fmt.Sprintf(`	handle /retry {
		reverse_proxy %[1]s %[2]s {
			transport h1
			lb_policy round_robin
			lb_retries 1
		}
	}
	handle /noretry {
		reverse_proxy %[1]s %[2]s {
			transport h1
			lb_policy first
		}
	}
	handle /duration {
		reverse_proxy %[1]s {
			transport h1
			lb_try_duration 300ms
			lb_try_interval 50ms
		}
	}
	handle /post {
		reverse_proxy %[1]s %[2]s {
			transport h1
			lb_policy first
			lb_retries 1
		}
	}`, dead, a.Addr()))
	compareSeq(t, []difftest.Request{
		{Method: "GET", Path: "/retry"},
		{Method: "GET", Path: "/noretry"},
		{Method: "GET", Path: "/duration"},
		{Method: "POST", Path: "/post", Body: func() io.Reader { return strings.NewReader("x") }, Length: 1},
	})
	for _, port := range []int{plainPort, fastPort} {
		if got := get(t, port, "/retry"); got != "200 A" {
			t.Fatalf("port %d: a retry past a dead upstream gave %q", port, got)
		}
	}
}

// upstreamState reads Caddy's admin API /reverse_proxy/upstreams: the
// requests in flight and recent failures per upstream address, which both
// paths update.
func upstreamState(t *testing.T) map[string]int {
	t.Helper()
	res, err := http.Get(fmt.Sprintf("http://localhost:%d/reverse_proxy/upstreams", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ups []struct {
		Address string `json:"address"`
		Fails   int    `json:"fails"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ups); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, u := range ups {
		out[u.Address] = u.Fails
	}
	return out
}

// TestPassiveHealthShared: a failure the fast path counts (an unhealthy
// status) marks the upstream for Caddy's path too: one state.
func TestPassiveHealthShared(t *testing.T) {
	a := namedUpstream(t, "A", 200, 200)
	c := namedUpstream(t, "C", 500, 200)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s %s {
		transport h1
		lb_policy first
		fail_duration 30s
		max_fails 1
		unhealthy_status 5xx
	}`, c.Addr(), a.Addr()))
	if got := get(t, fastPort, "/"); got != "500 C" {
		t.Fatalf("first request through the fast path: %q, want C's 500", got)
	}
	if fails := upstreamState(t)[c.Addr()]; fails != 1 {
		t.Fatalf("the fast path's failure is not in Caddy's upstream state: fails %d", fails)
	}
	for _, port := range []int{fastPort, plainPort} {
		if got := get(t, port, "/"); got != "200 A" {
			t.Fatalf("port %d after C failed: %q, want A (C is unhealthy for both paths)", port, got)
		}
	}
}

// TestActiveHealth: an upstream Caddy's active checker finds unhealthy is
// skipped by the fast path as by Caddy's path.
func TestActiveHealth(t *testing.T) {
	a := namedUpstream(t, "A", 200, 200)
	d := namedUpstream(t, "D", 200, 503)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s %s {
		transport h1
		lb_policy first
		health_uri /hc
		health_interval 50ms
		health_fails 1
	}`, d.Addr(), a.Addr()))
	// each server's reverse_proxy has its own checker (Caddy keeps active
	// health per handler's upstream): wait for both to have run; a fast
	// path that ignored them would send every request to D (lb_policy first)
	deadline := time.Now().Add(5 * time.Second)
	for _, port := range []int{plainPort, fastPort} {
		for get(t, port, "/") != "200 A" {
			if time.Now().After(deadline) {
				t.Fatalf("port %d: D is still chosen 5 s after its health checks began to fail", port)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 0; i < 5; i++ {
		if got := get(t, fastPort, "/"); got != "200 A" {
			t.Fatalf("the fast path sent a request to the unhealthy upstream: %q", got)
		}
	}
}
