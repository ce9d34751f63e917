package caddyaudit_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/apigate/gateway/caddyaudit"

	"github.com/apigate/gateway/internal/testkit/caddytester"
)

// TestSpoolAcrossGatewayRestart: the receiver is down, N requests pass,
// the audit app is stopped (its sink removed from the config), then
// started again with the receiver up: all N events arrive.
func TestSpoolAcrossGatewayRestart(t *testing.T) {
	const n = 40
	hook := newPathHook(t)
	spool := t.TempDir()
	withAudit := fmt.Sprintf(`{
	admin localhost:2904
	http_port 19430
	https_port 19431
	grace_period 1s
	audit {
		queue_size 4
		spool_dir %s
		shutdown_timeout 100ms
		sink http %s {
			name restart-hook
			batch_size 8
			flush_interval 10ms
		}
	}
}

:19403 {
	audit
	respond "ok"
}
`, spool, hook.URL)
	without := `{
	admin localhost:2904
	http_port 19430
	https_port 19431
	grace_period 1s
}

:19403 {
	respond "ok"
}
`
	hook.down.Store(true)
	tester := caddytester.Load(t, 2904, withAudit)
	run := fmt.Sprint(time.Now().UnixNano())
	for i := 0; i < n; i++ {
		resp, err := tester.Client.Get(fmt.Sprintf("http://127.0.0.1:19403/%s/%d", run, i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	caddytester.Load(t, 2904, without) // the audit app stops: events go to disk
	for _, s := range caddyaudit.Stats() {
		if s.Name == "restart-hook" {
			t.Fatal("sink still running after its config was removed")
		}
	}
	hook.down.Store(false)
	caddytester.Load(t, 2904, withAudit) // starts again and replays the spool
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/%s/%d", run, i)
	}
	if missing := hook.missing(paths, 30*time.Second); missing != 0 {
		t.Fatalf("%d of %d events missing after the restart", missing, n)
	}
	for _, s := range caddyaudit.Stats() {
		if s.Name == "restart-hook" && (s.Dropped != 0 || s.Spooled == 0) {
			t.Fatalf("dropped %d, spooled %d: the events must have gone through the spool", s.Dropped, s.Spooled)
		}
	}
}
