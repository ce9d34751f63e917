package fastpath

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
)

// headUpstream answers every request with the field lines of its head,
// in the order they came, as the body: what a proxy sent, byte for byte.
func headUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					if _, err := br.ReadString('\n'); err != nil { // the request line
						return
					}
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if line == "\r\n" {
							break
						}
						head.WriteString(line)
					}
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", head.Len(), head.String()); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFieldsInClientOrder: a request whose fields reverse_proxy sends as
// they came (no hop-by-hop field, Via, X-Forwarded-* or Pragma) goes
// upstream with them in the client's order, then the fields the proxy
// adds: the plain lane writes them from the parsed head, with no header
// map between (a map's order is random: with a copy through one, twelve
// fields keep their order once in 12! tries). A request with a field the
// proxy changes still gets the map's treatment.
func TestFieldsInClientOrder(t *testing.T) {
	up := headUpstream(t)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up))
	names := []string{"X-M", "Accept", "X-B", "Cookie", "X-Z", "User-Agent", "X-A", "Authorization", "X-Q", "Accept-Language", "X-C", "X-Y"}
	var raw, want strings.Builder
	raw.WriteString("GET /a HTTP/1.1\r\n" + h)
	want.WriteString(h) // (the transport's own, first)
	for i, n := range names {
		fmt.Fprintf(&raw, "%s: v%d\r\n", n, i)
		fmt.Fprintf(&want, "%s: v%d\r\n", n, i)
	}
	raw.WriteString("\r\n")
	want.WriteString("X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\nVia: 1.1 Caddy\r\n")
	for round := range 3 {
		res := rawExchange(t, fastPort, raw.String())
		if len(res.Responses) != 1 || res.Responses[0].Status != 200 {
			t.Fatalf("round %d: %v", round, res)
		}
		if got := res.Responses[0].Body; got != want.String() {
			t.Fatalf("round %d: the upstream got\n%s\nwant\n%s", round, got, want.String())
		}
	}

	// a hop-by-hop field: the fields go as reverse_proxy's copy sends them
	res := rawExchange(t, fastPort, "GET /a HTTP/1.1\r\n"+h+"Connection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n")
	if len(res.Responses) != 1 {
		t.Fatalf("%v", res)
	}
	got := res.Responses[0].Body
	if strings.Contains(got, "X-Hop") || strings.Contains(got, "Connection") || !strings.Contains(got, "X-Kept: 2\r\n") || !strings.Contains(got, "Via: 1.1 Caddy\r\n") {
		t.Fatalf("the upstream got\n%s", got)
	}
}
