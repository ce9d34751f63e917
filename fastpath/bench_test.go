package fastpath

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/golang-jwt/jwt/v5"
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyrbac"
)

// rawBackend answers every request on a connection with the same fixed
// response, reading request heads without allocating: the benchmarks
// below then count the proxy's allocations, not the backend's.
func rawBackend(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 72\r\n\r\n" +
		`{"ok":true,"service":"backend","payload":"aaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 16<<10)
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += k
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						c.Write(resp)
						copy(buf, buf[i+4:n])
						n -= i + 4
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// benchProxy sends b.N GET requests, one at a time on one keep-alive
// connection, through the server on port, and reads each response.
func benchProxy(b *testing.B, port int) { benchProxyWith(b, port, "") }

// benchProxyWith is benchProxy with extra header lines in each request.
func benchProxyWith(b *testing.B, port int, extra string) {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /bench HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n" + extra + "\r\n")
	br := bufio.NewReaderSize(c, 16<<10)
	readOne := func() {
		// status line and fields up to the blank line, then the body
		cl := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) == 2 {
				break
			}
			if bytes.HasPrefix(line, []byte("Content-Length: ")) {
				cl = 0 // (by hand: fmt.Sscanf allocates, and would count as the proxy's)
				for _, d := range bytes.TrimSpace(line[16:]) {
					cl = cl*10 + int(d-'0')
				}
			}
		}
		if _, err := br.Discard(cl); err != nil {
			b.Fatal(err)
		}
	}
	c.Write(req)
	readOne()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		readOne()
	}
}

// BenchmarkProxy compares one proxied request on Caddy's path and on the
// fast path (same config, same backend, one client connection): ns and
// allocations per request of the whole process, the client and backend
// being allocation-free.
//
//	go test ./fastpath -run '^$' -bench Proxy -benchmem
func BenchmarkProxy(b *testing.B) {
	backend := rawBackend(b)
	cfg := twin(twinOpts{}, fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, backend))
	loadBench(b, cfg)
	benchRequireFast(b)
	b.Run("caddy", func(b *testing.B) { benchProxy(b, plainPort) })
	b.Run("fastpath", func(b *testing.B) { benchProxy(b, fastPort) })
}

var _ = io.Discard

// BenchmarkIdleConns reports the memory an idle keep-alive client
// connection holds (heap and stacks, after a GC), on each path: 2,000
// connections each send one request and stay open.
//
//	go test ./fastpath -run '^$' -bench IdleConns -benchtime 1x
func BenchmarkIdleConns(b *testing.B) {
	backend := rawBackend(b)
	cfg := twin(twinOpts{}, fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, backend))
	loadBench(b, cfg)
	const n = 2000
	for _, tc := range []struct {
		name string
		port int
	}{{"caddy", plainPort}, {"fastpath", fastPort}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				before := memInUse()
				conns := make([]net.Conn, 0, n)
				for j := 0; j < n; j++ {
					c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", tc.port))
					if err != nil {
						b.Fatal(err)
					}
					c.Write([]byte("GET /idle HTTP/1.1\r\nHost: example.com\r\n\r\n"))
					buf := make([]byte, 4096)
					if _, err := c.Read(buf); err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
				}
				time.Sleep(200 * time.Millisecond)
				after := memInUse()
				b.ReportMetric(float64(after-before)/n, "bytes/conn")
				for _, c := range conns {
					c.Close()
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// memInUse is the process's heap and stack in use after a GC (the client
// side of the connections included: a net.Conn and a 4 KB buffer each,
// the same on both paths).
func memInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// BenchmarkDuties is BenchmarkProxy with every duty on the route (audit to
// a file, jwt_auth HS256 with one token, rbac, rate_limit per user, a
// cached permission check): the duties' cost on each path.
//
//	go test ./fastpath -run '^$' -bench Duties -benchmem
func BenchmarkDuties(b *testing.B) {
	backend := rawBackend(b)
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.WriteHeader(200)
	}))
	b.Cleanup(perm.Close)
	dir := b.TempDir()
	const secret = "bench-secret-bench-secret-bench-secret"
	cfg := twin(twinOpts{globals: fmt.Sprintf(`	audit {
		sink file %s/audit.jsonl
	}`, dir)}, fmt.Sprintf(`	route {
		audit
		jwt_auth {
			hmac_secret %[1]s
		}
		rbac {
			roles_claim roles
			require any reader
		}
		rate_limit {
			zone per_user {
				key {http.auth.user.id}
				events 50000
				window 1s
			}
		}
		permission {
			url %[2]s/check
		}
		reverse_proxy %[3]s {
			transport h1
		}
	}`, secret, perm.URL, backend))
	loadBench(b, cfg)
	benchRequireFast(b)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "bench", "roles": []string{"reader"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		b.Fatal(err)
	}
	auth := "Authorization: Bearer " + tok + "\r\n"
	for _, tc := range []struct {
		name string
		port int
	}{{"caddy", plainPort}, {"fastpath", fastPort}} {
		b.Run(tc.name, func(b *testing.B) { benchProxyWith(b, tc.port, auth) })
	}
}

func benchRequireFast(b *testing.B) {
	for _, s := range Status() {
		if s.Server == "fast" && s.On {
			return
		}
	}
	b.Fatalf("the fast path is off for server fast: %+v", Status())
}

// loadBench loads a Caddyfile into the benchmark binary's Caddy.
func loadBench(b *testing.B, cfg string) {
	b.Helper()
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := caddy.Load(js, true); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { caddy.Stop() })
}

// BenchmarkProxyH2 is BenchmarkProxy over HTTP/2 (h2c with prior
// knowledge, x/net's client: its allocations count on both paths): one
// request at a time on one connection, then 64 at once (streams of one
// connection, RunParallel).
//
//	go test ./fastpath -run '^$' -bench ProxyH2 -benchmem
func BenchmarkProxyH2(b *testing.B) {
	backend := rawBackend(b)
	cfg := twin(twinOpts{serverOpts: "\t\tprotocols h1 h2c"}, fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, backend))
	loadBench(b, cfg)
	benchRequireFast(b)
	for _, p := range []struct {
		name string
		port int
	}{{"caddy", plainPort}, {"fastpath", fastPort}} {
		client := h2cClient()
		url := fmt.Sprintf("http://127.0.0.1:%d/bench", p.port)
		get := func(b *testing.B) {
			res, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		b.Run(p.name, func(b *testing.B) {
			get(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				get(b)
			}
		})
		b.Run(p.name+"-streams", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					get(b)
				}
			})
		})
		client.CloseIdleConnections()
	}
}
