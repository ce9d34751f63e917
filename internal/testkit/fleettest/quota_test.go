package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/caddyquota/quotausage"
	"github.com/apigate/gateway/internal/testkit/burst"
	"github.com/apigate/gateway/internal/testkit/busyloop"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// The quota fleet tests' settings: the counts are written every
// quotaSync, a lease covers at most quotaLease requests.
const (
	quotaLimit = 3000
	quotaSync  = 200 * time.Millisecond
	quotaLease = 50
	// quotaQuiet is how long no request must have been admitted for the
	// quota to count as used up: longer than the ack window (2 x
	// (lease_wait 1s + 2 x sync_interval)), for which the others wait
	// for a killed gateway's read of their leases
	quotaQuiet = 4 * time.Second
)

// quotaZone is an IANA zone where it is now between 10:00 and 14:00: the
// tests' day never ends during a run.
func quotaZone() string {
	off := 12 - time.Now().UTC().Hour() // local = UTC + off, -11..12
	if off == 0 {
		return "UTC"
	}
	// Etc/GMT-N is N hours east of UTC (POSIX sign)
	if off > 0 {
		return fmt.Sprintf("Etc/GMT-%d", off)
	}
	return fmt.Sprintf("Etc/GMT+%d", -off)
}

// quotaGateway is one gateway process of a quota fleet.
type quotaGateway struct {
	name        string
	admin, http int
	home        string
	proc        *gatewayProc
}

func (g *quotaGateway) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", g.http, path)
}

// config is the gateway's Caddyfile: the fast path, one plan counted per
// X-Consumer across the fleet, fail_closed while NATS is away.
func (g *quotaGateway) config(nats string) func(dir string) string {
	return func(dir string) string {
		return fmt.Sprintf(`{
	admin 127.0.0.1:%[1]d
	%[11]s
	http_port %[2]d
	https_port %[3]d
	auto_https off
	servers {
		listener_wrappers {
			apigate
		}
	}
	quota {
		plan metered {
			limit %[4]d/day
		}
		# the bursts' quotas (TestQuotaFleetBurst)
		plan q20 20/day
		plan q100 100/day
		plan q1000 1000/day
		default metered
		timezone %[5]s
		on_unavailable fail_closed
		dir %[6]s/quota
		fleet {
			nats %[7]s
			node %[8]s
			replicas 3
			sync_interval %[9]s
			max_lease %[10]d
		}
	}
}
:%[2]d {
	handle /ready {
		respond "ready"
	}
%[12]s	handle {
		quota {
			key {http.request.header.X-Consumer}
		}
		respond "ok"
	}
}
`, g.admin, g.http, g.http+1, quotaLimit, quotaZone(), dir, nats, g.name, quotaSync, quotaLease, evidenceLog(dir), burstRoutes())
	}
}

func (g *quotaGateway) start(t *testing.T, bin, nats string) {
	t.Helper()
	g.proc = runGatewayIn(t, bin, g.name, g.home, nil, g.config(nats), g.url("/ready"))
}

// leasing waits until the gateway takes leases from the fleet's bucket
// (a cluster's JetStream elects its leaders after the servers start).
func (g *quotaGateway) leasing(t *testing.T) {
	t.Helper()
	podmantest.Eventually(t, g.name+" leasing from the fleet", 60*time.Second, func() string {
		req, _ := http.NewRequest("GET", g.url("/warmup"), nil)
		req.Header.Set("X-Consumer", "warmup-"+g.name)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		m := pathtest.Metrics(t, g.admin, "gateway_quota_")
		if m[`gateway_quota_fleet_operations_total{result="ok"}`] < 1 || m["gateway_quota_fleet_available"] != 1 {
			return fmt.Sprintf("metrics %v", m)
		}
		return ""
	})
}

func (g *quotaGateway) usage(t *testing.T, consumer string) quotausage.Consumer {
	t.Helper()
	var u quotausage.Consumer
	code, body, err := podmantest.Get(fmt.Sprintf("http://127.0.0.1:%d%s?consumer=%s", g.admin, quotausage.Path, consumer))
	if err != nil || code != 200 {
		t.Fatalf("usage from %s: %d %v %s", g.name, code, err, body)
	}
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// admittedToday is the fleet's admitted count of the consumer today, as
// a gateway's admin API reports it.
func admittedToday(u quotausage.Consumer) int64 {
	var n int64
	for _, d := range u.Days {
		n += d.Admitted
	}
	return n
}

// quotaLoad is clients sending requests of one consumer to gateways.
type quotaLoad struct {
	consumer string
	admitted atomic.Int64 // answers 200
	refused  atomic.Int64 // answers 429
	failed   atomic.Int64 // no answer (a killed gateway)
	per      []atomic.Int64
	lastOK   atomic.Int64 // Unix ns of the last 200
	stops    []chan struct{}
	wg       sync.WaitGroup
}

// run starts conc clients per gateway.
func (l *quotaLoad) run(gws []*quotaGateway, conc int) {
	l.per = make([]atomic.Int64, len(gws))
	l.stops = make([]chan struct{}, len(gws))
	for i, g := range gws {
		l.runOn(i, g, conc)
	}
}

// runOn starts conc clients of gateway i.
func (l *quotaLoad) runOn(i int, g *quotaGateway, conc int) {
	stop := make(chan struct{})
	l.stops[i] = stop
	for c := 0; c < conc; c++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", g.url("/api"), nil)
				req.Header.Set("X-Consumer", l.consumer)
				resp, err := client.Do(req)
				if err != nil {
					l.failed.Add(1)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					l.admitted.Add(1)
					l.per[i].Add(1)
					l.lastOK.Store(time.Now().UnixNano())
				case 429:
					l.refused.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					l.failed.Add(1)
				}
			}
		}()
	}
}

// stopGateway stops the clients of gateway i.
func (l *quotaLoad) stopGateway(i int) {
	select {
	case <-l.stops[i]:
	default:
		close(l.stops[i])
	}
}

func (l *quotaLoad) stop() {
	for i := range l.stops {
		l.stopGateway(i)
	}
	l.wg.Wait()
}

// waitAdmitted waits until the clients were answered 200 n times.
func (l *quotaLoad) waitAdmitted(t *testing.T, n int64) {
	t.Helper()
	podmantest.Eventually(t, fmt.Sprintf("%d admitted", n), 60*time.Second, func() string {
		if got := l.admitted.Load(); got < n {
			return fmt.Sprintf("%d admitted", got)
		}
		return ""
	})
}

// waitExhausted waits until nothing was admitted for quiet while the
// clients go on and every gateway of gws reaches the fleet's counts: the
// quota is used up everywhere (leases included). The quiet counts from
// the call at the earliest (after NATS is back the last 200 may be older
// than quiet while the fleet has not leased what is left yet), and starts
// again while a gateway's operations do not succeed (a cluster just
// restarted may stall for seconds: the refusals then say nothing of the
// quota).
func (l *quotaLoad) waitExhausted(t *testing.T, quiet time.Duration, gws []*quotaGateway) {
	t.Helper()
	from := time.Now()
	ok := make([]float64, len(gws))
	okAt := make([]time.Time, len(gws))
	for i := range okAt {
		okAt[i] = from
	}
	var polled time.Time
	podmantest.Eventually(t, "the quota used up", 90*time.Second, func() string {
		if now := time.Now(); now.Sub(polled) >= 200*time.Millisecond {
			polled = now
			for i, g := range gws {
				m := pathtest.Metrics(t, g.admin, "gateway_quota_fleet_")
				if n := m[`gateway_quota_fleet_operations_total{result="ok"}`]; n > ok[i] {
					ok[i], okAt[i] = n, now
				}
				if now.Sub(okAt[i]) > time.Second {
					from = now // no operation succeeded for a second
				}
			}
		}
		last := time.Unix(0, max(l.lastOK.Load(), from.UnixNano()))
		if time.Since(last) < quiet || l.refused.Load() == 0 {
			return fmt.Sprintf("last 200 %s ago, %d admitted, %d refused", time.Since(last).Round(time.Millisecond), l.admitted.Load(), l.refused.Load())
		}
		return ""
	})
}

// burstRoutes are the routes of TestQuotaFleetBurst: /rl/<n>/ a
// route's rate limit in the Caddyfile (a quota handler's own plan, n a
// minute), /q/<n>/ the plan q<n> (n a day); counted per X-Consumer.
func burstRoutes() string {
	var b strings.Builder
	for _, n := range []int{20, 100, 1000} {
		for _, r := range []struct{ path, plan string }{
			{fmt.Sprintf("/rl/%d/*", n), fmt.Sprintf("rl%d %d/1m", n, n)},
			{fmt.Sprintf("/q/%d/*", n), fmt.Sprintf("q%d", n)},
		} {
			fmt.Fprintf(&b, "\thandle %s {\n\t\tquota {\n\t\t\tkey {http.request.header.X-Consumer}\n\t\t\tplan %s\n\t\t}\n\t\trespond \"ok\"\n\t}\n", r.path, r.plan)
		}
	}
	return b.String()
}

// evidenceLog is the global option that writes the fleet's debug log
// (each operation, each share) to quota-fleet.log in the gateway's
// directory: the tests read it (aloneShares), FLEET_EVIDENCE_DIR keeps
// it.
func evidenceLog(dir string) string {
	return "log quotafleet {\n\t\toutput file " + dir + "/quota-fleet.log\n\t\tlevel DEBUG\n\t\tinclude quota.fleet http.handlers.quota\n\t}"
}

// aloneShares reads a gateway's fleet log (evidenceLog) for the shares
// it decided consumer's day window alone on ("deciding alone on a
// share": a lease with no answer within lease_wait, or an outage): how
// many times, and their sum. A gateway killed while deciding alone never
// writes what it admitted on those shares until it runs again, so the
// survivors may lease it again: the partial outage's documented bound,
// the quota + those shares (docs/caddyquota.md).
func aloneShares(log []byte, consumer string) (n int, sum int64) {
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.Contains(line, `"msg":"quota fleet: deciding alone on a share"`) {
			continue
		}
		var e struct {
			Consumer string `json:"consumer"`
			Window   string `json:"window"`
			Share    int64  `json:"share"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Consumer != consumer || e.Window != "day" {
			continue
		}
		n++
		sum += e.Share
	}
	return n, sum
}

// dumpQuota logs the quota bucket's documents and every gateway's usage
// of consumer (a failed test's evidence).
func dumpQuota(t *testing.T, natsURL string, gws []*quotaGateway, consumer string) {
	for _, g := range gws {
		code, body, err := podmantest.Get(fmt.Sprintf("http://127.0.0.1:%d%s?consumer=%s", g.admin, quotausage.Path, consumer))
		t.Logf("%s usage: %d %v %s", g.name, code, err, body)
		m := pathtest.Metrics(t, g.admin, "gateway_quota_")
		t.Logf("%s metrics: %v", g.name, m)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "gateway_quota")
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	for _, k := range keys {
		if e, err := kv.Get(ctx, k); err == nil {
			t.Logf("bucket %s rev %d: %s", k, e.Revision(), e.Value())
		}
	}
}

func startQuotaFleet(t *testing.T) (*natstest.Cluster, []*quotaGateway, string) {
	t.Helper()
	bin := gatewayBinary(t)
	c := natstest.StartCluster(t, 3)
	ports := freeport.Ports(t, 6)
	var gws []*quotaGateway
	for i, name := range []string{"gw-a", "gw-b", "gw-c"} {
		g := &quotaGateway{name: name, admin: ports[2*i], http: ports[2*i+1], home: t.TempDir()}
		g.start(t, bin, c.URL())
		gws = append(gws, g)
	}
	for _, g := range gws {
		g.leasing(t)
	}
	if dir := os.Getenv("FLEET_EVIDENCE_DIR"); dir != "" {
		// each gateway's debug log of the fleet's operations, kept for
		// a run's analysis
		t.Cleanup(func() {
			for _, g := range gws {
				if b, err := os.ReadFile(filepath.Join(g.home, "quota-fleet.log")); err == nil {
					_ = os.WriteFile(filepath.Join(dir, t.Name()+"-"+g.name+".log"), b, 0o644)
				}
			}
		})
	}
	return c, gws, bin
}

// TestQuotaFleetKill: three gateway processes on a three-node NATS
// cluster share one consumer's quota, four clients on each; one gateway
// is killed with SIGKILL mid-run and started again. The fleet admits the
// quota, never more; every request a gateway counted is in the fleet's
// usage, the killed one's included (it wrote them to disk before
// answering and to the bucket once it ran again); the lease it held when
// killed went back to the fleet when it started again. When the killed
// gateway had decided alone before (its lease unanswered within
// lease_wait under load: a partial outage, as its fleet log says), the
// fleet admits at most the quota + its shares, the documented bound.
func TestQuotaFleetKill(t *testing.T) {
	busyloop.Start(t)
	c, gws, bin := startQuotaFleet(t)
	natsURL := c.URL()
	t.Cleanup(func() {
		if t.Failed() {
			dumpQuota(t, natsURL, gws, "acme")
		}
	})
	l := &quotaLoad{consumer: "acme"}
	l.run(gws, 4)
	defer l.stop()

	l.waitAdmitted(t, quotaLimit/3)
	beforeKill := l.per[2].Load()
	l.stopGateway(2)
	gws[2].proc.kill()
	// did gw-c decide alone before the kill (its lease unanswered within
	// lease_wait under load: a partial outage)? Then the fleet may admit
	// the quota + its shares (what it admitted on them is on its disk
	// alone until it runs again); else exactly the quota
	fleetLog, err := os.ReadFile(filepath.Join(gws[2].home, "quota-fleet.log"))
	if err != nil {
		t.Fatalf("gw-c's fleet log: %v", err)
	}
	aloneN, aloneSum := aloneShares(fleetLog, "acme")
	bound := int64(quotaLimit)
	if aloneN > 0 {
		bound += aloneSum
		t.Logf("gw-c decided alone %d time(s) before its kill, on shares of %d in all: the partial outage's bound, %d", aloneN, aloneSum, bound)
	}
	// what the killed gateway counted but never answered: at most its
	// clients' requests in flight. (The others wait for gw-c's read of
	// their leases until its entry is an ack window old: quiet for
	// longer than that.)
	l.waitExhausted(t, quotaQuiet, gws[:2])
	withoutC := l.admitted.Load()
	t.Logf("killed gw-c after it answered %d; the fleet then stopped at %d admitted (the lease gw-c held stays taken)", beforeKill, withoutC)
	if withoutC > bound {
		t.Fatalf("%d admitted with gw-c down, over %d (the quota %d + gw-c's shares decided alone, %d)", withoutC, bound, quotaLimit, aloneSum)
	}
	// gw-c holds at most a lease and the half left of its previous one
	// (a new lease is taken when half of the last is used)
	if held := quotaLease * 3 / 2; withoutC < quotaLimit-int64(held)-4 {
		t.Fatalf("%d admitted with gw-c down: more than gw-c's leases (%d) and its 4 requests in flight short of the quota %d", withoutC, held, quotaLimit)
	}

	// meanwhile the fleet's usage lacks only what gw-c admitted since its
	// last write: at most the tokens it held then (its tokens stay taken,
	// so nobody admits them again); nothing but gw-c's restart can
	// recover them, they are on its disk alone (docs/caddyquota.md)
	// (and what it admitted on its shares alone)
	if n := admittedToday(gws[0].usage(t, "acme")); n < withoutC-quotaLease*3/2-aloneSum || n > withoutC+4 {
		t.Errorf("the fleet's usage with gw-c killed: %d, want %d answered less at most gw-c's tokens held (%d) and its shares alone (%d)", n, withoutC, quotaLease*3/2, aloneSum)
	} else {
		t.Logf("the fleet's usage with gw-c killed: %d of %d answered", n, withoutC)
	}

	// gw-c again, from its data, and no request of acme reaches it: it
	// writes what it admitted and gives back its lease at once; the
	// others admit the rest
	gws[2].start(t, bin, natsURL)
	restarted := time.Now()
	podmantest.Eventually(t, "the quota used up, gw-c's lease given back", 30*time.Second, func() string {
		if n := admittedToday(gws[0].usage(t, "acme")); n < quotaLimit {
			return fmt.Sprintf("the fleet's usage: %d admitted; %d answered", n, l.admitted.Load())
		}
		return ""
	})
	l.stop()
	answered := l.admitted.Load()
	// every gateway reports the fleet's usage: every request counted,
	// gw-c's before the kill included, within an ack window of its
	// restart (its first operation, at its start)
	var counted int64
	podmantest.Eventually(t, "the fleet's usage on every gateway", 10*time.Second, func() string {
		for _, g := range gws {
			u := g.usage(t, "acme")
			if u.Source != "fleet" {
				return g.name + ": source " + u.Source + " " + u.Note
			}
			counted = admittedToday(u)
			if counted < answered || counted > answered+4 {
				return fmt.Sprintf("%s: %d counted, %d answered 200", g.name, counted, answered)
			}
		}
		return ""
	})
	t.Logf("admitted %d (answered) / %d (counted) of %d; per gateway %d %d %d; %d refused, %d failed; the fleet counted the quota %s after gw-c's restart",
		answered, counted, quotaLimit, l.per[0].Load(), l.per[1].Load(), l.per[2].Load(), l.refused.Load(), l.failed.Load(), time.Since(restarted).Round(time.Millisecond))
	switch {
	case aloneN == 0 && counted != quotaLimit:
		t.Errorf("the fleet counted %d admitted, want the quota, %d", counted, quotaLimit)
	case aloneN > 0 && (counted < quotaLimit || counted > bound):
		t.Errorf("the fleet counted %d admitted, want the quota %d to the partial outage's bound %d (gw-c decided alone before its kill)", counted, quotaLimit, bound)
	}
}

// TestQuotaFleetNATSRestart: three gateway processes share one
// consumer's quota while the whole NATS cluster is shut down and started
// again mid-run. While it is away each gateway admits its share of what
// was left and then refuses (fail_closed); once it is back each writes
// what it admitted alone. Every admitted request is in the fleet's usage,
// and the fleet admits the quota, exceeding it by no more than the
// issue's goal: 0.1% of the quota plus the documented bound (what a
// gateway may not have seen of the others' leases: gateways - 1 leases
// of at most max_lease).
func TestQuotaFleetNATSRestart(t *testing.T) {
	busyloop.Start(t)
	c, gws, _ := startQuotaFleet(t)
	l := &quotaLoad{consumer: "acme"}
	l.run(gws, 4)
	defer l.stop()

	l.waitAdmitted(t, quotaLimit/6)
	t0, n0 := time.Now(), l.admitted.Load()
	l.waitAdmitted(t, quotaLimit/3)
	rate := float64(l.admitted.Load()-n0) / time.Since(t0).Seconds()
	// per gateway: admitted before NATS went away, while it was away,
	// after it was back (which gateway over-admits, and when)
	per := func() [3]int64 { return [3]int64{l.per[0].Load(), l.per[1].Load(), l.per[2].Load()} }
	beforeStop := per()
	c.ShutdownAll()
	atOutage := l.admitted.Load()
	podmantest.Eventually(t, "every gateway deciding alone", 30*time.Second, func() string {
		for _, g := range gws {
			if m := pathtest.Metrics(t, g.admin, "gateway_quota_fleet_available"); m["gateway_quota_fleet_available"] != 0 {
				return g.name + " still counts on the fleet"
			}
		}
		return ""
	})
	// alone: each gateway admits its share, then refuses (fail_closed);
	// wait until the clients see only refusals
	refusedAt := l.refused.Load()
	podmantest.Eventually(t, "every gateway's share used, then refusals", 30*time.Second, func() string {
		last := time.Unix(0, l.lastOK.Load())
		if time.Since(last) < 500*time.Millisecond || l.refused.Load()-refusedAt < 100 {
			return fmt.Sprintf("last 200 %s ago, %d refused since NATS went away", time.Since(last).Round(time.Millisecond), l.refused.Load()-refusedAt)
		}
		return ""
	})
	duringOutage := l.admitted.Load() - atOutage
	// what the operator sees meanwhile: the dashboard's quota panel says
	// the gateway decides alone, and the log says so with the mode
	for _, g := range gws {
		var o struct {
			Quota struct {
				Fleet *struct {
					Available     bool    `json:"available"`
					Since         string  `json:"since"`
					OnUnavailable string  `json:"on_unavailable"`
					Share         float64 `json:"share"`
				} `json:"fleet"`
			} `json:"quota"`
		}
		code, body, err := podmantest.Get(fmt.Sprintf("http://127.0.0.1:%d/gateway/overview", g.admin))
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &o) != nil || o.Quota.Fleet == nil {
			t.Fatalf("%s: dashboard overview %d %v %.300s", g.name, code, err, body)
		}
		if f := o.Quota.Fleet; f.Available || f.Since == "" || f.OnUnavailable != "fail_closed" || f.Share < 0.3 || f.Share > 0.34 {
			t.Errorf("%s: the dashboard's quota fleet %+v during the outage, want unavailable since a time, fail_closed, share 1/3", g.name, *f)
		}
		// the gateway sets the gauge, then logs: poll
		podmantest.Eventually(t, g.name+" logs the outage with its mode", 10*time.Second, func() string {
			b, _ := os.ReadFile(g.proc.log)
			if ev, err := os.ReadFile(filepath.Join(g.home, "quota-fleet.log")); err == nil {
				b = append(b, ev...) // FLEET_EVIDENCE_DIR: the fleet's log is there
			}
			if !strings.Contains(string(b), `quota fleet counts unreachable`) || !strings.Contains(string(b), `"on_unavailable":"fail_closed"`) {
				return "no log line of the outage with its mode"
			}
			return ""
		})
	}
	beforeRestart := per()
	c.RestartAll()
	for _, g := range gws {
		g.leasing(t)
	}
	l.waitExhausted(t, quotaQuiet, gws)
	l.stop()
	end := per()
	for i, g := range gws {
		t.Logf("%s admitted %d before NATS went away, %d while it was away, %d after it was back",
			g.name, beforeStop[i], beforeRestart[i]-beforeStop[i], end[i]-beforeRestart[i])
	}
	answered := l.admitted.Load()
	// the goal: 0.1% of the quota plus the documented lease
	// bound (what the others leased since a gateway last read the
	// counts: gateways - 1 leases of at most max_lease)
	bound := int64(quotaLimit/1000 + (len(gws)-1)*quotaLease)
	t.Logf("admitted %d of %d: %d before NATS went away (%.0f/s, %.0f in one sync interval), %d while it was away; bound %d",
		answered, quotaLimit, atOutage, rate, rate*quotaSync.Seconds(), duringOutage, bound)
	podmantest.Eventually(t, "every admitted request in the fleet's usage", 30*time.Second, func() string {
		for _, g := range gws {
			u := g.usage(t, "acme")
			if u.Source != "fleet" || admittedToday(u) != answered {
				return fmt.Sprintf("%s: %s %d counted, %d answered 200 %s", g.name, u.Source, admittedToday(u), answered, u.Note)
			}
		}
		return ""
	})
	if answered > quotaLimit+bound {
		t.Errorf("%d admitted, over the quota %d by more than the bound %d", answered, quotaLimit, bound)
	}
	if answered < quotaLimit-quotaLimit/1000 {
		t.Errorf("%d admitted, short of the quota %d", answered, quotaLimit)
	}
}

// TestQuotaFleetBurst: three gateway processes on a three-node cluster;
// bursts of 40, 200 and 2,000 requests against limits of 20, 100 and
// 1,000, sent by 8 concurrent clients spread over 2 and 3 of the
// gateways as fast as they answer, each against the Caddyfile's rate
// limit (a quota handler's own plan, per minute) and a plan's quota (per
// day). While NATS is up the fleet admits at most the limit + 1 per
// gateway (the goal; the leases make it the limit exactly).
// The first burst is the routes' first request: their counts open their
// store and fleet link then, and the gateways create its bucket together;
// a gateway admits from its first lease (it once refused all until its
// link had reached the counts: 6 and 9 of 40 admitted, 0 by gw-a).
func TestQuotaFleetBurst(t *testing.T) {
	busyloop.Start(t)
	_, gws, _ := startQuotaFleet(t)
	for _, kind := range []string{"rl", "q"} {
		for _, limit := range []int{20, 100, 1000} {
			for _, n := range []int{2, 3} {
				name := fmt.Sprintf("%s-%d-%d-gateways", kind, limit, n)
				t.Run(name, func(t *testing.T) {
					per := httpBurst(gws[:n], fmt.Sprintf("/%s/%d/x", kind, limit), name, 2*limit, 8)
					got := burst.Sum(per)
					t.Logf("%d of %d requests admitted (%v)", got, 2*limit, per)
					if goal := int64(limit + n); got > goal {
						t.Errorf("admitted %d (%v): over the limit %d + 1 per gateway", got, per, limit)
					}
					if got < int64(limit)/2 {
						t.Errorf("admitted %d of a burst of %d: far under the limit %d", got, 2*limit, limit)
					}
				})
			}
		}
	}
}

// httpBurst sends total requests of consumer to path, from clients
// goroutines spread over the gateways, each as soon as the last was
// answered; it returns the 200s per gateway.
func httpBurst(gws []*quotaGateway, path, consumer string, total, clients int) []int64 {
	return burst.Run(total, clients, len(gws), func(g int) bool {
		req, _ := http.NewRequest("GET", gws[g].url(path), nil)
		req.Header.Set("X-Consumer", consumer)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
