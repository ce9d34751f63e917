// Package difftest holds what the differential tests share: a scripted
// upstream whose behaviour each path of a request selects, the table of
// those behaviours, and a client that records what a client sees of each
// exchange. caddyh1's TestDifferential runs the table through Caddy's two
// transports; fastpath's runs it through a server with the fast path and
// the same server without it.
package difftest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// Upstream is a scripted HTTP/1.1 upstream on a loopback port: each
// request read with net/http's parser is passed, with its body, to a
// handler that writes whatever bytes it wants.
type Upstream struct {
	ln       net.Listener
	Accepted atomic.Int64 // connections accepted
	Requests atomic.Int64 // requests read
	Open     atomic.Int64 // connections open now
	MaxOpen  atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

// HandleFunc answers one request on c; it returns whether the connection
// stays open for the next. n counts the connection's requests from 0.
type HandleFunc func(c net.Conn, req *http.Request, body []byte, n int) (keep bool)

// NewUpstream starts an upstream; it stops when t ends.
func NewUpstream(t testing.TB, handle HandleFunc) *Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &Upstream{ln: ln, conns: map[net.Conn]bool{}}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.Accepted.Add(1)
			open := u.Open.Add(1)
			for {
				m := u.MaxOpen.Load()
				if open <= m || u.MaxOpen.CompareAndSwap(m, open) {
					break
				}
			}
			u.mu.Lock()
			u.conns[c] = true
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer u.Open.Add(-1)
				defer func() {
					c.Close()
					u.mu.Lock()
					delete(u.conns, c)
					u.mu.Unlock()
				}()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, err := io.ReadAll(req.Body)
					if err != nil {
						return
					}
					u.Requests.Add(1)
					if !handle(c, req, body, n) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for c := range u.conns {
			c.Close() // kept alive by a client
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

// Addr is the upstream's host:port.
func (u *Upstream) Addr() string { return u.ln.Addr().String() }

// Reply writes s to c and reports whether it could.
func Reply(c net.Conn, s string) bool {
	_, err := io.WriteString(c, s)
	return err == nil
}
