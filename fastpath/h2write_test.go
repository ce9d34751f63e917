package fastpath

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2ResponseOneWrite: a small response whose handler is done goes to
// the socket as one write, its HEADERS and DATA frames together (each
// write is a system call; under h2load the engine made 1.8 writes a
// response to the client before). Counted with the test process's write
// system calls (/proc/self/io syscw): the client's one per request and the
// server's, n requests in turn on one connection.
func TestH2ResponseOneWrite(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skipf("no /proc/self/io to count writes: %v", err)
	}
	loadAttackServer(t, "")
	p := dialH2(t, fastPort)
	// the settings exchange first: the server's SETTINGS and its ack of ours
	acks := 0
	if seen, ok := p.readUntil(10*time.Second, func(f http2.Frame) bool {
		if s, ok := f.(*http2.SettingsFrame); ok && s.IsAck() {
			acks++
		}
		return acks == 1
	}); !ok {
		t.Fatalf("no SETTINGS ack: %v", seen)
	}
	if err := p.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	const n = 40
	before := writeSyscalls(t)
	for i := range n {
		id := uint32(2*i + 1)
		if err := p.get(id, "/"); err != nil {
			t.Fatal(err)
		}
		if seen, ok := p.readUntil(10*time.Second, func(f http2.Frame) bool {
			return f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream)
		}); !ok {
			t.Fatalf("request %d: no response: %v", i, seen)
		}
	}
	writes := writeSyscalls(t) - before
	// n are the client's; one per response is the server's, two would be
	// HEADERS and DATA apart (a stray write of the process is possible)
	t.Logf("%d write system calls for %d requests and their responses", writes, n)
	if writes > 2*n+n/4 {
		t.Errorf("%d writes for %d requests: the server wrote a response in more than one write (want about %d)", writes, n, 2*n)
	}
}

// writeSyscalls is the process's count of write system calls.
func writeSyscalls(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw: "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no syscw in /proc/self/io")
	return 0
}
