package fastpath

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// TestReloadUnderLoad reloads the config ten times through the admin API
// while 300 keep-alive connections send requests to a server on the fast
// path: no request may fail, and each new config's routes answer at once.
func TestReloadUnderLoad(t *testing.T) {
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		return difftest.Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	site := func(i int) string {
		return fmt.Sprintf(`	handle /reload-%[1]d {
		respond "v%[1]d" 200
	}
	handle {
		reverse_proxy %[2]s {
			transport h1
		}
	}`, i, up.Addr())
	}
	loadTwin(t, "", site(-1))

	const conns = 300
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/load/%d", fastPort, i))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || string(b) != "ok" {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d body %q", res.StatusCode, b))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := 0; i < 10; i++ {
		time.Sleep(300 * time.Millisecond)
		cfg := twin(twinOpts{}, site(i))
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://localhost:%d/load", adminPort), strings.NewReader(cfg))
		req.Header.Set("Content-Type", "text/caddyfile")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("reload %d: %d %s", i, res.StatusCode, b)
		}
		requireFast(t, "fast")
		fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // (a kept-alive connection of the old config is the old config's until it closes)
		r, err := fresh.Get(fmt.Sprintf("http://127.0.0.1:%d/reload-%d", fastPort, i))
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		b, _ = io.ReadAll(r.Body)
		r.Body.Close()
		if string(b) != fmt.Sprintf("v%d", i) {
			t.Fatalf("reload %d not serving its routes: %d %q", i, r.StatusCode, b)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	tr.CloseIdleConnections()
	t.Logf("%d requests answered, %d failed (first: %v), over 10 reloads at %d connections; the last config's plan served %d",
		ok.Load(), failed.Load(), firstErr.Load(), conns, stats(t, "fast").Served)
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed during reloads (first: %v)", failed.Load(), firstErr.Load())
	}
	if ok.Load() < 1000 {
		t.Fatalf("too little load: %d requests", ok.Load())
	}
}
