package fastpath

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestRefusedBodyAnswerArrives: a client still sending a large body that
// the route refuses (request_body's max_size: 413) gets the answer, on
// both paths, as net/http's closeWriteAndWait makes sure on Caddy's path.
// Closing at once with the body's bytes unread makes the kernel reset the
// connection: Go's client, still writing, reports the reset instead of
// the answer.
func TestRefusedBodyAnswerArrives(t *testing.T) {
	up := newEchoUpstream(t)
	loadTwin(t, "", fmt.Sprintf(`	request_body {
		max_size 1KB
	}
	reverse_proxy %s`, up.Addr()))
	const size = 16 << 20
	for _, framing := range []string{"content-length", "chunked"} {
		for _, port := range []int{plainPort, fastPort} {
			for i := range 3 {
				t.Run(fmt.Sprintf("%s/%d/%d", framing, port, i), func(t *testing.T) {
					var body io.Reader = strings.NewReader(strings.Repeat("x", size))
					if framing == "chunked" {
						body = io.MultiReader(body) // (no length: chunked)
					}
					req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/upload", port), body)
					// (a client that keeps connections: one that sends
					// Connection: close gets a reset from Caddy's path, whose
					// net/http does not wait for a connection it closes anyway)
					tr := &http.Transport{}
					defer tr.CloseIdleConnections()
					client := &http.Client{Transport: tr}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("no answer to a refused body: %v", err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusRequestEntityTooLarge {
						t.Fatalf("status %d, want 413", resp.StatusCode)
					}
				})
			}
		}
	}
}
