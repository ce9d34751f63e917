package fleettest

import (
	"fmt"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// TestFleetLabelRateLimit: a container on host A with the label
// gateway.router.api.rate_limit=10/1m, requests from one client sent
// alternately through gateway A and gateway B (the reference config:
// storage nats): the limit holds for the fleet, admitting at least 10 and
// at most 10 + 1 per gateway (the counts are exchanged every 250ms, the
// requests come every 500ms). Without sharing each gateway would admit
// 10, all 24 requests in all but 4.
func TestFleetLabelRateLimit(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"la", "lb"})
	cluster := natstest.StartCluster(t, 1)
	a, b := newRefHost(t, "a", pods[0]), newRefHost(t, "b", pods[1])
	a.start(t, bin, cluster.URL())
	b.start(t, bin, cluster.URL())
	p := freePort(t)
	labels := refLabels("limited", p)
	labels["gateway.router.api.rate_limit"] = "10/1m"
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
	// Both gateways have read each other's (empty) counts.
	time.Sleep(time.Second)

	const limit, requests, pace = 10, 24, 500 * time.Millisecond
	admitted, limited := 0, 0
	per := map[string]int{}
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for i := 0; i < requests; i++ {
		<-tick.C
		h := []*fleetHost{a, b}[i%2]
		code, body, err := podmantest.Get(h.url(fmt.Sprintf("/limited/%d", i)))
		switch {
		case err != nil:
			t.Fatal(err)
		case code == 200:
			admitted++
			per[h.name]++
		case code == 429:
			limited++
		default:
			t.Fatalf("request %d through %s: %d %q", i, h.name, code, body)
		}
	}
	t.Logf("label rate limit %d/1m across 2 gateways: %d of %d requests admitted (%v), %d refused", limit, admitted, requests, per, limited)
	if admitted < limit {
		t.Errorf("admitted %d, fewer than the limit %d", admitted, limit)
	}
	if admitted > limit+2 {
		t.Errorf("admitted %d: more than the limit %d + 1 per gateway: the label's limit is not shared", admitted, limit)
	}
}
