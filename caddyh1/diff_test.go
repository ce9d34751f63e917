package caddyh1

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/apigate/gateway/internal/caddytester"
)

// Ports of this package: admin 2909, listeners 20100-20199 (bench/ uses
// 2910-2919 and 19900-19999; the other packages 2901-2908 and 2917-2927).
const (
	adminPort = 2909
	httpPort  = 20102 // reverse_proxy with transport http
	h1Port    = 20103 // reverse_proxy with transport h1
)

// startCaddy loads config into the in-process Caddy of this test binary.
func startCaddy(t *testing.T, config string) { caddytester.Load(t, adminPort, config) }

func globalOptions() string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port 20100
	https_port 20101
	grace_period 1ms
	log {
		level ERROR
	}
}
`, adminPort)
}

// bigField is a header field of n bytes.
func bigField(name string, n int) string {
	return name + ": " + strings.Repeat("v", n) + "\r\n"
}

// differential is the table of upstream behaviours that both transports
// must turn into the same client-visible result.
var differential = map[string]func(c net.Conn, req *http.Request, body []byte) bool{
	"/fixed": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Up: 1\r\nContent-Length: 5\r\n\r\nhello")
	},
	"/chunked": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// (with a Content-Type: without one, whether the client gets a
		// sniffed one depends on a race in Caddy's flushing of streams)
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")
	},
	"/trailers": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n")
	},
	"/head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n")
	},
	"/204": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 204 No Content\r\nX-Up: 204\r\n\r\n")
	},
	"/304": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 304 Not Modified\r\nEtag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n")
	},
	"/continue": func(c net.Conn, _ *http.Request, body []byte) bool {
		return reply(c, fmt.Sprintf("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	},
	"/early-hints": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nLink: </a.css>; rel=preload\r\nContent-Length: 2\r\n\r\nok")
	},
	"/close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		reply(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose")
		return false
	},
	"/eof": func(c net.Conn, _ *http.Request, _ []byte) bool {
		reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe body ends when the connection does")
		return false
	},
	"/idle-close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// answer, then close the idle connection a little later
		reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nidle")
		time.Sleep(50 * time.Millisecond)
		return false
	},
	"/slow-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		time.Sleep(300 * time.Millisecond)
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
	},
	"/too-slow": func(c net.Conn, _ *http.Request, _ []byte) bool {
		time.Sleep(1500 * time.Millisecond) // response_header_timeout is 1s
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
	},
	"/big-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 200 OK\r\n"+bigField("X-Big", 100<<10)+"Content-Length: 2\r\n\r\nok")
	},
	"/huge-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// over max_response_header (256KB) in both configs
		return reply(c, "HTTP/1.1 200 OK\r\n"+bigField("X-Huge", 300<<10)+"Content-Length: 2\r\n\r\nok")
	},
	"/large": func(c net.Conn, _ *http.Request, _ []byte) bool {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(largeBody))
		_, err := c.Write(largeBody)
		return err == nil
	},
	"/large-chunked": func(c net.Conn, _ *http.Request, _ []byte) bool {
		reply(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for b := largeBody; len(b) > 0; {
			n := min(len(b), 7777)
			fmt.Fprintf(c, "%x\r\n", n)
			c.Write(b[:n])
			reply(c, "\r\n")
			b = b[n:]
		}
		return reply(c, "0\r\n\r\n")
	},
	"/early-close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return false // close without an answer
	},
	"/cut-body": func(c net.Conn, _ *http.Request, _ []byte) bool {
		reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
		return false
	},
	"/cookies": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return reply(c, "HTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n")
	},
	"/echo": func(c net.Conn, req *http.Request, body []byte) bool {
		// what the upstream received: method, framing, body digest, trailers
		host, _, _ := strings.Cut(req.Host, ":") // the port is each site's own
		info := fmt.Sprintf("%s %s cl=%q te=%q len=%d sha=%x trailer=%q expect=%q host=%q",
			req.Method, req.RequestURI, req.Header.Get("Content-Length"), req.TransferEncoding, len(body),
			sha256.Sum256(body), req.Trailer.Get("X-Sum"), req.Header.Get("Expect"), host)
		return reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(info), info))
	},
}

var largeBody = bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MB

// clientResult is what a client sees of one exchange through Caddy.
type clientResult struct {
	Status  int
	Header  http.Header
	Body    string
	Trailer http.Header
	Info    []int // 1xx status codes received
	Err     string
}

func (r clientResult) String() string {
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "status %d, 1xx %v, err %q\n", r.Status, r.Info, r.Err)
	for _, k := range keys {
		v := strings.Join(r.Header[k], " | ")
		fmt.Fprintf(&b, "  %s: %s\n", k, truncate(v))
	}
	body := r.Body
	if len(body) > 300 {
		body = truncate(body)
	}
	fmt.Fprintf(&b, "  trailer %v\n  body (%d bytes) %q", r.Trailer, len(r.Body), body)
	return b.String()
}

type request struct {
	method, path string
	body         func() io.Reader // nil: none
	length       int64            // of body; -1: unknown (chunked)
	header       http.Header
	trailer      http.Header
}

func do(client *http.Client, port int, rq request) clientResult {
	var body io.Reader
	if rq.body != nil {
		body = rq.body()
	}
	req, err := http.NewRequest(rq.method, fmt.Sprintf("http://127.0.0.1:%d%s", port, rq.path), body)
	if err != nil {
		return clientResult{Err: err.Error()}
	}
	if rq.body != nil {
		req.ContentLength = rq.length
	}
	for k, v := range rq.header {
		req.Header[k] = v
	}
	if rq.trailer != nil {
		req.Trailer = rq.trailer.Clone()
	}
	var res clientResult
	var mu sync.Mutex
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		mu.Lock()
		res.Info = append(res.Info, code)
		mu.Unlock()
		return nil
	}}
	req = req.WithContext(httptrace.WithClientTrace(context.Background(), trace))
	resp, err := client.Do(req)
	if err != nil {
		res.Err = "request failed"
		return res
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	res.Status, res.Header, res.Body, res.Trailer = resp.StatusCode, resp.Header, string(b), resp.Trailer
	if err != nil {
		res.Err = "body cut short"
	}
	delete(res.Header, "Date")
	if len(res.Trailer) == 0 {
		res.Trailer = nil
	}
	if len(res.Body) > 1<<20 {
		res.Body = fmt.Sprintf("%d bytes, sha256 %x", len(res.Body), sha256.Sum256([]byte(res.Body)))
	}
	return res
}

// TestDifferential sends the same requests through Caddy's reverse_proxy
// with `transport http` and with `transport h1`, to the same scripted
// upstream, and expects the client to see the same thing.
func TestDifferential(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		h := differential[req.URL.Path]
		if h == nil {
			return reply(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
		}
		return h(c, req, body)
	})
	startCaddy(t, globalOptions()+fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	reverse_proxy %[3]s {
		transport http {
			response_header_timeout 1s
			max_response_header 256KB
		}
	}
}
http://127.0.0.1:%[2]d {
	reverse_proxy %[3]s {
		transport h1 {
			response_header_timeout 1s
			max_response_header 256KB
		}
	}
}
`, httpPort, h1Port, u.addr()))

	slowBody := func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < 5; i++ {
				time.Sleep(20 * time.Millisecond)
				fmt.Fprintf(pw, "part %d;", i)
			}
			pw.Close()
		}()
		return pr
	}
	mb := bytes.Repeat([]byte("x"), 1<<20)
	tests := []struct {
		name string
		seq  []request // sent in order on one client
	}{
		{"fixed length", []request{{method: "GET", path: "/fixed"}}},
		{"chunked", []request{{method: "GET", path: "/chunked"}}},
		{"trailers", []request{{method: "GET", path: "/trailers"}}},
		{"HEAD", []request{{method: "HEAD", path: "/head"}, {method: "GET", path: "/fixed"}}},
		{"204", []request{{method: "GET", path: "/204"}, {method: "GET", path: "/fixed"}}},
		{"304", []request{{method: "GET", path: "/304", header: http.Header{"If-None-Match": {`"v1"`}}}}},
		{"100-continue", []request{{method: "POST", path: "/continue", body: func() io.Reader { return strings.NewReader("payload") },
			length: 7, header: http.Header{"Expect": {"100-continue"}}}}},
		{"103 early hints", []request{{method: "GET", path: "/early-hints"}}},
		{"Connection: close", []request{{method: "GET", path: "/close"}, {method: "GET", path: "/fixed"}}},
		{"body until close", []request{{method: "GET", path: "/eof"}, {method: "GET", path: "/fixed"}}},
		{"upstream closes idle connections", []request{{method: "GET", path: "/idle-close"}, {method: "GET", path: "/idle-close"},
			{method: "POST", path: "/echo", body: func() io.Reader { return strings.NewReader("after idle close") }, length: 16}}},
		{"slow head", []request{{method: "GET", path: "/slow-head"}}},
		{"head slower than response_header_timeout", []request{{method: "GET", path: "/too-slow"}}},
		{"100 KB head", []request{{method: "GET", path: "/big-head"}}},
		{"head over max_response_header", []request{{method: "GET", path: "/huge-head"}, {method: "GET", path: "/fixed"}}},
		{"32 MB body", []request{{method: "GET", path: "/large"}}},
		{"32 MB chunked body", []request{{method: "GET", path: "/large-chunked"}}},
		{"upstream closes without answering", []request{{method: "GET", path: "/early-close"}, {method: "GET", path: "/fixed"}}},
		{"body cut short", []request{{method: "GET", path: "/cut-body"}, {method: "GET", path: "/fixed"}}},
		{"repeated fields", []request{{method: "GET", path: "/cookies"}}},
		{"fixed request body", []request{{method: "PUT", path: "/echo", body: func() io.Reader { return bytes.NewReader(mb) }, length: int64(len(mb))}}},
		{"chunked request body with trailers", []request{{method: "POST", path: "/echo",
			body: func() io.Reader { return io.MultiReader(strings.NewReader("abc"), strings.NewReader("def")) }, length: -1,
			trailer: http.Header{"X-Sum": {"7"}}}}},
		{"streamed request body", []request{{method: "POST", path: "/echo", body: slowBody, length: -1}}},
		{"empty POST", []request{{method: "POST", path: "/echo"}}},
		{"query and escaped path", []request{{method: "GET", path: "/echo?q=a%20b&x"}, {method: "GET", path: "/echo/%2F/..%2Fb"}}},
		{"unknown path", []request{{method: "DELETE", path: "/nope"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got [2][]clientResult
			for i, port := range []int{httpPort, h1Port} {
				client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 20 * time.Second}
				for _, rq := range tc.seq {
					got[i] = append(got[i], do(client, port, rq))
				}
				client.CloseIdleConnections()
			}
			for j := range tc.seq {
				if !reflect.DeepEqual(got[0][j], got[1][j]) {
					t.Errorf("request %d (%s %s) differs\ntransport http: %v\ntransport h1:   %v",
						j, tc.seq[j].method, tc.seq[j].path, got[0][j], got[1][j])
				}
			}
		})
	}
}
