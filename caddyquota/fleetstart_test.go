package caddyquota

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/busyloop"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestFleetStartAdmits: gateways started together on a three-node NATS
// cluster, their counts in a bucket none has created yet (a route's rate
// limit, whose counts link at the route's first request), each send a
// request on a rate limit at once: every one is admitted from a lease.
// The gateways create the bucket together, and until its stream has a
// leader the first operations fail ("no responders") or go unanswered
// (the stream's info). Before the fix the first error started the
// gateway's outage, and a gateway that never read the counts has no share
// to decide on: the request was refused (2 of 3 gateways a round here,
// 0 of 20 admitted by gw-a in TestQuotaFleetBurst's first burst).
func TestFleetStartAdmits(t *testing.T) {
	busyloop.Start(t)
	c := natstest.StartCluster(t, 3)
	loc := farFromMidnight(t)
	// the cluster's JetStream is up, as in a running fleet
	startGateway(t, c.URL(), "warm", t.TempDir(), fleetOpts{loc: loc}).ready(t)
	p := mustPlan(t, "rl20", "20/1m")
	for round := 0; round < 4; round++ {
		o := fleetOpts{loc: loc, failClosed: true, leaseWait: time.Second, sync: 250 * time.Millisecond,
			bucket: fmt.Sprintf("rate_limit_%d", round), replicas: 3}
		var gws []*gateway
		for _, name := range []string{"a", "b", "c"} {
			gws = append(gws, startGateway(t, c.URL(), name, t.TempDir(), o))
		}
		var wg sync.WaitGroup
		decided := make([]Decision, len(gws))
		for i, g := range gws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := g.store.AcquireAt(p, "client-"+g.name, time.Now(), false)
				if err != nil {
					t.Error(err)
				}
				decided[i] = d
			}()
		}
		wg.Wait()
		for i, d := range decided {
			if !d.Admitted || d.Share {
				t.Errorf("round %d: gateway %s's first request, at its start: admitted %v, decided alone %v (want admitted from a lease)",
					round, gws[i].name, d.Admitted, d.Share)
			}
		}
		for _, g := range gws {
			g.stop()
		}
	}
}
