package fleettest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/busyloop"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestFleetLabelRateLimit: a container on host A with the labels
// gateway.router.api.rate_limit=20/1m and gateway.router.b100.rate_limit=
// 100/1m; bursts of 40 and 200 requests from one client (the key is the
// client IP), sent by 4 concurrent clients alternately through gateway A
// and gateway B (the reference config: storage nats and a docker fleet)
// as fast as they answer. The limit holds for the fleet: at most the
// limit + 1 per gateway admitted (the goal; the quota's leases
// make it the limit exactly), at least the limit. Without sharing each
// gateway would admit its limit: 40 of 40, 200 of 200 (with
// caddy-ratelimit's distributed mode, the design before, all 40 of 40 in
// such a burst: its counts are exchanged every 250 ms).
func TestFleetLabelRateLimit(t *testing.T) {
	busyloop.Start(t)
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"la", "lb"})
	cluster := natstest.StartCluster(t, 1)
	a, b := newRefHost(t, "a", pods[0]), newRefHost(t, "b", pods[1])
	a.start(t, bin, cluster.URL())
	b.start(t, bin, cluster.URL())
	p := freeport.Port(t)
	labels := refLabels("limited", p)
	labels["gateway.router.api.rate_limit"] = "20/1m"
	labels["gateway.router.b100.path_prefix"] = "/b100"
	labels["gateway.router.b100.auth.required"] = "false"
	labels["gateway.router.b100.rate_limit"] = "100/1m"
	labels["gateway.router.open.path_prefix"] = "/open-limited"
	labels["gateway.router.open.auth.required"] = "false"
	if err := a.pod.Run("limited", p, labels); err != nil {
		t.Fatal(err)
	}
	// Wait on the router without a limit, so that waiting spends none.
	for _, h := range []*fleetHost{a, b} {
		podmantest.Eventually(t, h.name+" routes the container", 30*time.Second,
			podmantest.Expect(h.url("/open-limited/x"), 200, "limited /open-limited/x"))
	}
	for _, tc := range []struct {
		path  string
		limit int
	}{{"/limited", 20}, {"/b100", 100}} {
		t.Run(tc.path, func(t *testing.T) {
			var sent, admitted, limited atomic.Int64
			per := [2]atomic.Int64{}
			var wg sync.WaitGroup
			for c := 0; c < 4; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := sent.Add(1)
						if i > int64(2*tc.limit) {
							return
						}
						h := []*fleetHost{a, b}[i%2]
						code, body, err := podmantest.Get(h.url(fmt.Sprintf("%s/%d", tc.path, i)))
						switch {
						case err != nil:
							t.Error(err)
						case code == 200:
							admitted.Add(1)
							per[i%2].Add(1)
						case code == 429:
							limited.Add(1)
						default:
							t.Errorf("request %d through %s: %d %q", i, h.name, code, body)
						}
					}
				}()
			}
			wg.Wait()
			got := admitted.Load()
			t.Logf("label rate limit %d/1m across 2 gateways: %d of %d requests admitted (a %d, b %d), %d refused",
				tc.limit, got, 2*tc.limit, per[1].Load(), per[0].Load(), limited.Load())
			if got > int64(tc.limit+2) {
				t.Errorf("admitted %d: more than the limit %d + 1 per gateway: the label's limit is not the fleet's", got, tc.limit)
			}
			if got < int64(tc.limit) {
				t.Errorf("admitted %d, fewer than the limit %d", got, tc.limit)
			}
		})
	}
}
