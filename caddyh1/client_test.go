package caddyh1

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// upstream is a scripted HTTP/1.1 server on a real socket: for every
// request it reads (with net/http's parser) it calls handle with the
// connection and the request's number on that connection; handle writes
// whatever bytes it likes and says whether to keep reading requests.
type upstream = difftest.Upstream

type handleFunc = difftest.HandleFunc

func newUpstream(t testing.TB, handle handleFunc) *upstream { return difftest.NewUpstream(t, handle) }

func reply(c net.Conn, s string) bool { return difftest.Reply(c, s) }

const okResponse = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"

func newTestClient(t testing.TB, opts Options) *Client {
	c := NewClient(opts)
	t.Cleanup(c.Close)
	return c
}

func get(t testing.TB, c *Client, u *upstream, method, path string, body io.Reader) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+u.Addr()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RoundTrip(req, "tcp", u.Addr())
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b), err
}

func TestKeepAliveReuse(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{})
	for i := 0; i < 50; i++ {
		_, body, err := get(t, c, u, "GET", "/", nil)
		if err != nil || body != "hello" {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
	}
	st := c.Stats()
	if st.Dials != 1 || st.Reuses != 49 || u.Accepted.Load() != 1 {
		t.Fatalf("dials %d, reuses %d, accepted %d; want one connection for all", st.Dials, st.Reuses, u.Accepted.Load())
	}
}

func TestKeepAliveOff(t *testing.T) {
	var closes atomic.Int64
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.Close {
			closes.Add(1)
		}
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{MaxIdleConnsPerHost: -1})
	for i := 0; i < 3; i++ {
		if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
			t.Fatal(body, err)
		}
	}
	if st := c.Stats(); st.Dials != 3 || st.Open != 0 || closes.Load() != 3 {
		t.Fatalf("dials %d, open %d, Connection: close sent %d times; want a connection per request", st.Dials, st.Open, closes.Load())
	}
}

// TestStaleConnection: the upstream closes a kept-alive connection when
// the next request arrives, without answering (the race of an idle timeout
// with a new request). An idempotent request is sent once more on a new
// connection; a POST is never sent twice.
func TestStaleConnection(t *testing.T) {
	var posts atomic.Int64
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.Method == "POST" {
			posts.Add(1)
		}
		if n > 0 {
			return false // close without an answer
		}
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{})

	if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
		t.Fatal(body, err)
	}
	if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
		t.Fatalf("GET on a stale connection: %q, %v (want a retry)", body, err)
	}
	if st := c.Stats(); st.Retries != 1 {
		t.Fatalf("retries %d, want 1", st.Retries)
	}

	for _, tc := range []struct {
		name string
		body io.Reader
	}{{"POST with a body", strings.NewReader("pay=1")}, {"POST without a body", nil}} {
		posts.Store(0)
		// a fresh kept-alive connection: first request answered
		if _, _, err := get(t, c, u, "GET", "/", nil); err != nil {
			t.Fatal(err)
		}
		_, _, err := get(t, c, u, "POST", "/pay", tc.body)
		if err == nil {
			t.Fatalf("%s on a stale connection succeeded; it can only have been sent twice", tc.name)
		}
		if n := posts.Load(); n != 1 {
			t.Fatalf("%s: the upstream saw %d POSTs, want exactly 1", tc.name, n)
		}
	}
}

// TestIdleConnectionChecks: an idle connection that the upstream closed,
// or on which it sent bytes nobody asked for, is not used.
func TestIdleConnectionChecks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(c net.Conn) bool
	}{
		{"closed while idle", func(c net.Conn) bool { return false }},
		{"unasked bytes while idle", func(c net.Conn) bool {
			time.Sleep(20 * time.Millisecond)
			reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
			return true
		}},
		{"unasked bytes right after the body", func(c net.Conn) bool {
			return reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
				if !reply(c, okResponse) {
					return false
				}
				return tc.after(c)
			})
			c := newTestClient(t, Options{})
			if _, body, err := get(t, c, u, "POST", "/", strings.NewReader("x")); err != nil || body != "hello" {
				t.Fatal(body, err)
			}
			time.Sleep(100 * time.Millisecond) // let the upstream's FIN or bytes arrive
			_, body, err := get(t, c, u, "POST", "/", strings.NewReader("x"))
			if err != nil || body != "hello" {
				t.Fatalf("second request: %q, %v", body, err)
			}
			if u.Accepted.Load() != 2 {
				t.Fatalf("accepted %d connections, want a new one for the second request", u.Accepted.Load())
			}
		})
	}
}

func TestContextCancelFreesConnection(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/partial" {
			reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf")
		}
		<-release
		return false
	})
	c := newTestClient(t, Options{})

	t.Run("waiting for the head", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+u.Addr()+"/hang", nil)
		start := time.Now()
		_, err := c.RoundTrip(req, "tcp", u.Addr())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want the context's", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+u.Addr()+"/partial", nil)
		res, err := c.RoundTrip(req, "tcp", u.Addr())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(res.Body, buf); err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		if _, err := io.ReadAll(res.Body); err == nil {
			t.Fatal("read the rest of a body whose request was canceled")
		}
		res.Body.Close()
	})
	if st := c.Stats(); st.Open != 0 || st.Idle != 0 {
		t.Fatalf("after cancellations: %d connections open, %d idle; want none", st.Open, st.Idle)
	}
}

func TestMaxConnsPerHost(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		time.Sleep(30 * time.Millisecond)
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{MaxConnsPerHost: 2})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
				errs <- fmt.Errorf("%q, %v", body, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := u.MaxOpen.Load(); m > 2 {
		t.Fatalf("the upstream saw %d connections at once, want at most 2", m)
	}

	// a waiter whose context ends gives up, and leaves the pool usable
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var hold []*http.Response
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
		res, err := c.RoundTrip(req, "tcp", u.Addr())
		if err != nil {
			t.Fatal(err)
		}
		hold = append(hold, res) // bodies unread: both connections busy
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+u.Addr()+"/", nil)
	if _, err := c.RoundTrip(req, "tcp", u.Addr()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting beyond max_conns_per_host: %v", err)
	}
	for _, res := range hold {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
		t.Fatal(body, err)
	}
}

func TestIdleTimeout(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{IdleTimeout: 100 * time.Millisecond})
	if _, _, err := get(t, c, u, "GET", "/", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle connection outlived the idle timeout")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for u.Open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the upstream's side of the connection stayed open")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/slow" {
			time.Sleep(time.Second)
		}
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{ResponseHeaderTimeout: 100 * time.Millisecond})
	_, _, err := get(t, c, u, "GET", "/slow", nil)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("error %v, want a net.Error that is a timeout", err)
	}
	// the deadline does not outlive the head: a body slower than it is fine
	if _, body, err := get(t, c, u, "GET", "/", nil); err != nil || body != "hello" {
		t.Fatal(body, err)
	}
}

func TestResponseHeadBounded(t *testing.T) {
	big := strings.Repeat("x", 1000)
	head := func(fields int) string {
		var b strings.Builder
		b.WriteString("HTTP/1.1 200 OK\r\n")
		for i := 0; i < fields; i++ {
			fmt.Fprintf(&b, "X-F%d: %s\r\n", i, big)
		}
		b.WriteString("Content-Length: 5\r\n\r\nhello")
		return b.String()
	}
	large, huge := head(10), []byte(head(2000)) // 10 KB, 2 MB
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/huge" {
			_, err := c.Write(huge)
			return err == nil
		}
		return reply(c, large)
	})
	c := newTestClient(t, Options{MaxResponseHeaderSize: 64 << 10})
	res, body, err := get(t, c, u, "GET", "/large", nil)
	if err != nil || body != "hello" || len(res.Header) != 11 {
		t.Fatalf("a 10 KB head: %v, %q", err, body)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = get(t, c, u, "GET", "/huge", nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a 2 MB head: %v, want it refused", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing a 2 MB head allocated %d bytes", grew)
	}
}

// TestLargeBodyStreams: a body far larger than the buffers is streamed,
// never held: reading 256 MB allocates almost nothing.
func TestLargeBodyStreams(t *testing.T) {
	const size = 256 << 20
	chunk := []byte(strings.Repeat("0123456789abcdef", 4096))
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/chunked" {
			reply(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
			for sent := 0; sent < size; sent += len(chunk) {
				fmt.Fprintf(c, "%x\r\n", len(chunk))
				c.Write(chunk)
				reply(c, "\r\n")
			}
			return reply(c, "0\r\n\r\n")
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return false
			}
		}
		return true
	})
	c := newTestClient(t, Options{})
	for _, path := range []string{"/fixed", "/chunked"} {
		req, _ := http.NewRequest("GET", "http://"+u.Addr()+path, nil)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := c.RoundTrip(req, "tcp", u.Addr())
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		buf := make([]byte, 32<<10)
		n, err := io.CopyBuffer(h, res.Body, buf)
		res.Body.Close()
		runtime.ReadMemStats(&after)
		if err != nil || n != size {
			t.Fatalf("%s: read %d bytes, %v", path, n, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
			t.Fatalf("%s: streaming 256 MB allocated %d bytes", path, grew)
		}
	}
	if st := c.Stats(); st.Dials != 1 {
		t.Fatalf("dials %d: the connection was not kept after whole bodies", st.Dials)
	}
}

// TestRequestFraming: what the upstream receives for each kind of body.
func TestRequestFraming(t *testing.T) {
	type seen struct {
		method, cl, te, trailer string
		body                    string
	}
	got := make(chan seen, 1)
	u := newUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		got <- seen{req.Method, req.Header.Get("Content-Length"), strings.Join(req.TransferEncoding, ","),
			req.Trailer.Get("X-Sum"), string(body)}
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{})
	tests := []struct {
		name   string
		method string
		body   io.Reader
		length int64
		want   seen
	}{
		{"GET", "GET", nil, 0, seen{method: "GET"}},
		{"POST without a body", "POST", nil, 0, seen{method: "POST", cl: "0"}},
		{"fixed", "PUT", strings.NewReader("hello"), 5, seen{method: "PUT", cl: "5", body: "hello"}},
		{"unknown length", "POST", io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo")), -1,
			seen{method: "POST", te: "chunked", body: "hello", trailer: "42"}},
		{"large fixed", "POST", strings.NewReader(strings.Repeat("a", 100000)), 100000,
			seen{method: "POST", cl: "100000", body: strings.Repeat("a", 100000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://"+u.Addr()+"/", nil)
			if tc.body != nil {
				req.Body = io.NopCloser(tc.body)
			}
			req.ContentLength = tc.length
			if tc.want.trailer != "" {
				req.Trailer = http.Header{"X-Sum": {"42"}}
			}
			res, err := c.RoundTrip(req, "tcp", u.Addr())
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if s := <-got; s != tc.want {
				t.Fatalf("upstream saw %+v, want %+v", s, tc.want)
			}
		})
	}

	t.Run("body shorter than its Content-Length", func(t *testing.T) {
		req, _ := http.NewRequest("POST", "http://"+u.Addr()+"/", strings.NewReader("abc"))
		req.ContentLength = 10
		if _, err := c.RoundTrip(req, "tcp", u.Addr()); !errors.Is(err, errBodyLength) {
			t.Fatalf("error %v", err)
		}
	})
}

// TestRequestRefused: a request with a field that could split the head is
// refused before anything is sent.
func TestRequestRefused(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		return reply(c, okResponse)
	})
	c := newTestClient(t, Options{})
	for _, tc := range []struct {
		name  string
		setup func(r *http.Request)
	}{
		{"CRLF in a value", func(r *http.Request) { r.Header["X-A"] = []string{"a\r\nX-Injected: 1"} }},
		{"LF in a value", func(r *http.Request) { r.Header["X-A"] = []string{"a\nb"} }},
		{"NUL in a value", func(r *http.Request) { r.Header["X-A"] = []string{"a\x00b"} }},
		{"space in a name", func(r *http.Request) { r.Header["X A"] = []string{"b"} }},
		{"CRLF in Host", func(r *http.Request) { r.Host = "a\r\nb" }},
		{"space in the query", func(r *http.Request) { r.URL.RawQuery = "a=b c" }},
		{"bad method", func(r *http.Request) { r.Method = "GE T" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
			tc.setup(req)
			if _, err := c.RoundTrip(req, "tcp", u.Addr()); err == nil {
				t.Fatal("sent")
			}
		})
	}
	if n := u.Requests.Load(); n != 0 {
		t.Fatalf("the upstream received %d requests", n)
	}
	// a refused field on a kept-alive connection: refused once, not sent
	// again on another connection
	req, _ := http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
	res, err := c.RoundTrip(req, "tcp", u.Addr())
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	before := c.Stats()
	req, _ = http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
	req.Header["X-A"] = []string{"a\r\nX-Injected: 1"}
	if _, err := c.RoundTrip(req, "tcp", u.Addr()); err == nil || !strings.Contains(err.Error(), `invalid header field value for "X-A"`) {
		t.Fatalf("error %v, want the field named", err)
	}
	if st := c.Stats(); st.Retries != before.Retries || st.Dials != before.Dials {
		t.Fatalf("refused request: retries %d -> %d, dials %d -> %d", before.Retries, st.Retries, before.Dials, st.Dials)
	}
	if n := u.Requests.Load(); n != 1 {
		t.Fatalf("the upstream received %d requests, want 1", n)
	}
}

func TestInformationalResponses(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/many" {
			for i := 0; i < 6; i++ {
				reply(c, "HTTP/1.1 102 Processing\r\n\r\n")
			}
		}
		return reply(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 100 Continue\r\n\r\n"+okResponse)
	})
	c := newTestClient(t, Options{})
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+u.Addr()+"/", nil)
	res, err := c.RoundTrip(req, "tcp", u.Addr())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "hello" || strings.Join(got, "|") != "103 </a.css>; rel=preload|100 " {
		t.Fatalf("status %d body %q, 1xx %q", res.StatusCode, b, got)
	}
	if _, _, err := get(t, c, u, "GET", "/many", nil); err == nil || !strings.Contains(err.Error(), "too many 1xx") {
		t.Fatalf("six 1xx responses: %v", err)
	}
}

func TestResponsesWithoutBody(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		switch req.URL.Path {
		case "/204":
			return reply(c, "HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n")
		case "/304":
			return reply(c, "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n")
		}
		return reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n") // to HEAD: no body
	})
	c := newTestClient(t, Options{})
	for _, tc := range []struct {
		method, path string
		status       int
		length       int64
	}{{"HEAD", "/", 200, 1234}, {"GET", "/204", 204, 0}, {"GET", "/304", 304, 1234}, {"HEAD", "/", 200, 1234}} {
		res, body, err := get(t, c, u, tc.method, tc.path, nil)
		if err != nil || res.StatusCode != tc.status || body != "" {
			t.Fatalf("%s %s: %v %q", tc.method, tc.path, err, body)
		}
		if tc.method == "HEAD" && res.ContentLength != tc.length {
			t.Fatalf("HEAD: ContentLength %d, want %d", res.ContentLength, tc.length)
		}
	}
	if st := c.Stats(); st.Dials != 1 {
		t.Fatalf("dials %d: a response without a body did not keep the connection", st.Dials)
	}
}

func TestConnectionCloseAndBodyToEOF(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		if req.URL.Path == "/eof" {
			reply(c, "HTTP/1.1 200 OK\r\n\r\nuntil the end")
			return false
		}
		reply(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
		return false
	})
	c := newTestClient(t, Options{})
	for _, path := range []string{"/close", "/eof", "/close"} {
		res, body, err := get(t, c, u, "GET", path, nil)
		if err != nil {
			t.Fatal(path, err)
		}
		if path == "/eof" && (body != "until the end" || res.ContentLength != -1) {
			t.Fatalf("%s: %q, length %d", path, body, res.ContentLength)
		}
	}
	if st := c.Stats(); st.Dials != 3 || st.Open != 0 {
		t.Fatalf("dials %d, open %d: want a connection per response, none kept", st.Dials, st.Open)
	}
}

func TestMalformedResponses(t *testing.T) {
	cases := map[string]string{
		"/cl-te":     "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"/bad-chunk": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
		"/fold":      "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"/bare-lf":   "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"/nul":       "HTTP/1.1 200 OK\r\nX-A: \x00\r\nContent-Length: 0\r\n\r\n",
		"/early-eof": "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
		"/no-answer": "",
	}
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		reply(c, cases[req.URL.Path])
		return false
	})
	c := newTestClient(t, Options{})
	for path := range cases {
		t.Run(path, func(t *testing.T) {
			res, body, err := get(t, c, u, "GET", path, nil)
			if err == nil {
				t.Fatalf("%s: status %d body %q, want an error", path, res.StatusCode, body)
			}
		})
	}
}

func TestClosedClient(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		return reply(c, okResponse)
	})
	c := NewClient(Options{})
	req, _ := http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
	res, err := c.RoundTrip(req, "tcp", u.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// a response in flight completes; its connection is then closed
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != "hello" {
		t.Fatal(string(b), err)
	}
	res.Body.Close()
	if st := c.Stats(); st.Open != 0 {
		t.Fatalf("%d connections open after Close", st.Open)
	}
	if _, err := c.RoundTrip(req, "tcp", u.Addr()); !errors.Is(err, errClientClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func BenchmarkRoundTrip(b *testing.B) {
	u := newUpstream(b, func(c net.Conn, req *http.Request, _ []byte, n int) bool {
		return reply(c, okResponse)
	})
	c := newTestClient(b, Options{})
	req, _ := http.NewRequest("GET", "http://"+u.Addr()+"/", nil)
	req.Header.Set("X-Forwarded-For", "127.0.0.1")
	buf := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.RoundTrip(req, "tcp", u.Addr())
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := res.Body.Read(buf); err != nil {
				break
			}
		}
		res.Body.Close()
	}
}

// doneCounter is a context that counts its Done calls and may say
// whether it can be canceled itself (CanCancel).
type doneCounter struct {
	context.Context
	dones int
}

func (c *doneCounter) Done() <-chan struct{} { c.dones++; return c.Context.Done() }

type selfReporting struct{ doneCounter }

func (c *selfReporting) CanCancel() bool { return true }

// TestCanCancel: a context that says whether it can be canceled is
// asked, not made to make its Done channel; any other is judged by Done.
func TestCanCancel(t *testing.T) {
	self := &selfReporting{doneCounter{Context: context.Background()}}
	if !canCancel(self) || self.dones != 0 {
		t.Fatalf("CanCancel context: canCancel %v after %d Done calls, want true after none", canCancel(self), self.dones)
	}
	plain := &doneCounter{Context: context.Background()}
	if canCancel(plain) || plain.dones != 1 {
		t.Fatalf("background: canCancel %v after %d Done calls, want false after one", canCancel(plain), plain.dones)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !canCancel(ctx) {
		t.Fatal("a cancelable context: canCancel false")
	}
}
