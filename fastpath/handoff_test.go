package fastpath

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

func stats(t *testing.T, server string) ServerStatus {
	t.Helper()
	for _, s := range Status() {
		if s.Server == server {
			return s
		}
	}
	t.Fatalf("no status for server %q", server)
	return ServerStatus{}
}

const handoffSite = `	handle /health {
		respond "ok {http.request.proto} {http.request.scheme}" 200
	}
	handle {
		reverse_proxy {$UP} {
			transport h1
		}
	}`

// TestH2C: with h2c on, a client speaking HTTP/2 without TLS (prior
// knowledge) is served by the plan's HTTP/2 engine and answered as Caddy
// answers it; HTTP/1.1 on the same port stays on the fast path too.
func TestH2C(t *testing.T) {
	up := newEchoUpstream(t)
	site := strings.ReplaceAll(handoffSite, "{$UP}", up.Addr())
	loadTwinOpts(t, twinOpts{serverOpts: "\t\tprotocols h1 h2c"}, site)

	h2c := h2cClient()
	before := stats(t, "fast")
	for _, path := range []string{"/health", "/proxied?x=1"} {
		var got [2]difftest.ClientResult
		for i, port := range []int{plainPort, fastPort} {
			got[i] = difftest.Do(h2c, port, difftest.Request{Method: "GET", Path: path})
			normPorts(&got[i])
		}
		if got[0].Status != 200 || !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("h2c %s differs or failed\nCaddy's path: %v\nfast path:    %v", path, got[0], got[1])
		}
		if path == "/health" && !strings.Contains(got[1].Body, "HTTP/2") {
			t.Fatalf("not answered over HTTP/2: %q", got[1].Body)
		}
	}
	after := stats(t, "fast")
	if after.HandedOff != before.HandedOff {
		t.Fatalf("the h2c connection was handed to Caddy (%d before, %d after)", before.HandedOff, after.HandedOff)
	}
	if after.Served-before.Served != 2 {
		t.Fatalf("the fast path served %d HTTP/2 requests itself, want 2", after.Served-before.Served)
	}
	compareSeq(t, []difftest.Request{{Method: "GET", Path: "/health"}})
	if stats(t, "fast").Served == after.Served {
		t.Fatal("HTTP/1.1 on an h2c port did not stay on the fast path")
	}
}

// h2cClient is an HTTP/2 client without TLS (prior knowledge).
func h2cClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}, Timeout: 20 * time.Second}
}

// TestH2COff: without h2c among the server's protocols, the HTTP/2
// preface on a cleartext port goes to Caddy's server, which answers it as
// it does without the fast path.
func TestH2COff(t *testing.T) {
	loadTwinOpts(t, twinOpts{}, `	respond "hi"`)
	before := stats(t, "fast")
	var got [2]string
	for i, port := range []int{plainPort, fastPort} {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(http2.ClientPreface))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		got[i] = string(b)
	}
	if got[0] != got[1] {
		t.Fatalf("the h2c preface is answered differently\nCaddy's path: %q\nfast path:    %q", got[0], got[1])
	}
	if after := stats(t, "fast"); after.HandedOff != before.HandedOff+1 {
		t.Fatalf("handed off %d connections, want 1", after.HandedOff-before.HandedOff)
	}
}

// TestH2TLS: over TLS, ALPN h2 and http/1.1 are both served by the plan,
// and the differential table runs over HTTP/2 (an http2.Transport client)
// and HTTP/1.1 through both paths: the same answers.
func TestH2TLS(t *testing.T) {
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if h := difftest.Behaviours[req.URL.Path]; h != nil {
			return h(c, req, body)
		}
		return difftest.Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	site := strings.ReplaceAll(handoffSite, "{$UP}", up.Addr())
	loadTwinOpts(t, twinOpts{https: true}, site)

	tlsConf := &tls.Config{InsecureSkipVerify: true}
	h1 := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf.Clone(), DisableCompression: true,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, Timeout: 20 * time.Second}
	}
	h2 := func() *http.Client {
		return &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf.Clone(), DisableCompression: true}, Timeout: 20 * time.Second}
	}
	waitCerts(t, h2())
	before := stats(t, "fast")
	var got [2]difftest.ClientResult
	for i, port := range []int{plainPort, fastPort} {
		got[i] = difftest.DoURL(h2(), fmt.Sprintf("https://127.0.0.1:%d", port), difftest.Request{Method: "GET", Path: "/health"})
		normPorts(&got[i])
	}
	if got[0].Status != 200 || !reflect.DeepEqual(got[0], got[1]) || !strings.Contains(got[1].Body, "HTTP/2") {
		t.Fatalf("h2 differs or failed\nCaddy's path: %v\nfast path:    %v", got[0], got[1])
	}
	mid := stats(t, "fast")
	if mid.HandedOff != before.HandedOff || mid.Served != before.Served+1 {
		t.Fatalf("an ALPN h2 connection was not served by the plan (handed off %d -> %d, served %d -> %d)",
			before.HandedOff, mid.HandedOff, before.Served, mid.Served)
	}
	for _, proto := range []struct {
		name   string
		client func() *http.Client
	}{{"h2", h2}, {"h1", h1}} {
		for _, tc := range difftest.Cases() {
			t.Run(proto.name+"/"+tc.Name, func(t *testing.T) {
				var got [2][]difftest.ClientResult
				for i, port := range []int{plainPort, fastPort} {
					client := proto.client()
					for _, rq := range tc.Seq {
						got[i] = append(got[i], difftest.DoURL(client, fmt.Sprintf("https://127.0.0.1:%d", port), rq))
					}
					client.CloseIdleConnections()
				}
				for j := range tc.Seq {
					normPorts(&got[0][j])
					normPorts(&got[1][j])
					if !reflect.DeepEqual(got[0][j], got[1][j]) {
						t.Errorf("request %d (%s %s) differs over %s\nCaddy's path: %v\nfast path:    %v",
							j, tc.Seq[j].Method, tc.Seq[j].Path, proto.name, got[0][j], got[1][j])
					}
				}
			})
		}
	}
	if after := stats(t, "fast"); after.Served <= mid.Served {
		t.Fatalf("not served by the plan (served %d -> %d)", mid.Served, after.Served)
	}
}

// waitCerts waits for tls internal's certificates (issued in the
// background) on both servers.
func waitCerts(t *testing.T, client *http.Client) {
	t.Helper()
	for _, port := range []int{plainPort, fastPort} {
		for deadline := time.Now().Add(15 * time.Second); ; {
			res, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/health", port))
			if err == nil {
				res.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no certificate on port %d: %v", port, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	client.CloseIdleConnections()
}

// TestHandoffWebSocket: an Upgrade request is handed to Caddy's server,
// which proxies the WebSocket as it does without the fast path; requests
// before it on the same connection were the plan's.
func TestHandoffWebSocket(t *testing.T) {
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if req.Header.Get("Upgrade") != "websocket" {
			return difftest.Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		}
		difftest.Reply(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
		io.Copy(c, c) // echo the frames
		return false
	})
	site := strings.ReplaceAll(handoffSite, "{$UP}", up.Addr())
	loadTwin(t, "", site)
	var got [2]string
	for i, port := range []int{plainPort, fastPort} {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		// first a plain request on the connection, then the upgrade
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n")
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		res2, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("frame bytes"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		echo := make([]byte, len("frame bytes"))
		_, err = io.ReadFull(br, echo)
		c.Close()
		got[i] = fmt.Sprintf("%d %s | %d %q %q | echo %q %v", res.StatusCode, b, res2.StatusCode, res2.Header.Get("Upgrade"), res2.Header.Get("Connection"), echo, err)
	}
	if got[0] != got[1] || !strings.Contains(got[0], "101") {
		t.Fatalf("WebSocket differs\nCaddy's path: %s\nfast path:    %s", got[0], got[1])
	}
}

// TestOffWhenUnsupported: a server with an option the plan does not honour
// (expected_underscore_headers) stays wholly on Caddy's path, named with
// the reason, and answers as Caddy: the option is never ignored.
func TestOffWhenUnsupported(t *testing.T) {
	caddytester.Load(t, adminPort, twin(twinOpts{serverOpts: `		expected_underscore_headers X_Token`}, `	respond "{http.request.header.X_Token}" 200`))
	s := stats(t, "fast")
	if s.On || s.Reason != "expected_underscore_headers" {
		t.Fatalf("want the fast path off for expected_underscore_headers, got %+v", s)
	}
	compareSeq(t, []difftest.Request{{Method: "GET", Path: "/", Header: http.Header{"X_token": {"t"}}}})
	if st := stats(t, "fast"); st.Served != 0 {
		t.Fatalf("the plan served %d requests of a server it is off for", st.Served)
	}
}

// TestDelegated: a request the plan does not take, but that changes no
// protocol (an absolute-form target, an ACME HTTP challenge), is served
// through Caddy's server handler on the fast path's own connection, which
// then goes on serving on the plan: no hand-off, and
// gateway_fastpath_delegated_total counts it with the reason.
func TestDelegated(t *testing.T) {
	up := newEchoUpstream(t)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	raw := "GET http://example.com/abs?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n" +
		"GET /.well-known/acme-challenge/token HTTP/1.1\r\nHost: example.com\r\n\r\n" +
		"GET /plan HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n" // (no probe after it: the plan would serve that too)
	before := stats(t, "fast")
	reasons := func() map[string]float64 {
		out := map[string]float64{}
		for _, r := range []string{"request-target form", "ACME HTTP challenge"} {
			out[r] = counterValue(delegatedTotal.WithLabelValues("fast", r))
		}
		return out
	}
	r0 := reasons()
	plain := rawExchange(t, plainPort, raw)
	fast := rawExchange(t, fastPort, raw)
	if !reflect.DeepEqual(plain, fast) || len(fast.Responses) != 3 {
		t.Fatalf("results differ\nCaddy's path:%v\nfast path:   %v", plain, fast)
	}
	after := stats(t, "fast")
	if d := after.Delegated - before.Delegated; d != 2 {
		t.Errorf("delegated %d requests, want 2", d)
	}
	if d := after.HandedOff - before.HandedOff; d != 0 {
		t.Errorf("handed off %d connections, want none", d)
	}
	if d := after.Served - before.Served; d != 1 {
		t.Errorf("the plan served %d requests, want 1 (the third, on the same connection)", d)
	}
	for r, v := range reasons() {
		if v-r0[r] != 1 {
			t.Errorf("gateway_fastpath_delegated_total{reason=%q} went up by %v, want 1", r, v-r0[r])
		}
	}
}
