package fastpath

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

// TestH2FullDuplexProxy: an HTTP/2 client that sends its body only once it
// has the response head, through reverse_proxy to an upstream that answers
// its head first and then echoes the body (Caddy's TestH2ToH2CStream; the h1
// transport sends the body before it reads the head, on both paths): the head goes out before the body is read,
// and the echo streams, on both paths.
func TestH2FullDuplexProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			w.Write(buf[:n])
			http.NewResponseController(w).Flush()
			if err != nil {
				return
			}
		}
	}), &http2.Server{})}
	go up.Serve(ln)
	defer up.Close()
	for _, transport := range []string{"http {\n\t\t\tversions h2c 2\n\t\t}"} {
		t.Run(strings.Fields(transport)[0], func(t *testing.T) {
			loadTwinOpts(t, twinOpts{https: true}, fmt.Sprintf("\treverse_proxy %s {\n\t\ttransport %s\n\t}", ln.Addr(), transport))
			client := &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
			waitCerts(t, client)
			for _, port := range []int{plainPort, fastPort} {
				r, w := io.Pipe()
				req, _ := http.NewRequest("PUT", fmt.Sprintf("https://127.0.0.1:%d/stream", port), r)
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("port %d: no response head before the body: %v", port, err)
				}
				go func() {
					io.WriteString(w, "some data to be echoed")
					w.Close()
				}()
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || string(b) != "some data to be echoed" {
					t.Errorf("port %d: %d %q %v", port, res.StatusCode, b, err)
				}
			}
		})
	}
}
