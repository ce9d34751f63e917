// Package natstest runs real NATS servers with JetStream inside a test
// process: one server, or an n-node cluster routed over loopback, that a
// test can shut down and start again on the same ports and store
// directories, as an outage and a recovery of the real deployment would.
//
// The single servers of the module tests (natsstore, caddyaudit, natsconn)
// come from nats-server's own test package; this package is for what it
// does not offer: clusters and restarts.
package natstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/nats-io/nats-server/v2/server"
)

// ReadyTimeout bounds the wait for a started server to accept clients.
const ReadyTimeout = 10 * time.Second

// Cluster is n NATS servers with JetStream on loopback. With n >= 2 they
// are routed to each other as one cluster (named "natstest", servers named
// n1..nN); with n = 1 the server is standalone (not clustered), as a
// single-server deployment is. Every server is shut down when the test
// ends.
type Cluster struct {
	// URLs are the client URLs, one per server, in server order. They do
	// not change across restarts.
	URLs []string

	t       testing.TB
	mu      sync.Mutex
	opts    []server.Options
	servers []*server.Server
}

// StartCluster starts n servers and waits until each accepts clients. It
// does not wait for JetStream's cluster leader elections: poll for what the
// test needs (a stream created, a value read) with a deadline.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: StartCluster(%d): need at least one server", n)
	}
	ports := freeport.Ports(t, 2*n)
	c := &Cluster{t: t, opts: make([]server.Options, n), servers: make([]*server.Server, n)}
	var routes []string
	for i := 0; i < n; i++ {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	for i := 0; i < n; i++ {
		o := server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[n+i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts[i] = o
		c.URLs = append(c.URLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	t.Cleanup(c.ShutdownAll)
	c.start(seq(n)...)
	return c
}

// URL is every client URL joined by commas, as nats.Connect takes them.
func (c *Cluster) URL() string { return strings.Join(c.URLs, ",") }

// Servers returns the running servers (nil for one that is shut down), in
// server order.
func (c *Cluster) Servers() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*server.Server(nil), c.servers...)
}

// Server returns server i (0-based), nil while it is shut down.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// ByName returns the running server with that name (n1..nN), or nil.
func (c *Cluster) ByName(name string) *server.Server {
	for _, s := range c.Servers() {
		if s != nil && s.Name() == name {
			return s
		}
	}
	return nil
}

// Shutdown stops server i and waits until it has stopped. Stopping a
// stopped server does nothing.
func (c *Cluster) Shutdown(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// ShutdownAll stops every server.
func (c *Cluster) ShutdownAll() {
	for i := range c.opts {
		c.Shutdown(i)
	}
}

// Restart starts server i again, on its ports and with its store
// directory, and waits until it accepts clients. A running server is shut
// down first.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Shutdown(i)
	c.start(i)
}

// RestartAll restarts every server, all at once (a clustered JetStream
// needs a quorum of its servers to come back).
func (c *Cluster) RestartAll() {
	c.t.Helper()
	c.ShutdownAll()
	c.start(seq(len(c.opts))...)
}

func (c *Cluster) start(idx ...int) {
	c.t.Helper()
	started := make([]*server.Server, len(idx))
	for j, i := range idx {
		o := c.opts[i] // a copy: the server keeps and changes its options
		s, err := server.NewServer(&o)
		if err != nil {
			c.t.Fatalf("natstest: server %s: %v", o.ServerName, err)
		}
		go s.Start()
		started[j] = s
		c.mu.Lock()
		c.servers[i] = s
		c.mu.Unlock()
	}
	for _, s := range started {
		if !s.ReadyForConnections(ReadyTimeout) {
			c.t.Fatalf("natstest: server %s not ready after %v", s.Name(), ReadyTimeout)
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
