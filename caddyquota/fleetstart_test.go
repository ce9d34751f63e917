package caddyquota

import (
	"fmt"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	dto "github.com/prometheus/client_model/go"

	"github.com/apigate/gateway/internal/testkit/busyloop"
	"github.com/apigate/gateway/internal/testkit/freeport"
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
		// lease_wait is the time the new stream has to elect its leader:
		// a second was too short beside the busy loops of a loaded CI run
		// (round 3 of a fresh-clone run: the bucket created 60 ms after
		// its deadline, "no responders" until lease_wait ended). A gateway
		// that takes the first error for an outage (the bug) refuses at
		// once, whatever lease_wait.
		o := fleetOpts{loc: loc, failClosed: true, leaseWait: 10 * time.Second, sync: 250 * time.Millisecond,
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

// TestFleetStartCountsUnreachable: a starting link waits for its first
// lease no longer than a lease waits, and an outage at the start is one
// (docs/caddyquota.md):
//   - NATS unreachable as the gateway starts: its requests decide at once
//     on its share, and fail_closed refuses them (a gateway that never
//     read the counts has no share);
//   - NATS answers but the counts never do (a server without JetStream):
//     the first request waits lease_wait for a lease (its operation tried
//     again meanwhile), then decides on the share (refused), and the outage
//     has begun: the next request decides at once.
func TestFleetStartCountsUnreachable(t *testing.T) {
	p := mustPlan(t, "rl20", "20/1m")
	o := fleetOpts{loc: farFromMidnight(t), failClosed: true, leaseWait: time.Second}
	// decide sends a request and says whether it waited lease_wait for a
	// lease (gateway_quota_fleet_lease_timeouts_total)
	decide := func(t *testing.T, g *gateway) (Decision, bool) {
		t.Helper()
		before := leaseTimeoutsNow(t)
		d, err := g.store.AcquireAt(p, "client", time.Now(), false)
		if err != nil {
			t.Fatal(err)
		}
		return d, leaseTimeoutsNow(t) > before
	}
	t.Run("nats-unreachable", func(t *testing.T) {
		url := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Ports(t, 1)[0])
		g := startGateway(t, url, "a", t.TempDir(), o)
		for i := 0; i < 2; i++ {
			if d, waited := decide(t, g); d.Admitted || !d.Share || waited {
				t.Errorf("request %d with NATS unreachable from the start: admitted %v, decided alone %v, waited lease_wait %v (want refused on the share at once)",
					i, d.Admitted, d.Share, waited)
			}
		}
		if g.fleet.Available() {
			t.Error("the link says the counts are available")
		}
	})
	t.Run("no-jetstream", func(t *testing.T) {
		opts := natsserver.DefaultTestOptions
		opts.Port = -1
		srv := natsserver.RunServer(&opts)
		t.Cleanup(srv.Shutdown)
		g := startGateway(t, srv.ClientURL(), "a", t.TempDir(), o)
		if d, waited := decide(t, g); d.Admitted || !d.Share || !waited {
			t.Errorf("first request, the counts never answering: admitted %v, decided alone %v, waited lease_wait %v (want refused on the share after lease_wait)",
				d.Admitted, d.Share, waited)
		}
		if g.fleet.Available() {
			t.Error("after lease_wait with no answer the link says the counts are available")
		}
		if d, waited := decide(t, g); d.Admitted || !d.Share || waited {
			t.Errorf("second request, the outage begun: admitted %v, decided alone %v, waited lease_wait %v (want refused on the share at once)",
				d.Admitted, d.Share, waited)
		}
	})
}

// leaseTimeoutsNow reads gateway_quota_fleet_lease_timeouts_total.
func leaseTimeoutsNow(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := leaseTimeouts.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestFleetStartHold: a gateway started while NATS is unreachable decides
// alone at once (fail_closed: refused, it never read the counts); when
// NATS is back it takes no lease for a sync interval (the others write
// what they admitted alone first), and a request then waits for that
// hold's end and leases, instead of deciding alone on the share of a
// read it never made (refused: before the fix, a gateway whose first
// operation got no answer within lease_wait, a cluster's JetStream still
// electing its leaders, refused everything for a sync interval after its
// first answer).
func TestFleetStartHold(t *testing.T) {
	busyloop.Start(t)
	c := natstest.StartCluster(t, 1)
	gate := newGate(t, c.URLs[0])
	gate.set(false)
	p := mustPlan(t, "rl20", "20/1m")
	g := startGateway(t, gate.URL(), "a", t.TempDir(), fleetOpts{loc: farFromMidnight(t), failClosed: true,
		sync: 2 * time.Second, leaseWait: 5 * time.Second})
	if d, err := g.store.AcquireAt(p, "client", time.Now(), false); err != nil || d.Admitted || !d.Share {
		t.Fatalf("request with NATS unreachable from the start: %+v %v (want refused on the share)", d, err)
	}
	gate.set(true)
	waitFor(t, "the counts reachable", 20*time.Second, func() string {
		if !g.fleet.Available() {
			return "deciding alone"
		}
		return ""
	})
	if left := g.fleet.startHoldLeft(time.Now()); left == 0 {
		t.Fatal("no hold after the first answer: the test decides nothing")
	}
	if d, err := g.store.AcquireAt(p, "client", time.Now(), false); err != nil || !d.Admitted || d.Share {
		t.Errorf("request during the hold after the first answer: admitted %v, decided alone %v, %v (want admitted from a lease)", d.Admitted, d.Share, err)
	}
}
