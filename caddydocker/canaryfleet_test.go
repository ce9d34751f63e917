package caddydocker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestCanaryFleet: two gateways' canary controllers on one NATS cluster
// (real JetStream KV, the fleet's bucket) apply the same weight, one's
// promotion step and one's rollback reach the other, a rollback is never
// undone by the other's stale write, and a gateway that starts later takes
// the rolled back state from the bucket before it sends the canary
// anything.
func TestCanaryFleet(t *testing.T) {
	nc := natstest.StartCluster(t, 1)
	fa := startFleet(t, nc, "canary-a", "127.0.0.1", 3*time.Second, nil)
	fb := startFleet(t, nc, "canary-b", "127.0.0.1", 3*time.Second, nil)
	logA, _ := observed(t)
	logB, _ := observed(t)
	ca := newCanaries("srv", "", fa, globalMetrics(), logA)
	cb := newCanaries("srv", "", fb, globalMetrics(), logB)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ca.run(ctx)
	go cb.run(ctx)

	spec := defaultSpec(20)
	spec.MinRequests, spec.Step, spec.Interval = 10, 30, time.Second
	vs := map[string][]VersionGroup{"fleetsvc": groups(&spec)}
	spA, _ := ca.splits(vs)
	ra := spA["fleetsvc"].rel
	if ra.weight.Load() != 0 {
		t.Fatalf("a new release sends the canary %d%% before the fleet has its record", ra.weight.Load())
	}
	waitFor(t, "A's record created, weight 20", 10*time.Second, func() error {
		if _, _, _, ok := fa.CanaryRecord("fleetsvc", ra.id); !ok || ra.weight.Load() != 20 {
			return errf("record %v weight %d", ok, ra.weight.Load())
		}
		return nil
	})
	spB, _ := cb.splits(vs)
	rb := spB["fleetsvc"].rel
	waitFor(t, "B takes the record up", 10*time.Second, func() error {
		if rb.weight.Load() != 20 || rb.rev == 0 {
			return errf("B at %d rev %d", rb.weight.Load(), rb.rev)
		}
		return nil
	})

	// a promotion step on A (its window has enough answers) reaches B
	for range 10 {
		ra.watchOf("10.0.0.9:80", 1).ObserveAnswer(200, nil, time.Millisecond)
	}
	waitFor(t, "A steps to 50 and B follows", 10*time.Second, func() error {
		if ra.weight.Load() != 50 || rb.weight.Load() != 50 {
			return errf("A %d B %d", ra.weight.Load(), rb.weight.Load())
		}
		return nil
	})

	// B's canary fails: B rolls it back, A follows within the ttl
	t0 := time.Now()
	for range 10 {
		rb.watchOf("10.0.0.9:80", 1).ObserveAnswer(503, nil, time.Millisecond)
	}
	if rb.State() != CanaryRolledBack {
		t.Fatalf("B did not roll back: %s", rb.State())
	}
	waitFor(t, "A rolled back", 3*time.Second, func() error {
		if ra.State() != CanaryRolledBack || ra.weight.Load() != 0 {
			return errf("A %s at %d", ra.State(), ra.weight.Load())
		}
		return nil
	})
	t.Logf("B's rollback applied on A after %s", time.Since(t0).Round(time.Millisecond))
	st := ca.status(time.Now())[0]
	if st.By != "canary-b" || !strings.Contains(st.Reason, "error rate") {
		t.Fatalf("A's status %+v", st)
	}
	// A's promotion clock fires again: nothing moves
	time.Sleep(1500 * time.Millisecond)
	if ra.State() != CanaryRolledBack || rb.State() != CanaryRolledBack {
		t.Fatalf("rollback undone: A %s B %s", ra.State(), rb.State())
	}

	// a third gateway starting now: rolled back from the start
	fc := startFleet(t, nc, "canary-c", "127.0.0.1", 3*time.Second, nil)
	logC, _ := observed(t)
	cc := newCanaries("srv", "", fc, globalMetrics(), logC)
	go cc.run(ctx)
	waitFor(t, "C's watch has the record", 10*time.Second, func() error {
		if _, _, _, ok := fc.CanaryRecord("fleetsvc", ra.id); !ok {
			return errf("not yet")
		}
		return nil
	})
	spC, _ := cc.splits(vs)
	if rc := spC["fleetsvc"].rel; rc.State() != CanaryRolledBack || rc.weight.Load() != 0 {
		t.Fatalf("C: %s at %d", rc.State(), rc.weight.Load())
	}
}

type errText string

func (e errText) Error() string { return string(e) }

func errf(format string, args ...any) error { return errText(fmt.Sprintf(format, args...)) }
