package fastpath

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestClientGone: a client that goes away while the upstream is still
// working cancels the upstream request on both paths: the upstream sees
// its connection closed long before it would have answered.
func TestClientGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closedAfter := make(chan time.Duration, 4)
	arrived := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				arrived <- struct{}{}
				start := time.Now()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				var b [1]byte
				c.Read(b[:]) // EOF when the proxy gives the request up
				closedAfter <- time.Since(start)
			}()
		}
	}()
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, ln.Addr()))
	for _, tc := range []struct {
		name string
		port int
		post bool
	}{{"Caddy's path", plainPort, false}, {"fast path", fastPort, false}, {"fast path, a POST", fastPort, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", tc.port))
			if err != nil {
				t.Fatal(err)
			}
			if tc.post {
				fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\n\r\nhi")
			} else {
				fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: example.com\r\n\r\n")
			}
			// the client leaves once the upstream has the request (a
			// fixed sleep lost that race on a loaded CI machine)
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the request did not reach the upstream")
			}
			time.Sleep(300 * time.Millisecond)
			c.Close()
			select {
			case d := <-closedAfter:
				if d > 2*time.Second {
					t.Fatalf("the upstream connection closed %v after the request, not when the client left", d)
				}
				t.Logf("upstream connection closed %v after the request (the client left at 300ms)", d.Round(time.Millisecond))
			case <-time.After(4 * time.Second):
				t.Fatal("the upstream request was not given up when the client left")
			}
		})
	}
}
