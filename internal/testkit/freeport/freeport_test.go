package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestNeverTwice: a port closed by its first user is not handed out
// again, though the kernel gives it to a later listen on port 0: Linux
// draws them from about 14,000, so 2,000 ports without this package's
// memory repeat one almost surely (1 - e^-140).
func TestNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		ports := Ports(t, 1+i%3)
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice (call %d)", p, i)
			}
			seen[p] = true
			// the first user listens on it and closes it
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d: %v", p, err)
			}
			l.Close()
		}
	}
}
