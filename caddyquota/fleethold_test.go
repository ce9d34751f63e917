package caddyquota

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/busyloop"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestFleetHoldAfterKill: a gateway killed (c, stopped with no last
// write, as a SIGKILL leaves it) never writes again. A survivor whose own
// NATS connection then drops for a moment holds after it, waiting for the
// others' writes of what they admitted alone (othersPending); c's is not
// one to wait for, and the survivors lease the rest of the quota at once,
// not after pendingFor (a minute). Before the fix the survivors held for
// the minute and the fleet admitted nothing more with tokens left: 8 of
// 50 TestQuotaFleetKill runs beside busy loops stopped there.
//
//   - "outage at the kill": c holds a lease as it is killed, and a's
//     connection drops at once, while c's last write is recent; b never
//     loses NATS and leases on, so a's hold protects nothing (b already
//     leases from the counts that would lack what c might admit alone).
//   - "fleet outage an ack window after the kill": c holds a lease as it
//     is killed; a and b serve on, and their connections drop together
//     once each has read the counts an ack window after c's last write
//     (they already lease without c's reads): neither waits for c when
//     they are back.
//   - "fleet outage at the kill of a passive gateway": c held nothing as
//     it last wrote (the leases never waited for its reads), and a's and
//     b's connections drop together at once: neither waits for c when
//     they are back.
func TestFleetHoldAfterKill(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cutB: b's connection drops with a's
		cutB bool
		// afterAck: the outage begins once each survivor has read the
		// counts an ack window after c's last write
		afterAck bool
		// cPassive: c's last write is a passive one (it held nothing);
		// else c holds a lease as it last writes
		cPassive bool
	}{
		{name: "outage at the kill"},
		{name: "fleet outage an ack window after the kill", cutB: true, afterAck: true},
		{name: "fleet outage at the kill of a passive gateway", cutB: true, cPassive: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busyloop.Start(t)
			c := natstest.StartCluster(t, 1)
			aGate, bGate := newGate(t, c.URLs[0]), newGate(t, c.URLs[0])
			p := mustPlan(t, "free", "1000/day")
			o := fleetOpts{loc: farFromMidnight(t), failClosed: true}
			// c's sync interval of a second: an operation of c within a
			// second of its last request is not an idle one, so which
			// of a passive write or a lease c last wrote does not
			// depend on the scheduler
			oc := o
			oc.sync = time.Second
			gws := []*gateway{
				startGateway(t, aGate.URL(), "a", t.TempDir(), o),
				startGateway(t, bGate.URL(), "b", t.TempDir(), o),
				startGateway(t, c.URL(), "c", t.TempDir(), oc),
			}
			for _, g := range gws {
				g.ready(t)
			}
			total, _ := admitAndWrite(t, gws, p, "dana", 300)
			if tc.cPassive {
				waitFor(t, "c's passive write (its tokens given back)", 10*time.Second, func() string {
					if st := lastStamp(t, gws[0], p, "dana", "c"); !st.Passive || !st.Leasing {
						return fmt.Sprintf("c's stamp %+v", st)
					}
					return ""
				})
			} else {
				// c serves dana until it has written since: its last write holds
				// a lease, a gateway whose reads the others' leases wait for
				since := time.Now().UnixMilli()
				waitFor(t, "c's write while serving dana", 10*time.Second, func() string {
					if d, _ := gws[2].store.AcquireAt(p, "dana", time.Now(), false); d.Admitted {
						total++
					}
					if st := lastStamp(t, gws[0], p, "dana", "c"); st.Passive || st.Seen < since {
						return fmt.Sprintf("c's stamp %+v", st)
					}
					return ""
				})
			}
			gws[2].stop()
			// c's last write, read once c is stopped
			cLast := lastStamp(t, gws[0], p, "dana", "c")
			if cLast.Passive != tc.cPassive {
				t.Fatalf("c's last write passive: %v, want %v (stamp %+v)", cLast.Passive, tc.cPassive, cLast)
			}
			survivors := gws[:2]
			if tc.afterAck {
				// the survivors serve dana meanwhile (their leases wait
				// for c's read until then). What counts is each
				// survivor's last read of the counts before its outage
				// (othersPending), not when the test cuts: under load
				// that read may be a sync interval or more before it
				waitFor(t, "each survivor's read an ack window after c's last write", 10*time.Second, func() string {
					for _, g := range survivors {
						if d, _ := g.store.AcquireAt(p, "dana", time.Now(), false); d.Admitted {
							total++
						}
					}
					for _, g := range survivors {
						read := g.fleet.lastRead.Load() / int64(time.Millisecond)
						if age := read - cLast.Seen; age < g.fleet.ackWindow().Milliseconds() {
							return fmt.Sprintf("%s read %d ms after c's last write", g.name, age)
						}
					}
					return ""
				})
			}
			cut := []*gate{aGate}
			if tc.cutB {
				cut = append(cut, bGate)
			}
			for _, g := range cut {
				g.set(false)
			}
			waitFor(t, "the cut gateways deciding alone", 10*time.Second, func() string {
				for i := range cut {
					if d, _ := survivors[i].store.AcquireAt(p, "dana", time.Now(), false); d.Admitted {
						total++
					}
					if survivors[i].fleet.Available() {
						return survivors[i].name + " still counts on the fleet"
					}
				}
				return ""
			})
			if tc.cPassive {
				// the case: c's last write within an ack window of the
				// survivors' last reads, so only its being passive lets
				// them lease past it
				for i := range cut {
					g := survivors[i]
					read := g.fleet.readBeforeDown.Load() / int64(time.Millisecond)
					if age := read - cLast.Seen; age >= g.fleet.ackWindow().Milliseconds() {
						t.Fatalf("%s last read %d ms after c's last write before its outage, an ack window or more", g.name, age)
					}
				}
			}
			for _, g := range cut {
				g.set(true)
			}
			// both survivors serve dana: they lease again well before
			// pendingFor, and the fleet admits the rest of the quota
			var fromLease [2]int64
			waitFor(t, "the survivors leasing the rest of the quota", 20*time.Second, func() string {
				for i, g := range survivors {
					d, err := g.store.AcquireAt(p, "dana", time.Now(), false)
					if err != nil {
						return err.Error()
					}
					if d.Admitted {
						total++
						if !d.Share {
							fromLease[i]++
						}
					}
				}
				for _, g := range survivors {
					if !g.fleet.leasing(time.Now()) {
						return fmt.Sprintf("%s holds (no lease, its share only); %d admitted, %v from leases since the outage (a, b)", g.name, total, fromLease)
					}
				}
				// c holds at most a lease and half the one before
				if total < 1000-75 {
					return fmt.Sprintf("%d admitted, %v of them from leases since the outage (a, b)", total, fromLease)
				}
				return ""
			})
			t.Logf("%d admitted, %v from leases after the outage (a, b)", total, fromLease)
			if total > 1000 {
				t.Errorf("%d admitted, over the quota 1000 (NATS answered b throughout)", total)
			}
		})
	}
}

// lastStamp is gateway node's stamp in consumer's month document, as g
// reads it: when and how it last wrote.
func lastStamp(t *testing.T, g *gateway, p *Plan, consumer, node string) nodeStamp {
	t.Helper()
	var st nodeStamp
	waitFor(t, node+"'s entry in the month's document", 10*time.Second, func() string {
		month := g.store.Calendar().Month(time.Now()).ID
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		kv, err := g.fleet.bucket(ctx)
		if err != nil {
			return err.Error()
		}
		e, err := kv.Get(ctx, monthKey(consumer, p.Name, month))
		if err != nil {
			return err.Error()
		}
		var doc monthDoc
		if err := json.Unmarshal(e.Value(), &doc); err != nil {
			return err.Error()
		}
		n := doc.Nodes[node]
		if n == nil {
			return "no entry"
		}
		st = n.nodeStamp
		return ""
	})
	return st
}
