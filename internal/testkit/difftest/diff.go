package difftest

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
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// bigField is a header field of n bytes.
func bigField(name string, n int) string {
	return name + ": " + strings.Repeat("v", n) + "\r\n"
}

// Behaviours is the table of upstream behaviours, by request path, that
// both paths under test must turn into the same client-visible result.
var Behaviours = map[string]func(c net.Conn, req *http.Request, body []byte) bool{
	"/fixed": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Up: 1\r\nContent-Length: 5\r\n\r\nhello")
	},
	"/chunked": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// (with a Content-Type: without one, whether the client gets a
		// sniffed one depends on a race in Caddy's flushing of streams)
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")
	},
	"/trailers": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n")
	},
	"/head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n")
	},
	"/204": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 204 No Content\r\nX-Up: 204\r\n\r\n")
	},
	"/304": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 304 Not Modified\r\nEtag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n")
	},
	"/continue": func(c net.Conn, _ *http.Request, body []byte) bool {
		return Reply(c, fmt.Sprintf("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	},
	"/early-hints": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nLink: </a.css>; rel=preload\r\nContent-Length: 2\r\n\r\nok")
	},
	"/close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		Reply(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose")
		return false
	},
	"/eof": func(c net.Conn, _ *http.Request, _ []byte) bool {
		Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe body ends when the connection does")
		return false
	},
	"/idle-close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// answer, then close the idle connection a little later
		Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nidle")
		time.Sleep(50 * time.Millisecond)
		return false
	},
	"/slow-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		time.Sleep(300 * time.Millisecond)
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
	},
	"/too-slow": func(c net.Conn, _ *http.Request, _ []byte) bool {
		time.Sleep(1500 * time.Millisecond) // response_header_timeout is 1s
		return Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
	},
	"/big-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 200 OK\r\n"+bigField("X-Big", 100<<10)+"Content-Length: 2\r\n\r\nok")
	},
	"/huge-head": func(c net.Conn, _ *http.Request, _ []byte) bool {
		// over max_response_header (256KB) in both configs
		return Reply(c, "HTTP/1.1 200 OK\r\n"+bigField("X-Huge", 300<<10)+"Content-Length: 2\r\n\r\nok")
	},
	"/large": func(c net.Conn, _ *http.Request, _ []byte) bool {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(LargeBody))
		_, err := c.Write(LargeBody)
		return err == nil
	},
	"/large-chunked": func(c net.Conn, _ *http.Request, _ []byte) bool {
		Reply(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for b := LargeBody; len(b) > 0; {
			n := min(len(b), 7777)
			fmt.Fprintf(c, "%x\r\n", n)
			c.Write(b[:n])
			Reply(c, "\r\n")
			b = b[n:]
		}
		return Reply(c, "0\r\n\r\n")
	},
	"/early-close": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return false // close without an answer
	},
	"/cut-body": func(c net.Conn, _ *http.Request, _ []byte) bool {
		Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
		return false
	},
	"/cookies": func(c net.Conn, _ *http.Request, _ []byte) bool {
		return Reply(c, "HTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n")
	},
	"/echo": func(c net.Conn, req *http.Request, body []byte) bool {
		// what the upstream received: method, framing, body digest, trailers
		host, _, _ := strings.Cut(req.Host, ":") // the port is each site's own
		info := fmt.Sprintf("%s %s cl=%q te=%q len=%d sha=%x trailer=%q expect=%q host=%q",
			req.Method, req.RequestURI, req.Header.Get("Content-Length"), req.TransferEncoding, len(body),
			sha256.Sum256(body), req.Trailer.Get("X-Sum"), req.Header.Get("Expect"), host)
		return Reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(info), info))
	},
}

var LargeBody = bytes.Repeat([]byte("0123456789abcdef"), 2<<20) // 32 MB

// ClientResult is what a client sees of one exchange through Caddy.
type ClientResult struct {
	Status  int
	Header  http.Header
	Body    string
	Trailer http.Header
	Info    []int // 1xx status codes received
	Err     string
}

func (r ClientResult) String() string {
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

type Request struct {
	Method, Path string
	Body         func() io.Reader // nil: none
	Length       int64            // of body; -1: unknown (chunked)
	Header       http.Header
	Trailer      http.Header
}

// Do sends rq to http://127.0.0.1:port with client and records what it
// sees.
func Do(client *http.Client, port int, rq Request) ClientResult {
	return DoURL(client, fmt.Sprintf("http://127.0.0.1:%d", port), rq)
}

// DoURL sends rq to base (scheme, host and port) with client and records
// what it sees.
func DoURL(client *http.Client, base string, rq Request) ClientResult {
	var body io.Reader
	if rq.Body != nil {
		body = rq.Body()
	}
	req, err := http.NewRequest(rq.Method, base+rq.Path, body)
	if err != nil {
		return ClientResult{Err: err.Error()}
	}
	if rq.Body != nil {
		req.ContentLength = rq.Length
	}
	for k, v := range rq.Header {
		req.Header[k] = v
	}
	if h := rq.Header.Get("Host"); h != "" {
		req.Host = h
	}
	if rq.Trailer != nil {
		req.Trailer = rq.Trailer.Clone()
	}
	var res ClientResult
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
		// (the paths' error texts differ; the cause goes to the test
		// binary's output, shown when a comparison fails)
		fmt.Fprintf(os.Stderr, "difftest: %s %s%s failed: %v\n", rq.Method, base, rq.Path, err)
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

// Case is a named sequence of requests sent in order on one client.
type Case struct {
	Name string
	Seq  []Request
}

// Cases is the table of requests that TestDifferential sends; each path
// selects one of Behaviours.
func Cases() []Case {
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
	return []Case{
		{"fixed length", []Request{{Method: "GET", Path: "/fixed"}}},
		{"chunked", []Request{{Method: "GET", Path: "/chunked"}}},
		{"trailers", []Request{{Method: "GET", Path: "/trailers"}}},
		{"HEAD", []Request{{Method: "HEAD", Path: "/head"}, {Method: "GET", Path: "/fixed"}}},
		{"204", []Request{{Method: "GET", Path: "/204"}, {Method: "GET", Path: "/fixed"}}},
		{"304", []Request{{Method: "GET", Path: "/304", Header: http.Header{"If-None-Match": {`"v1"`}}}}},
		{"100-continue", []Request{{Method: "POST", Path: "/continue", Body: func() io.Reader { return strings.NewReader("payload") },
			Length: 7, Header: http.Header{"Expect": {"100-continue"}}}}},
		{"103 early hints", []Request{{Method: "GET", Path: "/early-hints"}}},
		{"Connection: close", []Request{{Method: "GET", Path: "/close"}, {Method: "GET", Path: "/fixed"}}},
		{"body until close", []Request{{Method: "GET", Path: "/eof"}, {Method: "GET", Path: "/fixed"}}},
		{"upstream closes idle connections", []Request{{Method: "GET", Path: "/idle-close"}, {Method: "GET", Path: "/idle-close"},
			{Method: "POST", Path: "/echo", Body: func() io.Reader { return strings.NewReader("after idle close") }, Length: 16}}},
		{"slow head", []Request{{Method: "GET", Path: "/slow-head"}}},
		{"head slower than response_header_timeout", []Request{{Method: "GET", Path: "/too-slow"}}},
		{"100 KB head", []Request{{Method: "GET", Path: "/big-head"}}},
		{"head over max_response_header", []Request{{Method: "GET", Path: "/huge-head"}, {Method: "GET", Path: "/fixed"}}},
		{"32 MB body", []Request{{Method: "GET", Path: "/large"}}},
		{"32 MB chunked body", []Request{{Method: "GET", Path: "/large-chunked"}}},
		{"upstream closes without answering", []Request{{Method: "GET", Path: "/early-close"}, {Method: "GET", Path: "/fixed"}}},
		{"body cut short", []Request{{Method: "GET", Path: "/cut-body"}, {Method: "GET", Path: "/fixed"}}},
		{"repeated fields", []Request{{Method: "GET", Path: "/cookies"}}},
		{"fixed request body", []Request{{Method: "PUT", Path: "/echo", Body: func() io.Reader { return bytes.NewReader(mb) }, Length: int64(len(mb))}}},
		{"chunked request body with trailers", []Request{{Method: "POST", Path: "/echo",
			Body: func() io.Reader { return io.MultiReader(strings.NewReader("abc"), strings.NewReader("def")) }, Length: -1,
			Trailer: http.Header{"X-Sum": {"7"}}}}},
		{"streamed request body", []Request{{Method: "POST", Path: "/echo", Body: slowBody, Length: -1}}},
		{"empty POST", []Request{{Method: "POST", Path: "/echo"}}},
		{"query and escaped path", []Request{{Method: "GET", Path: "/echo?q=a%20b&x"}, {Method: "GET", Path: "/echo/%2F/..%2Fb"}}},
		{"unknown path", []Request{{Method: "DELETE", Path: "/nope"}}},
	}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
