package fastpath

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// TestServerLimits: the server's timeouts and head limit apply on the fast
// path as on Caddy's: an idle keep-alive connection is closed after
// idle_timeout, a head that does not arrive within read_header_timeout
// closes the connection, a head over max_header_size (plus net/http's
// 4096 bytes of slack) gets 431.
func TestServerLimits(t *testing.T) {
	loadTwinOpts(t, twinOpts{serverOpts: `		timeouts {
			read_header 400ms
			idle 600ms
		}
		max_header_size 2KB`}, `	respond "ok"`)

	for _, port := range []int{plainPort, fastPort} {
		name := map[int]string{plainPort: "Caddy's path", fastPort: "fast path"}[port]
		t.Run(name+": idle_timeout", func(t *testing.T) {
			c := dial(t, port)
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("first request: %v %v", res, err)
			}
			io.ReadAll(res.Body)
			start := time.Now()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("idle connection: %v, want EOF", err)
			}
			if d := time.Since(start); d < 500*time.Millisecond || d > 2*time.Second {
				t.Fatalf("idle connection closed after %v, want about 600ms", d)
			}
		})
		t.Run(name+": read_header_timeout", func(t *testing.T) {
			c := dial(t, port)
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n") // and no end of head
			start := time.Now()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(c)
			if err != nil || len(b) != 0 {
				t.Fatalf("slow head: %q %v, want a close without an answer", b, err)
			}
			if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
				t.Fatalf("slow head cut after %v, want about 400ms", d)
			}
		})
		t.Run(name+": max_header_size", func(t *testing.T) {
			for _, tc := range []struct {
				size int
				want int
			}{{2048 + 4096 - 200, 200}, {2048 + 4096 + 200, 431}} {
				c := dial(t, port)
				fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", tc.size))
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil || res.StatusCode != tc.want {
					t.Fatalf("a %d-byte field: %v %v, want %d", tc.size, res, err, tc.want)
				}
			}
		})
	}
}

func dial(t *testing.T, port int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestIdleHoldsNoState: a keep-alive connection waiting for its next
// request holds no request state (buffers and per-request structures), and
// the next request on it is read whole: fifty connections answered once
// each, then idle, hold none; each is answered again.
func TestIdleHoldsNoState(t *testing.T) {
	countStates.Store(true)
	t.Cleanup(func() { countStates.Store(false) })
	loadTwinOpts(t, twinOpts{}, `	respond "ok"`)
	before := statesHeld.Load()
	var conns []net.Conn
	var readers []*bufio.Reader
	ask := func(i int) {
		fmt.Fprintf(conns[i], "GET /%d HTTP/1.1\r\nHost: a\r\n\r\n", i)
		res, err := http.ReadResponse(readers[i], nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", i, res, err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "ok" {
			t.Fatalf("connection %d: body %q", i, b)
		}
	}
	for i := range 50 {
		conns = append(conns, dial(t, fastPort))
		readers = append(readers, bufio.NewReader(conns[i]))
		ask(i)
	}
	deadline := time.Now().Add(3 * time.Second)
	for statesHeld.Load() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d request states held by 50 idle connections, want none", statesHeld.Load()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range conns {
		ask(i)
	}
}

// TestSlowHeadHoldsNoState: a connection that has sent part of a head
// (a slow client, or slowloris), or nothing yet, holds no request state:
// only a buffer the size of what arrived. Fifty connections each send half
// a head, fifty more connect and send nothing; none holds a state; then
// each head is finished, and answered whole.
func TestSlowHeadHoldsNoState(t *testing.T) {
	countStates.Store(true)
	t.Cleanup(func() { countStates.Store(false) })
	loadTwinOpts(t, twinOpts{}, `	respond "ok {http.request.header.X-Last}"`)
	before := statesHeld.Load()
	var conns []net.Conn
	for i := range 100 {
		c := dial(t, fastPort)
		if i < 50 {
			fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: a\r\nX-A: %s\r\n", i, strings.Repeat("a", 100))
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(3 * time.Second)
	for statesHeld.Load() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d request states held by 100 connections without a whole head, want none", statesHeld.Load()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, c := range conns {
		if i >= 50 {
			fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: a\r\n", i)
		}
		fmt.Fprintf(c, "X-Last: %d\r\n\r\n", i)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("connection %d: %v %v", i, res, err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != fmt.Sprintf("ok %d", i) {
			t.Fatalf("connection %d: body %q", i, b)
		}
	}
}

// TestWriteDeadlineKept: a keep-alive connection's write deadline
// (write_idle_timeout, one minute by default, set 1.5 times ahead) is set
// once for a run of requests, not again after each wait for the next
// request, although the wait gives the request state back (each move
// is a runtime timer's reset: ~650 instructions a request, callgrind).
func TestWriteDeadlineKept(t *testing.T) {
	loadTwin(t, "", `	respond "ok"`)
	c := dial(t, fastPort)
	br := bufio.NewReader(c)
	countWriteDeadlines.Store(true)
	defer countWriteDeadlines.Store(false)
	before := writeDeadlineMoves.Load()
	const requests = 20
	getOK(t, c, br, "/", requests)
	if moves := writeDeadlineMoves.Load() - before; moves > 2 {
		t.Fatalf("%d requests on one connection moved its write deadline %d times, want once (twice at most)", requests, moves)
	}
}

// TestWriteIdleAfterWaits: write_idle cuts a client that stops reading
// its answer on a connection that served and waited between requests
// before, when the connection's write deadline was set once and kept
// across the waits (TestWriteDeadlineKept): the deadline the engine
// notes is the socket's.
func TestWriteIdleAfterWaits(t *testing.T) {
	const bodySize = 64 << 20
	cut := make(chan struct{}, 1)
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if req.URL.Path != "/big" {
			return difftest.Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		if !difftest.Reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", bodySize)) {
			return false
		}
		chunk := make([]byte, 64<<10)
		for sent := 0; sent < bodySize; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				cut <- struct{}{} // the gateway gave the exchange up
				return false
			}
		}
		return false
	})
	loadTwinOpts(t, twinOpts{serverOpts: `		timeouts {
			write_idle 300ms
		}`}, fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	c := dial(t, fastPort)
	br := bufio.NewReader(c)
	getOK(t, c, br, "/small", 3)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
	// not read: the gateway's writes stall, and it must give the
	// exchange up after write_idle (300 ms, its deadline set at most
	// 450 ms ahead), which closes the upstream connection under the
	// upstream's writes
	select {
	case <-cut:
	case <-time.After(20 * time.Second):
		t.Fatal("20 s after the client stopped reading, the gateway still read the upstream's answer: write_idle did not cut the stalled answer")
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if got, _ := io.Copy(io.Discard, br); got >= bodySize {
		t.Fatalf("the whole answer arrived (%d bytes): write_idle did not cut the client that stopped reading", got)
	}
}

// getOK sends n GETs of path on c, one after the other, each read whole
// (br reads c) and answered 200.
func getOK(t *testing.T, c net.Conn, br *bufio.Reader, path string, n int) {
	t.Helper()
	for i := range n {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("request %d of %s: %v %v", i, path, res, err)
		}
		io.ReadAll(res.Body)
	}
}
