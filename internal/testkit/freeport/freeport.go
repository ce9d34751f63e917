// Package freeport hands tests loopback TCP ports to listen on, for the
// servers that cannot use port 0 (they must know each other's ports
// before they start, or restart on the same port).
//
// A port is found by listening on port 0 and closing the listener, so the
// kernel is free to hand the same port out again as soon as it is closed,
// to the next caller: two servers of one test then got one port, and the
// second failed to listen, now and then. So this package remembers every
// port it handed out in this process and never hands one out twice. The
// ports are ephemeral ones (from 32768), outside the fixed ranges the
// packages' Caddy configs use (docs/testing.md, "Ports").
package freeport

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// tries bounds the listens for one port: the kernel hands out the
// ephemeral ports in an order that rarely comes back to a given one soon.
const tries = 1000

// Get returns n distinct loopback ports that no earlier call of this
// process returned, free when it returns.
func Get(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	// the listeners stay open until all n are found, so that the kernel
	// does not hand one port out twice within the call
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		port, l, err := fresh()
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	for _, p := range ports {
		given[p] = true
	}
	return ports, nil
}

// fresh listens on a loopback port not given out before; mu is held.
func fresh() (int, net.Listener, error) {
	var seen []net.Listener
	defer func() {
		for _, l := range seen {
			l.Close()
		}
	}()
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !given[port] {
			return port, l, nil
		}
		// kept open meanwhile, so that the next listen gets another port
		seen = append(seen, l)
	}
	return 0, nil, fmt.Errorf("freeport: no loopback port not given out before in %d tries", tries)
}

// Ports is Get for a test: it fails t on an error.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	ports, err := Get(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Port is one port of Ports.
func Port(t testing.TB) int {
	t.Helper()
	return Ports(t, 1)[0]
}
