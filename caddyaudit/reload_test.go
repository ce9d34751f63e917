package caddyaudit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/apigate/gateway/caddyaudit"

	"github.com/apigate/gateway/internal/testkit/caddytester"
)

// TestReloadKeepsAndDrainsQueues: events queued while the receiver is down
// survive a reload that keeps the sink (same queue), and a reload that
// changes the sink drains the old queue before it goes away. With the
// receiver back, every request has its event (deduplicated by request id).
func TestReloadKeepsAndDrainsQueues(t *testing.T) {
	hook := newPathHook(t)

	config := func(batch int) string {
		return fmt.Sprintf(`{
	admin localhost:2904
	http_port 19420
	https_port 19421
	grace_period 1s
	audit {
		shutdown_timeout 20s
		sink http %s {
			name reload-hook
			batch_size %d
			flush_interval 10ms
		}
	}
}

:19402 {
	audit
	respond "ok"
}
`, hook.URL, batch)
	}
	tester := caddytester.Load(t, 2904, config(5))
	run := fmt.Sprint(time.Now().UnixNano())
	n := 0
	send := func(k int) {
		for i := 0; i < k; i++ {
			resp, err := tester.Client.Get(fmt.Sprintf("http://127.0.0.1:19402/%s/%d", run, n))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n++
		}
	}
	hook.down.Store(true)
	send(20)
	caddytester.Load(t, 2904, config(5)) // unchanged sink: same queue
	send(10)
	go func() {
		// Bring the receiver back while the changed config is loading:
		// the old worker drains into it within shutdown_timeout.
		time.Sleep(200 * time.Millisecond)
		hook.down.Store(false)
	}()
	caddytester.Load(t, 2904, config(7)) // changed sink: old one drained
	send(10)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/%s/%d", run, i)
	}
	if missing := hook.missing(paths, 30*time.Second); missing != 0 {
		t.Fatalf("%d of %d events missing after reloads", missing, n)
	}
	for _, s := range caddyaudit.Stats() {
		if s.Name == "reload-hook" && s.Dropped != 0 {
			t.Fatalf("dropped %d", s.Dropped)
		}
	}
}

// TestRequestOutlivingItsConfig: a request still running when a reload
// unloads its config (a WebSocket kept open by stream_close_delay, a slow
// upstream past grace_period) records its event when it ends, through the
// sink the new config runs: whether the reload kept the sink or replaced it.
func TestRequestOutlivingItsConfig(t *testing.T) {
	hook := newPathHook(t)
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		io.WriteString(w, "late")
	}))
	defer slow.Close()

	config := func(batch int) string {
		return fmt.Sprintf(`{
	admin localhost:2904
	http_port 19420
	https_port 19421
	grace_period 200ms
	audit {
		sink http %s {
			name outlive-hook
			batch_size %d
			flush_interval 10ms
		}
	}
}

:19403 {
	audit
	reverse_proxy %s
}
`, hook.URL, batch, slow.Listener.Addr())
	}
	caddytester.Load(t, 2904, config(3))
	run := fmt.Sprint(time.Now().UnixNano())
	for i, batch := range []int{3, 4} { // same sink, then a changed one
		path := fmt.Sprintf("/%s/outlive-%d", run, i)
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := http.Get("http://127.0.0.1:19403" + path)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		select { // the request is at the upstream
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("reload %d: the request never reached the upstream", i)
		}
		caddytester.Load(t, 2904, config(batch))
		release <- struct{}{} // the old config is gone; now the request ends
		<-done
		if hook.missing([]string{path}, 10*time.Second) != 0 {
			t.Fatalf("reload %d (batch_size %d): the event of the request that outlived its config never arrived", i, batch)
		}
	}
	for _, s := range caddyaudit.Stats() {
		if s.Name == "outlive-hook" && s.Dropped != 0 {
			t.Fatalf("dropped %d", s.Dropped)
		}
	}
}
