package fleettest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestQuietStart: a normal first start of the reference host config
// against a running NATS, with a container to route while the internal
// CA's certificate is being obtained, logs no ERROR line and nothing
// about writes queued or dropped for an unreachable NATS. Before, every
// first start logged "applied the writes queued while NATS was
// unreachable", and about 1 in 3 logged "obtaining certificate: context
// canceled": the docker app's first listing applied through a config
// reload, which canceled the first config's obtain. The first config now
// starts with the listing's routes (caddydocker's Watcher.Prime), and no
// reload follows the start. It logs the time from the process's start to
// the container's first routed 200.
func TestQuietStart(t *testing.T) {
	bin := gatewayBinary(t)
	pod, err := podmantest.New(repoRoot(t), "quiet")
	if pod != nil {
		t.Cleanup(pod.Close)
	}
	podmantest.Require(t, pod, err)
	cluster := natstest.StartCluster(t, 1)
	h := newRefHost(t, "q", pod)
	p := freeport.Port(t)
	if err := pod.Run("quiet", p, refLabels("quiet", p)); err != nil {
		t.Fatal(err)
	}
	// the container serves before the gateway starts: a request routed to
	// a container still starting is refused, and reverse_proxy logs that
	// as an ERROR, which a start beside running upstreams does not see
	// (fresh-clone run of ead5725 beside a busy loop: 47 such 502s)
	podmantest.Eventually(t, "the container serving", 30*time.Second,
		podmantest.Expect(fmt.Sprintf("http://127.0.0.1:%d/quiet/x", p), 200, ""))
	first := make(chan string, 1)
	stop := make(chan struct{})
	began := time.Now()
	go func() { first <- firstRouted(h.url("/quiet/x"), "quiet /quiet/x", began, stop) }()
	h.start(t, bin, cluster.URL())
	podmantest.Eventually(t, "the container routed", 30*time.Second, podmantest.Expect(h.url("/quiet/x"), 200, "quiet /quiet/x"))
	close(stop)
	t.Logf("start to the first routed 200: %s", <-first)
	podmantest.Eventually(t, "the certificate served", 30*time.Second, func() string {
		if _, err := fingerprint(h); err != nil {
			return err.Error()
		}
		return ""
	})
	h.proc.stop(t)
	log, err := os.ReadFile(h.proc.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, `"logger":"admin.api"`) && strings.Contains(line, `/routes"`) {
			// the docker app's apply: a config reload, which cancels the
			// first config's certificate obtain
			t.Errorf("the start was followed by a config reload: %s", line)
		}
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, "dropped") || strings.Contains(line, "unreachable") {
			t.Errorf("a normal start logged: %s", line)
		}
	}
}

// firstRouted polls url every 5 ms from began until it answers 200 with
// body (or stop), and describes how long that took and what the earlier
// answers were.
func firstRouted(url, body string, began time.Time, stop <-chan struct{}) string {
	answers := map[string]int{}
	for {
		select {
		case <-stop:
			return fmt.Sprintf("not seen; before: %v", answers)
		default:
		}
		code, b, err := podmantest.Get(url)
		switch {
		case err != nil && strings.Contains(err.Error(), "refused"):
			answers["refused"]++
		case err != nil:
			answers["error"]++
		case code == 200 && b == body:
			return fmt.Sprintf("%s; before: %v", time.Since(began).Round(time.Millisecond), answers)
		default:
			answers[fmt.Sprint(code)]++
		}
		time.Sleep(5 * time.Millisecond)
	}
}
