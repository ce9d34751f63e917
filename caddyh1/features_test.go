package caddyh1

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"github.com/apigate/gateway/internal/testkit/caddytester"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// backend is a net/http server on a real socket that counts its requests.
type backend struct {
	name string
	srv  *http.Server
	ln   net.Listener
	hits atomic.Int64
}

func newBackend(t *testing.T, name string, h http.HandlerFunc) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, ln: ln}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		w.Header().Set("X-Backend", name)
		h(w, r)
	})}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *backend) addr() string { return b.ln.Addr().String() }

func fetch(t *testing.T, method, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// TestReverseProxyFeatures: what users configure on reverse_proxy works
// with transport h1 as with the standard transport (the same checks run
// with both).
func TestReverseProxyFeatures(t *testing.T) {
	for _, transport := range []string{"http", "h1"} {
		t.Run(transport, func(t *testing.T) { testFeatures(t, transport) })
	}
}

func testFeatures(t *testing.T, transport string) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s up=%s", r.URL.Path, r.Header.Get("X-Up"))
	}
	a := newBackend(t, "a", echo)
	b := newBackend(t, "b", echo)
	var healthy atomic.Bool
	healthy.Store(true)
	flaky := newBackend(t, "flaky", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !healthy.Load() {
			w.WriteHeader(503)
			return
		}
		echo(w, r)
	})
	sse := newBackend(t, "sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
		}
	})
	ws := newBackend(t, "ws", websocketEcho)
	// a dead address for retries: listen, then close
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	sock := filepath.Join(t.TempDir(), "up.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	usrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over a unix socket")
	})}
	go usrv.Serve(uln)
	t.Cleanup(func() { usrv.Close(); os.Remove(sock) })

	// (not a test of reloads: the previous subtest's servers on this port
	// go first, or one of them may accept a request and close it with EOF
	// as it finishes shutting down: seen beside a busy loop, round robin)
	caddytester.StopServers(t, adminPort)
	startCaddy(t, globalOptions()+fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	handle /lb/* {
		reverse_proxy %[2]s %[3]s {
			lb_policy round_robin
			transport %[9]s
		}
	}
	handle /retry/* {
		reverse_proxy %[4]s %[2]s {
			lb_policy round_robin
			lb_retries 2
			transport %[9]s
		}
	}
	handle /health/* {
		reverse_proxy %[5]s %[2]s {
			lb_policy first
			health_uri /health
			health_interval 100ms
			health_timeout 1s
			transport %[9]s
		}
	}
	handle /passive/* {
		reverse_proxy %[4]s %[3]s {
			lb_policy first
			fail_duration 10s
			max_fails 1
			transport %[9]s {
				dial_timeout 500ms
			}
		}
	}
	handle /headers/* {
		reverse_proxy %[2]s {
			header_up X-Up "from-caddy"
			header_down X-Down "to-client"
			header_down -X-Backend
			transport %[9]s
		}
	}
	handle /handled/* {
		reverse_proxy %[2]s {
			@ok status 2xx
			handle_response @ok {
				respond "handled {rp.header.X-Backend} {rp.status_code}"
			}
			transport %[9]s
		}
	}
	handle /sse/* {
		reverse_proxy %[6]s {
			flush_interval -1
			transport %[9]s
		}
	}
	handle /ws/* {
		reverse_proxy %[7]s {
			transport %[9]s
		}
	}
	handle /unix/* {
		reverse_proxy unix/%[8]s {
			transport %[9]s
		}
	}
}
`, h1Port, a.addr(), b.addr(), deadAddr, flaky.addr(), sse.addr(), ws.addr(), sock, transport))
	base := fmt.Sprintf("http://127.0.0.1:%d", h1Port)

	t.Run("round robin", func(t *testing.T) {
		seen := map[string]int{}
		for i := 0; i < 10; i++ {
			res, body := fetch(t, "GET", base+"/lb/x", nil)
			if res.StatusCode != 200 || !strings.HasPrefix(body, "path=/lb/x") {
				t.Fatalf("%d %q", res.StatusCode, body)
			}
			seen[res.Header.Get("X-Backend")]++
		}
		if seen["a"] != 5 || seen["b"] != 5 {
			t.Fatalf("round robin spread %v, want 5 and 5", seen)
		}
	})
	t.Run("retry after a dial error", func(t *testing.T) {
		// round robin sends every other request to the dead address first;
		// Caddy retries a POST only when the transport reports a dial error
		for i := 0; i < 4; i++ {
			res, body := fetch(t, "POST", base+"/retry/x", nil)
			if res.StatusCode != 200 || res.Header.Get("X-Backend") != "a" {
				t.Fatalf("%d %q from %q, want a retry on a", res.StatusCode, body, res.Header.Get("X-Backend"))
			}
		}
	})
	t.Run("active health checks", func(t *testing.T) {
		if res, _ := fetch(t, "GET", base+"/health/x", nil); res.Header.Get("X-Backend") != "flaky" {
			t.Fatalf("healthy flaky not chosen first: %q", res.Header.Get("X-Backend"))
		}
		healthy.Store(false)
		deadline := time.Now().Add(5 * time.Second)
		for {
			res, _ := fetch(t, "GET", base+"/health/x", nil)
			if res.Header.Get("X-Backend") == "a" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("an upstream failing its health checks still gets requests")
			}
			time.Sleep(50 * time.Millisecond)
		}
		healthy.Store(true)
	})
	t.Run("passive health checks", func(t *testing.T) {
		res, _ := fetch(t, "GET", base+"/passive/x", nil)
		if res.StatusCode != 502 {
			t.Fatalf("first request to a dead upstream: %d, want 502", res.StatusCode)
		}
		res, _ = fetch(t, "GET", base+"/passive/x", nil)
		if res.StatusCode != 200 || res.Header.Get("X-Backend") != "b" {
			t.Fatalf("after a failure: %d from %q, want the other upstream", res.StatusCode, res.Header.Get("X-Backend"))
		}
	})
	t.Run("header_up and header_down", func(t *testing.T) {
		res, body := fetch(t, "GET", base+"/headers/x", nil)
		if body != "path=/headers/x up=from-caddy" || res.Header.Get("X-Down") != "to-client" || res.Header.Get("X-Backend") != "" {
			t.Fatalf("%q, headers %v", body, res.Header)
		}
	})
	t.Run("handle_response", func(t *testing.T) {
		_, body := fetch(t, "GET", base+"/handled/x", nil)
		if body != "handled a 200" {
			t.Fatalf("%q", body)
		}
	})
	t.Run("flush_interval -1 streams events as they come", func(t *testing.T) {
		res, err := http.Get(base + "/sse/x")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		start := time.Now()
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || line != "data: 0\n" {
			t.Fatalf("%q, %v", line, err)
		}
		if d := time.Since(start); d > 250*time.Millisecond {
			t.Fatalf("the first event took %v: it was held back", d)
		}
	})
	t.Run("websocket upgrade", func(t *testing.T) {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", h1Port))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
		fmt.Fprintf(conn, "GET /ws/x HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", res, err)
		}
		conn.Write([]byte("ping over the upgraded connection"))
		buf := make([]byte, 33)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping over the upgraded connection" {
			t.Fatalf("echo %q, %v", buf, err)
		}
	})
	t.Run("unix socket upstream", func(t *testing.T) {
		res, body := fetch(t, "GET", base+"/unix/x", nil)
		if res.StatusCode != 200 || body != "over a unix socket" {
			t.Fatalf("%d %q", res.StatusCode, body)
		}
	})
}

// websocketEcho accepts a WebSocket handshake and then echoes raw bytes.
func websocketEcho(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "want an upgrade", 400)
		return
	}
	h := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(h[:]))
	brw.Flush()
	io.Copy(conn, brw)
}

// TestConfigErrors: a bad transport h1 block fails at config load, naming
// what is wrong.
func TestConfigErrors(t *testing.T) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, tc := range []struct{ name, block, want string }{
		{"unknown option", "transport h1 {\n\t\t\tdial_timout 1s\n\t\t}", "unrecognized subdirective 'dial_timout'"},
		{"bad duration", "transport h1 {\n\t\t\tkeepalive forever\n\t\t}", `invalid keepalive "forever"`},
		{"negative count", "transport h1 {\n\t\t\tmax_conns_per_host -1\n\t\t}", `invalid max_conns_per_host "-1"`},
		{"bad size", "transport h1 {\n\t\t\tread_buffer lots\n\t\t}", `invalid read_buffer "lots"`},
		{"missing value", "transport h1 {\n\t\t\tdial_timeout\n\t\t}", "wrong argument count"},
		{"extra value", "transport h1 {\n\t\t\tdial_timeout 1s 2s\n\t\t}", "wrong argument count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := fmt.Sprintf(":8080 {\n\treverse_proxy 127.0.0.1:9 {\n\t\t%s\n\t}\n}\n", tc.block)
			_, _, err := adapter.Adapt([]byte(cf), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("https upstream", func(t *testing.T) {
		cf := ":8080 {\n\treverse_proxy https://127.0.0.1:9 {\n\t\ttransport h1\n\t}\n}\n"
		_, _, err := adapter.Adapt([]byte(cf), nil)
		if err == nil || !strings.Contains(err.Error(), "does not support TLS") {
			t.Fatalf("error %v, want HTTPS upstreams refused", err)
		}
	})
	t.Run("Validate", func(t *testing.T) {
		for _, tc := range []struct {
			tr   Transport
			want string
		}{
			{Transport{ReadBuffer: 16}, "invalid read_buffer 16"},
			{Transport{ReadBuffer: 8192, MaxResponseHeaderSize: 4096}, "smaller than read_buffer"},
			{Transport{DialTimeout: -1}, "invalid dial_timeout"},
		} {
			if err := tc.tr.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: %v, want %q", tc.tr, err, tc.want)
			}
		}
	})
}

// TestPoolOutlivesReload: transports with the same settings share one pool
// across config loads, so a reload does not dial the upstreams again.
func TestPoolOutlivesReload(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	up := newBackend(t, "up", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	config := func(n int) string {
		return globalOptions() + fmt.Sprintf(`
http://127.0.0.1:%d {
	respond /version "%d"
	reverse_proxy %s {
		transport h1 {
			keepalive 1m
		}
	}
}
`, h1Port, n, up.addr())
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", h1Port)
	for n := 1; n <= 3; n++ {
		startCaddy(t, config(n))
		if _, body := fetch(t, "GET", base+"/version", nil); body != fmt.Sprint(n) {
			t.Fatalf("config %d not loaded: %q", n, body)
		}
		for i := 0; i < 5; i++ {
			fetch(t, "GET", base+"/x", nil)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d upstream connections over 3 config loads, want 1", len(conns))
	}
}
