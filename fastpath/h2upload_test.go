package fastpath

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestH2ConcurrentUploads: several streams on one HTTP/2 connection (h2c)
// upload 8 MB and more each at once through reverse_proxy, many times the
// 1 MB receive windows of the stream and of the connection: the upstream
// gets every body whole, checked by its hash, on both paths.
func TestH2ConcurrentUploads(t *testing.T) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			w.WriteHeader(500)
		}
		fmt.Fprintf(w, "%d %s", n, hex.EncodeToString(h.Sum(nil)))
	})}
	go up.Serve(upLn)
	defer up.Close()
	loadTwinOpts(t, twinOpts{serverOpts: "\t\tprotocols h1 h2c"}, fmt.Sprintf("\treverse_proxy %s {\n\t\ttransport h1\n\t}", upLn.Addr()))

	const streams = 4
	bodies := make([][]byte, streams)
	want := make([]string, streams)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range bodies {
		bodies[i] = make([]byte, 8<<20+i*12345)
		for j := range bodies[i] {
			bodies[i][j] = byte(rng.Uint32())
		}
		sum := sha256.Sum256(bodies[i])
		want[i] = fmt.Sprintf("%d %s", len(bodies[i]), hex.EncodeToString(sum[:]))
	}
	before := stats(t, "fast").Served
	for _, port := range []int{plainPort, fastPort} {
		client := h2cClient()
		client.Timeout = 60 * time.Second
		var wg sync.WaitGroup
		errs := make([]error, streams)
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/up/%d", port, i), bytes.NewReader(bodies[i]))
				res, err := client.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				defer res.Body.Close()
				got, err := io.ReadAll(res.Body)
				if err != nil || res.StatusCode != 200 || string(got) != want[i] {
					errs[i] = fmt.Errorf("status %d, upstream got %q (%v), want %q", res.StatusCode, got, err, want[i])
				}
				if res.ProtoMajor != 2 {
					errs[i] = fmt.Errorf("answered over %s", res.Proto)
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("port %d, stream %d: %v", port, i, err)
			}
		}
		client.CloseIdleConnections()
	}
	if served := stats(t, "fast").Served - before; served < streams {
		t.Fatalf("the fast path served %d of the %d uploads", served, streams)
	}
}
