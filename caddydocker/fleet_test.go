package caddydocker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

// fleetConn returns a connection of its own for one "host" (natsconn
// shares connections with equal options; the name makes them distinct).
func fleetConn(t *testing.T, c *natstest.Cluster, name string) *natsconn.Conn {
	t.Helper()
	conn, release, err := natsconn.Get(natsconn.Options{Servers: c.URLs, Name: "fleet-test-" + name,
		ReconnectWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return conn
}

// observed returns a logger that records, and prints the records if the
// test fails.
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("log: %s %s %v", e.Level, e.Message, e.ContextMap())
			}
		}
	})
	return zap.New(core), logs
}

// startFleet starts a Fleet for node on its own connection; it is stopped
// when the test ends (before the connection is released).
func startFleet(t *testing.T, c *natstest.Cluster, node, advertise string, ttl time.Duration, log *zap.Logger) *Fleet {
	t.Helper()
	conn := fleetConn(t, c, node)
	if log == nil {
		log, _ = observed(t)
	}
	f, err := NewFleet(FleetConfig{Node: node, Advertise: advertise, TTL: ttl}, conn, log.Named(node))
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	t.Cleanup(f.Stop)
	return f
}

// startFleetCfg is startFleet with a whole configuration.
func startFleetCfg(t *testing.T, c *natstest.Cluster, cfg FleetConfig, log *zap.Logger) *Fleet {
	t.Helper()
	conn := fleetConn(t, c, cfg.Node+fmt.Sprint(time.Now().UnixNano()))
	if log == nil {
		log, _ = observed(t)
	}
	f, err := NewFleet(cfg, conn, log.Named(cfg.Node))
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	t.Cleanup(f.Stop)
	return f
}

// testKV is the test's own handle on the fleet bucket (for putting values
// by hand and checking keys), once some Fleet created it.
func testKV(t *testing.T, c *natstest.Cluster) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	waitFor(t, "the fleet bucket", 30*time.Second, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err = js.KeyValue(ctx, DefaultFleetBucket)
		return err
	})
	return kv
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctr(name string, public int) Container {
	return Container{ID: "id-" + name, Name: name, Ports: []Port{{Private: 8080, Public: public}},
		Labels: map[string]string{"gateway.enable": "true", "gateway.port": "8080"}}
}

// names lists Remote as node/name, in Remote's order.
func names(cs []Container) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Node+"/"+c.Name)
	}
	return strings.Join(s, " ")
}

// remoteIs waits until f's Remote lists exactly want (node/name ...).
func remoteIs(t *testing.T, f *Fleet, want string, timeout time.Duration) {
	t.Helper()
	waitFor(t, "Remote = "+want, timeout, func() error {
		if got := names(f.Remote()); got != want {
			return fmt.Errorf("Remote = %q", got)
		}
		return nil
	})
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func nodeStatus(f *Fleet, node string) (FleetNodeStatus, bool) {
	for _, n := range f.Status().Nodes {
		if n.Node == node {
			return n, true
		}
	}
	return FleetNodeStatus{}, false
}

// TestFleetSharesContainers: what a publishes, b follows, with Node and
// Advertise set to a's and sorted; b's own containers are never in b's
// Remote.
func TestFleetSharesContainers(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	a := startFleet(t, c, "a", "10.0.0.1", 2*time.Second, nil)
	b := startFleet(t, c, "b", "10.0.0.2", 2*time.Second, nil)
	a.Publish([]Container{ctr("web", 30001), ctr("api", 30002)})
	b.Publish([]Container{ctr("own", 30003)})

	remoteIs(t, b, "a/api a/web", 30*time.Second)
	remoteIs(t, a, "b/own", 30*time.Second)
	// a hands Publish the union by mistake: b's container is not
	// announced as a's.
	a.Publish(append([]Container{ctr("web", 30001), ctr("api", 30002)}, a.Remote()...))
	got := b.Remote()
	for _, rc := range got {
		if rc.Node != "a" || rc.Advertise != "10.0.0.1" {
			t.Errorf("%s: node %q advertise %q, want a and 10.0.0.1", rc.Name, rc.Node, rc.Advertise)
		}
	}
	if want := ctr("api", 30002); !reflect.DeepEqual(got[0].Ports, want.Ports) || !reflect.DeepEqual(got[0].Labels, want.Labels) {
		t.Errorf("api arrived as %+v", got[0])
	}
	// Heartbeats go on; b's own entry (echoed by the watch) never shows.
	time.Sleep(time.Second)
	if got := names(b.Remote()); got != "a/api a/web" {
		t.Errorf("b's Remote after heartbeats: %q", got)
	}

	st := b.Status()
	if st.Node != "b" || st.Bucket != DefaultFleetBucket || !st.Connected || !st.Watching || st.LastError != "" ||
		st.LastPublish.IsZero() || st.Replicas != 3 {
		t.Errorf("b's status: %+v", st)
	}
	if len(st.Nodes) != 1 || st.Nodes[0].Node != "a" || st.Nodes[0].Advertise != "10.0.0.1" ||
		st.Nodes[0].Containers != 2 || st.Nodes[0].Expired || st.Nodes[0].LastSeen.IsZero() {
		t.Errorf("b's status of a: %+v", st.Nodes)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Error(err)
	}
}

// TestFleetChangeSignalsChanged: a changes its containers; b's Remote
// follows and Changed fires.
func TestFleetChangeSignalsChanged(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	a := startFleet(t, c, "a", "10.0.0.1", 2*time.Second, nil)
	b := startFleet(t, c, "b", "10.0.0.2", 2*time.Second, nil)
	a.Publish([]Container{ctr("web", 30001)})
	remoteIs(t, b, "a/web", 30*time.Second)

	drain(b.Changed())
	a.Publish([]Container{ctr("web", 30001), ctr("new", 30004)})
	select {
	case <-b.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not fire after a's change")
	}
	remoteIs(t, b, "a/new a/web", 5*time.Second)

	// Removing a container is a change too.
	drain(b.Changed())
	a.Publish([]Container{ctr("new", 30004)})
	select {
	case <-b.Changed():
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not fire after a's removal")
	}
	remoteIs(t, b, "a/new", 5*time.Second)
}

// TestFleetExpiresKilledNode: a gateway killed without deleting its key
// stops heart-beating; b drops it within TTL and a margin, while the key
// is still in the bucket.
func TestFleetExpiresKilledNode(t *testing.T) {
	const ttl = 2 * time.Second
	c := natstest.StartCluster(t, 3)
	a := startFleet(t, c, "a", "10.0.0.1", ttl, nil)
	b := startFleet(t, c, "b", "10.0.0.2", ttl, nil)
	a.Publish([]Container{ctr("web", 30001)})
	b.Publish(nil)
	remoteIs(t, b, "a/web", 30*time.Second)
	// Heart-beating keeps a past its TTL.
	time.Sleep(2 * ttl)
	if got := names(b.Remote()); got != "a/web" {
		t.Fatalf("a dropped while heart-beating: Remote = %q", got)
	}

	drain(b.Changed())
	a.halt() // killed: no delete
	killed := time.Now()
	remoteIs(t, b, "", ttl+3*time.Second)
	t.Logf("a dropped %v after its kill (ttl %v)", time.Since(killed).Round(time.Millisecond), ttl)
	select {
	case <-b.Changed():
	default:
		t.Error("Changed did not fire for the expiry")
	}
	if ns, ok := nodeStatus(b, "a"); !ok || !ns.Expired || ns.Containers != 0 {
		t.Errorf("b's status of a: %+v (listed %v)", ns, ok)
	}
	// The drop came from the expiry: the key is still there.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := testKV(t, c).Get(ctx, "a"); err != nil {
		t.Errorf("a's key: %v (the test wants it kept, as a killed gateway leaves it)", err)
	}
}

// TestFleetStopKeepsContainers: a graceful Stop leaves the node's entry
// marked restarting, and b keeps a's containers (they keep running while
// a's gateway restarts) past the TTL, until the restart grace ends.
func TestFleetStopKeepsContainers(t *testing.T) {
	const ttl, grace = time.Second, 4 * time.Second
	c := natstest.StartCluster(t, 1)
	a := startFleetCfg(t, c, FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: ttl, RestartGrace: grace}, nil)
	b := startFleet(t, c, "b", "10.0.0.2", ttl, nil)
	a.Publish([]Container{ctr("web", 30001)})
	b.Publish(nil)
	remoteIs(t, b, "a/web", 30*time.Second)
	waitFor(t, "a's first put", 10*time.Second, func() error {
		if a.Status().LastPublish.IsZero() {
			return errors.New("not yet")
		}
		return nil
	})

	stopped := time.Now()
	a.Stop()
	a.Stop() // idempotent
	waitFor(t, "b sees a restarting", 5*time.Second, func() error {
		if ns, ok := nodeStatus(b, "a"); !ok || !ns.Restarting {
			return fmt.Errorf("b's status of a: %+v", ns)
		}
		return nil
	})
	// Well past the TTL, a's containers are still routed.
	for time.Since(stopped) < 2*ttl+time.Second {
		if got := names(b.Remote()); got != "a/web" {
			t.Fatalf("%v after a's graceful stop, b's Remote = %q: a's containers were withdrawn", time.Since(stopped).Round(time.Millisecond), got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// They go when the grace ends.
	remoteIs(t, b, "", grace+3*time.Second)
	gone := time.Since(stopped)
	t.Logf("a's containers left b %v after its graceful stop (ttl %v, restart grace %v)", gone.Round(time.Millisecond), ttl, grace)
	if gone < grace {
		t.Errorf("a's containers left %v after the stop, before the grace of %v", gone, grace)
	}
	if ns, _ := nodeStatus(b, "a"); !ns.Expired {
		t.Errorf("b's status of a after the grace: %+v", ns)
	}
}

// TestFleetStopWithoutGrace: with no restart grace (restart_grace 0), a
// graceful Stop deletes the key, and b drops a at once.
func TestFleetStopWithoutGrace(t *testing.T) {
	const ttl = time.Minute
	c := natstest.StartCluster(t, 1)
	a := startFleetCfg(t, c, FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: ttl, RestartGrace: -1}, nil)
	b := startFleet(t, c, "b", "10.0.0.2", ttl, nil)
	a.Publish([]Container{ctr("web", 30001)})
	remoteIs(t, b, "a/web", 30*time.Second)
	waitFor(t, "a's first put", 10*time.Second, func() error {
		if a.Status().LastPublish.IsZero() {
			return errors.New("not yet")
		}
		return nil
	})

	drain(b.Changed())
	stopped := time.Now()
	a.Stop()
	remoteIs(t, b, "", 5*time.Second)
	t.Logf("a dropped %v after its Stop", time.Since(stopped).Round(time.Millisecond))
	select {
	case <-b.Changed():
	default:
		t.Error("Changed did not fire")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := testKV(t, c).Get(ctx, "a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a's key after Stop: %v, want deleted", err)
	}
}

// TestFleetRestartTakesOver: node a's gateway stops gracefully and a new
// run of it starts: b keeps a's containers throughout, the new run takes
// the key over with no namesake reported, and an old run's restarting
// mark never overwrites a newer run's entry.
func TestFleetRestartTakesOver(t *testing.T) {
	const ttl = time.Second
	c := natstest.StartCluster(t, 1)
	old := startFleetCfg(t, c, FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: ttl}, nil)
	logB, logsB := observed(t)
	b := startFleet(t, c, "b", "10.0.0.2", ttl, logB)
	old.Publish([]Container{ctr("web", 30001)})
	b.Publish(nil)
	remoteIs(t, b, "a/web", 30*time.Second)
	putDone := func(f *Fleet) {
		t.Helper()
		waitFor(t, "a first put", 10*time.Second, func() error {
			if f.Status().LastPublish.IsZero() {
				return errors.New("not yet")
			}
			return nil
		})
	}
	putDone(old)

	// b keeps a's containers from the stop to the new run's first put
	// and after.
	var dropped atomic.Bool
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if !strings.Contains(names(b.Remote()), "a/web") {
				dropped.Store(true)
			}
		}
	}()
	old.Stop()
	log2, logs2 := observed(t)
	neu := startFleetCfg(t, c, FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: ttl}, log2)
	neu.Publish([]Container{ctr("web", 30001), ctr("api", 30002)})
	remoteIs(t, b, "a/api a/web", 10*time.Second)
	<-watching
	if dropped.Load() {
		t.Error("b dropped a's containers during a's restart")
	}
	if ns, _ := nodeStatus(b, "a"); ns.Restarting || ns.Expired {
		t.Errorf("b's status of a after the new run's put: %+v", ns)
	}
	if n := logs2.FilterMessage(NamesakeMessage).Len(); n != 0 {
		t.Errorf("the new run reports its old run as a namesake (%d)", n)
	}

	// An old run whose stop comes after the new run's put (the new
	// process started before the old one was told to stop) leaves the
	// new run's entry alone.
	marks := logsB.FilterMessage("fleet: node's gateway is restarting; keeping its containers").Len()
	late := startFleetCfg(t, c, FleetConfig{Node: "x", Advertise: "10.0.0.3", TTL: ttl}, nil)
	late.Publish([]Container{ctr("x1", 30003)})
	putDone(late)
	late.halt() // stopped heart-beating; its mark comes later
	next := startFleetCfg(t, c, FleetConfig{Node: "x", Advertise: "10.0.0.3", TTL: ttl}, nil)
	next.Publish([]Container{ctr("x2", 30004)})
	remoteIs(t, b, "a/api a/web x/x2", 10*time.Second)
	late.leave()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := testKV(t, c).Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	var ent fleetEntry
	if err := json.Unmarshal(e.Value(), &ent); err != nil {
		t.Fatal(err)
	}
	if ent.Instance != next.instance || ent.State != "" {
		t.Errorf("x's entry is %s's (state %q) after the old run's stop, want the new run's %s", ent.Instance, ent.State, next.instance)
	}
	if n := logsB.FilterMessage("fleet: node's gateway is restarting; keeping its containers").Len(); n != marks {
		t.Errorf("b received the old run's restarting mark over the new run's entry")
	}
}

// TestFleetSeed: a restarted gateway routes the other nodes' containers
// of its state file at once; the bucket's values replace them, and a node
// the bucket no longer has is dropped once the watch delivered them all.
func TestFleetSeed(t *testing.T) {
	const ttl = 10 * time.Second // longer than the test: no expiry by ttl
	c := natstest.StartCluster(t, 1)
	a := startFleet(t, c, "a", "10.0.0.1", ttl, nil)
	a.Publish([]Container{ctr("web", 30001)})
	waitFor(t, "a's first put", 10*time.Second, func() error {
		if a.Status().LastPublish.IsZero() {
			return errors.New("not yet")
		}
		return nil
	})

	conn := fleetConn(t, c, "b")
	log, _ := observed(t)
	b, err := NewFleet(FleetConfig{Node: "b", Advertise: "10.0.0.2", TTL: ttl}, conn, log)
	if err != nil {
		t.Fatal(err)
	}
	seeded := func(node, name string) Container {
		x := ctr(name, 30009)
		x.Node, x.Advertise = node, "10.0.0.9"
		return x
	}
	// The state file: a's old containers, and a node that is gone.
	b.Seed([]Container{seeded("a", "old-web"), seeded("gone", "db"), seeded("b", "mine")})
	if got := names(b.Remote()); got != "a/old-web gone/db" {
		t.Fatalf("Remote after Seed = %q", got)
	}
	b.Start()
	defer b.Stop()
	remoteIs(t, b, "a/web", 5*time.Second)
}

// TestFleetKeepsRoutesWhileNATSDown: with every NATS server down, b keeps
// the other nodes' containers well past the TTL. After the servers restart
// on their stores, b's watch resumes and sees what a publishes then; c,
// killed during the outage, gets a fresh TTL from b's new watch (it may be
// re-putting too) and is dropped only when that runs out.
func TestFleetKeepsRoutesWhileNATSDown(t *testing.T) {
	const ttl = 2 * time.Second
	cl := natstest.StartCluster(t, 3)
	a := startFleet(t, cl, "a", "10.0.0.1", ttl, nil)
	b := startFleet(t, cl, "b", "10.0.0.2", ttl, nil)
	c := startFleet(t, cl, "c", "10.0.0.3", ttl, nil)
	a.Publish([]Container{ctr("web", 30001)})
	b.Publish(nil)
	c.Publish([]Container{ctr("db", 30006)})
	remoteIs(t, b, "a/web c/db", 30*time.Second)

	// Watch b's Remote from now on: a must never be missing.
	var missing atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if got := names(b.Remote()); !strings.HasPrefix(got, "a/") && missing.Load() == nil {
				missing.Store(fmt.Sprintf("at %s: Remote = %q", time.Now().Format("15:04:05.000"), got))
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	cl.ShutdownAll()
	down := time.Now()
	haltAt := time.Now()
	c.halt() // killed while NATS is down: it never heart-beats again
	t.Logf("halt took %v", time.Since(haltAt))
	time.Sleep(4 * ttl)
	if m := missing.Load(); m != nil {
		t.Fatalf("a dropped while NATS was down: %v", m)
	}
	if got := names(b.Remote()); got != "a/web c/db" {
		t.Errorf("b's Remote while NATS is down: %q", got)
	}
	if ns, ok := nodeStatus(b, "a"); !ok || ns.Expired || ns.Containers != 1 {
		t.Errorf("b's status of a while NATS is down: %+v", ns)
	}
	if st := b.Status(); st.Connected || st.Watching {
		t.Errorf("b's status while every server is down: %+v", st)
	}

	cl.RestartAll()
	restarted := time.Now()
	t.Logf("NATS down for %v", restarted.Sub(down).Round(time.Millisecond))
	var since time.Time
	waitFor(t, "b watching again", 60*time.Second, func() error {
		st := b.Status()
		if !st.Watching || !st.WatchSince.After(restarted) {
			return fmt.Errorf("status %+v", st)
		}
		since = st.WatchSince
		return nil
	})
	// c is silent since long before, but its TTL starts again with the
	// new watch: still there for a while ...
	for time.Since(since) < ttl/2 {
		if got := names(b.Remote()); !strings.Contains(got, "c/db") {
			t.Fatalf("c dropped %v after b's watch resumed (ttl %v): Remote = %q",
				time.Since(since).Round(time.Millisecond), ttl, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ... and gone when it runs out.
	waitFor(t, "c dropped", ttl+5*time.Second, func() error {
		if got := names(b.Remote()); strings.Contains(got, "c/") {
			return fmt.Errorf("Remote = %q", got)
		}
		return nil
	})
	t.Logf("c dropped %v after b's watch resumed", time.Since(since).Round(time.Millisecond))

	a.Publish([]Container{ctr("web", 30001), ctr("after", 30005)})
	remoteIs(t, b, "a/after a/web", 30*time.Second)
	if m := missing.Load(); m != nil {
		t.Fatalf("a dropped around the outage: %v", m)
	}
}

// TestFleetRepublishesOnReconnect: when a's NATS server goes away, a
// reconnects to another and puts its entry again at once, not at its next
// heartbeat (TTL/3 = 20s here).
func TestFleetRepublishesOnReconnect(t *testing.T) {
	const ttl = time.Minute
	cl := natstest.StartCluster(t, 3)
	conn := fleetConn(t, cl, "a")
	log, _ := observed(t)
	a, err := NewFleet(FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: ttl}, conn, log)
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	t.Cleanup(a.Stop)
	a.Publish([]Container{ctr("web", 30001)})
	kv := testKV(t, cl)
	var rev uint64
	waitFor(t, "a's entry", 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e, err := kv.Get(ctx, "a")
		if err == nil {
			rev = e.Revision()
		}
		return err
	})
	name := conn.NATS().ConnectedServerName()
	for i, s := range cl.Servers() {
		if s.Name() == name {
			cl.Shutdown(i)
		}
	}
	down := time.Now()
	waitFor(t, "a's entry put again", 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e, err := kv.Get(ctx, "a")
		if err != nil {
			return err
		}
		if e.Revision() == rev {
			return fmt.Errorf("still revision %d", rev)
		}
		return nil
	})
	t.Logf("a's server %s shut down; a's entry put again %v later", name, time.Since(down).Round(time.Millisecond))
}

// TestFleetSkipsMalformedEntries: values b cannot read are skipped and
// logged once per node and error; a node's previous good entry stays
// until its own TTL runs out.
func TestFleetSkipsMalformedEntries(t *testing.T) {
	const ttl = 2 * time.Second
	c := natstest.StartCluster(t, 3)
	log, logs := observed(t)
	a := startFleet(t, c, "a", "10.0.0.1", ttl, nil)
	b := startFleet(t, c, "b", "10.0.0.2", ttl, log)
	a.Publish([]Container{ctr("web", 30001)})
	b.Publish(nil)
	remoteIs(t, b, "a/web", 30*time.Second)
	kv := testKV(t, c)
	put := func(key, value string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := kv.PutString(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	good := func(node string) string {
		b, _ := json.Marshal(map[string]any{"v": 1, "node": node, "advertise": "10.0.0.9",
			"updated": time.Now(), "containers": []Container{ctr("svc", 30009)}})
		return string(b)
	}
	bad := map[string]string{
		"junk":    `{not json`,
		"future":  `{"v":2,"node":"future","advertise":"10.0.0.7","containers":[]}`,
		"liar":    `{"v":1,"node":"someone-else","advertise":"10.0.0.7","containers":[]}`,
		"badlist": `{"v":1,"node":"badlist","advertise":"10.0.0.7","containers":"web"}`,
		"noaddr":  `{"v":1,"node":"noaddr","containers":[]}`,
		"array":   `[1,2,3]`,
	}
	for i := 0; i < 3; i++ { // the same bad values again: no new log lines
		for k, v := range bad {
			put(k, v)
		}
	}
	put("c", good("c"))
	remoteIs(t, b, "a/web c/svc", 10*time.Second)
	for k := range bad {
		ns, ok := nodeStatus(b, k)
		if !ok || ns.Error == "" || ns.Containers != 0 {
			t.Errorf("status of %s: %+v (listed %v)", k, ns, ok)
		}
		if n := logs.FilterMessage("fleet: skipping another node's entry").FilterField(zap.String("other", k)).Len(); n != 1 {
			t.Errorf("%d log lines for %s's bad values, want 1", n, k)
		}
	}

	// c turns bad: its previous good entry stays (no flap) ...
	put("c", `{"v":1,"node":"c","advertise":"10.0.0.9","containers":{}}`)
	waitFor(t, "c's error in the status", 10*time.Second, func() error {
		if ns, _ := nodeStatus(b, "c"); ns.Error == "" {
			return errors.New("no error yet")
		}
		return nil
	})
	if got := names(b.Remote()); got != "a/web c/svc" {
		t.Fatalf("after c's bad value: Remote = %q, want c's previous entry kept", got)
	}
	// ... but bad values do not refresh it: it expires TTL after the
	// last good one although c keeps writing.
	lastGood := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = kv.PutString(ctx, "c", fmt.Sprintf(`{"v":9,"n":%d}`, i))
			cancel()
		}
	}()
	defer func() { close(stop); <-done }()
	remoteIs(t, b, "a/web", ttl+3*time.Second)
	t.Logf("c dropped %v after its last good value (ttl %v)", time.Since(lastGood).Round(time.Millisecond), ttl)
	if n := logs.FilterMessage("fleet: skipping another node's entry").FilterField(zap.String("other", "c")).Len(); n != 2 {
		t.Errorf("%d log lines for c's two distinct errors, want 2", n)
	}
	// b still works: a's change arrives.
	a.Publish([]Container{ctr("web2", 30002)})
	remoteIs(t, b, "a/web2", 10*time.Second)
}

// TestFleetBucket: the bucket is created with 3 replicas on a cluster of
// 3, with 1 on a single server, with 1 when a cluster cannot place 3; an
// existing bucket with other settings is used as it is.
func TestFleetBucket(t *testing.T) {
	info := func(t *testing.T, c *natstest.Cluster) jetstream.KeyValueConfig {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := testKV(t, c).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*jetstream.KeyValueBucketStatus).Config()
	}
	published := func(t *testing.T, f *Fleet) {
		t.Helper()
		f.Publish([]Container{ctr("web", 30001)})
		waitFor(t, "a published entry", 30*time.Second, func() error {
			if st := f.Status(); st.LastPublish.IsZero() {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
	}
	const ttl = 2 * time.Second
	for _, tc := range []struct {
		name     string
		servers  int
		replicas int
		log      string
	}{
		{"three servers", 3, 3, ""},
		{"single server", 1, 1, ""},
		{"two servers", 2, 1, "fleet: too few NATS servers for a bucket with 3 replicas; creating it with 1. Once 3 servers run, raise it with: nats stream edit KV_gateway_routes --replicas 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natstest.StartCluster(t, tc.servers)
			log, logs := observed(t)
			f := startFleet(t, c, "a", "10.0.0.1", ttl, log)
			published(t, f)
			cfg := info(t, c)
			if cfg.Replicas != tc.replicas || cfg.History != 1 || cfg.TTL != 4*ttl {
				t.Errorf("bucket replicas %d history %d max age %v; want %d, 1, %v", cfg.Replicas, cfg.History, cfg.TTL, tc.replicas, 4*ttl)
			}
			if st := f.Status(); st.Replicas != tc.replicas {
				t.Errorf("status replicas %d", st.Replicas)
			}
			if tc.log != "" && logs.FilterMessage(tc.log).Len() != 1 {
				t.Errorf("no log %q", tc.log)
			}
		})
	}
	t.Run("existing bucket", func(t *testing.T) {
		c := natstest.StartCluster(t, 3)
		nc, err := nats.Connect(c.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		waitFor(t, "creating the bucket by hand", 30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultFleetBucket, History: 5})
			return err
		})
		a := startFleet(t, c, "a", "10.0.0.1", ttl, nil)
		b := startFleet(t, c, "b", "10.0.0.2", ttl, nil)
		published(t, a)
		remoteIs(t, b, "a/web", 30*time.Second)
		if cfg := info(t, c); cfg.History != 5 || cfg.TTL != 0 || cfg.Replicas != 1 {
			t.Errorf("the existing bucket changed: %+v", cfg)
		}
		if st := a.Status(); st.Replicas != 1 || st.LastError != "" {
			t.Errorf("status %+v", st)
		}
	})
}

// TestFleetConfig: defaults, and errors that name the field and the value.
func TestFleetConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  FleetConfig
		want string // error substring; "" = valid
	}{
		{"defaults", FleetConfig{Node: "h1", Advertise: "10.0.0.1"}, ""},
		{"host name advertise", FleetConfig{Node: "h1.example.com", Advertise: "h1.example.com"}, ""},
		{"ipv6 advertise", FleetConfig{Node: "h1", Advertise: "fd00::1"}, ""},
		{"key characters", FleetConfig{Node: "a-b_c=d/e.f", Advertise: "h"}, ""},
		{"no advertise", FleetConfig{Node: "h1"}, "fleet advertise is required"},
		{"advertise port", FleetConfig{Node: "h1", Advertise: "10.0.0.1:80"}, `invalid fleet advertise "10.0.0.1:80": a host name or IP without a port`},
		{"advertise url", FleetConfig{Node: "h1", Advertise: "http://h1"}, "not a URL"},
		{"advertise brackets", FleetConfig{Node: "h1", Advertise: "[fd00::1]"}, "without brackets"},
		{"advertise unspecified", FleetConfig{Node: "h1", Advertise: "0.0.0.0"}, "not reachable"},
		{"advertise space", FleetConfig{Node: "h1", Advertise: "my host"}, `' ' is not allowed`},
		{"node space", FleetConfig{Node: "my host", Advertise: "h"}, `invalid fleet node "my host": ' ' at offset 2`},
		{"node wildcard", FleetConfig{Node: "h*", Advertise: "h"}, `invalid fleet node "h*": '*'`},
		{"node dot", FleetConfig{Node: ".h", Advertise: "h"}, "cannot start or end with a dot"},
		{"node dots", FleetConfig{Node: "a..b", Advertise: "h"}, "two dots"},
		{"bucket", FleetConfig{Node: "h", Advertise: "h", Bucket: "a.b"}, `invalid fleet bucket "a.b"`},
		{"ttl short", FleetConfig{Node: "h", Advertise: "h", TTL: 500 * time.Millisecond}, `invalid fleet ttl "500ms": must be at least 1s`},
		{"ttl negative", FleetConfig{Node: "h", Advertise: "h", TTL: -time.Second}, `invalid fleet ttl "-1s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.withDefaults()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Bucket != DefaultFleetBucket || got.TTL != DefaultFleetTTL {
					t.Errorf("defaults: %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("host name default", func(t *testing.T) {
		got, err := FleetConfig{Advertise: "h"}.withDefaults()
		if err != nil {
			t.Skipf("this host's name is not a usable node: %v", err)
		}
		if got.Node == "" {
			t.Error("no default node")
		}
	})
	if _, err := NewFleet(FleetConfig{Node: "h", Advertise: "h"}, nil, nil); err == nil {
		t.Error("NewFleet accepted no connection")
	}
}

// TestFleetNeverBlocksOnNATS: with no NATS server, NewFleet, Start,
// Publish, Remote, Status and Stop return at once (config load must never
// wait on NATS), and Stop leaves no goroutine behind.
func TestFleetNeverBlocksOnNATS(t *testing.T) {
	port := freeport.Ports(t, 1)[0] // nobody listens
	conn, release, err := natsconn.Get(natsconn.Options{Servers: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)},
		Name: "fleet-test-nonats"})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	log, _ := observed(t)
	within := func(what string, d time.Duration, fn func()) {
		t.Helper()
		done := make(chan struct{})
		began := time.Now()
		go func() { defer close(done); fn() }()
		select {
		case <-done:
			t.Logf("%s: %v", what, time.Since(began).Round(time.Microsecond))
		case <-time.After(d):
			t.Fatalf("%s did not return within %v", what, d)
		}
	}
	var f *Fleet
	within("NewFleet, Start, Publish, Remote, Status", time.Second, func() {
		f, err = NewFleet(FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: time.Second}, conn, log)
		if err != nil {
			return
		}
		f.Start()
		for i := 0; i < 100; i++ {
			f.Publish([]Container{ctr(fmt.Sprint("c", i), 30000+i)})
		}
		_ = f.Remote()
		_ = f.Status()
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.Status().Connected {
		t.Error("connected to nothing")
	}
	waitFor(t, "the bind error in the status", 5*time.Second, func() error {
		if st := f.Status(); !strings.Contains(st.LastError, "binding bucket gateway_routes") {
			return fmt.Errorf("status error %q", st.LastError)
		}
		return nil
	})
	within("Stop", 2*time.Second, f.Stop)
	if g := fleetGoroutines(); len(g) != 0 {
		t.Errorf("Fleet goroutines after Stop:\n%s", strings.Join(g, "\n\n"))
	}
}

// fleetGoroutines lists the goroutines running Fleet code.
func fleetGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "caddydocker.(*Fleet)") {
			out = append(out, g)
		}
	}
	return out
}

// TestFleetStopLeavesNothingRunning: after Stop no Fleet goroutine runs
// and the watch's subscription is gone.
func TestFleetStopLeavesNothingRunning(t *testing.T) {
	c := natstest.StartCluster(t, 1)
	conn := fleetConn(t, c, "a")
	f, err := NewFleet(FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: time.Second}, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	f.Publish([]Container{ctr("web", 30001)})
	waitFor(t, "watching", 20*time.Second, func() error {
		if st := f.Status(); !st.Watching || st.LastPublish.IsZero() {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if len(fleetGoroutines()) == 0 {
		t.Fatal("no Fleet goroutine found while running: the check below would prove nothing")
	}
	// The connection's subscriptions: the watch's, and the request
	// inbox that stays with the connection.
	running := conn.NATS().NumSubscriptions()
	consumers := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js, _ := conn.JetStream()
		s, err := js.Stream(ctx, "KV_"+DefaultFleetBucket)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	if n := consumers(); n != 1 {
		t.Fatalf("%d consumers while watching, want 1", n)
	}
	f.Stop()
	if g := fleetGoroutines(); len(g) != 0 {
		t.Errorf("Fleet goroutines after Stop:\n%s", strings.Join(g, "\n\n"))
	}
	if n := conn.NATS().NumSubscriptions(); n != running-1 {
		t.Errorf("%d subscriptions after Stop, %d while watching", n, running)
	}
	waitFor(t, "the watch's consumer deleted", 10*time.Second, func() error {
		if n := consumers(); n != 0 {
			return fmt.Errorf("%d consumers", n)
		}
		return nil
	})
	if st := f.Status(); st.Watching {
		t.Error("watching after Stop")
	}
	f.Start() // after Stop: starts nothing
	if g := fleetGoroutines(); len(g) != 0 {
		t.Error("Start after Stop started goroutines")
	}
}

// TestFleetGuardRecovers: a panicking goroutine is logged and restarted,
// not allowed to kill the process.
func TestFleetGuardRecovers(t *testing.T) {
	c := natstest.StartCluster(t, 1)
	log, logs := observed(t)
	f, err := NewFleet(FleetConfig{Node: "a", Advertise: "10.0.0.1"}, fleetConn(t, c, "a"), log)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	f.wg.Add(1)
	go f.guard("test", func() {
		if runs.Add(1) == 1 {
			panic("boom")
		}
	})
	f.wg.Wait()
	if runs.Load() != 2 || logs.FilterMessage("fleet: goroutine panic").Len() != 1 {
		t.Errorf("runs %d, panic logs %d", runs.Load(), logs.FilterMessage("fleet: goroutine panic").Len())
	}
}

// TestFleetNamesake: a second gateway under the same node name is
// reported, by both, in an error naming the node and the `node` option and
// in Status (for the dashboard) while it keeps writing; a restart of the
// same node (its old entry still there) is not.
func TestFleetNamesake(t *testing.T) {
	c := natstest.StartCluster(t, 1)
	const msg = NamesakeMessage
	if !strings.Contains(msg, "`node`") {
		t.Fatalf("the message does not name the node option: %s", msg)
	}
	log1, logs1 := observed(t)
	first := startFleet(t, c, "a", "10.0.0.1", time.Second, log1)
	first.Publish([]Container{ctr("web", 30001)})
	waitFor(t, "first published", 20*time.Second, func() error {
		if first.Status().LastPublish.IsZero() {
			return errors.New("not yet")
		}
		return nil
	})
	first.halt() // a crash: its entry stays

	log2, logs2 := observed(t)
	conn := fleetConn(t, c, "a2")
	second, err := NewFleet(FleetConfig{Node: "a", Advertise: "10.0.0.1", TTL: time.Second}, conn, log2)
	if err != nil {
		t.Fatal(err)
	}
	second.Start()
	defer second.Stop()
	// The watch delivers the previous run's entry before this run puts.
	waitFor(t, "second watching", 20*time.Second, func() error {
		if !second.Status().Watching {
			return errors.New("not yet")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	second.Publish([]Container{ctr("web", 30001)})
	time.Sleep(time.Second)
	if n := logs2.FilterMessage(msg).Len(); n != 0 {
		t.Errorf("the restarted node reports its previous run as a namesake (%d)", n)
	}
	if ns := second.Status().Namesakes; len(ns) != 0 {
		t.Errorf("the restarted node shows its previous run as a namesake: %+v", ns)
	}

	log3, logs3 := observed(t)
	third := startFleet(t, c, "a", "10.0.0.3", time.Second, log3)
	third.Publish([]Container{ctr("other", 30002)})
	// Each sees the other's heartbeats: both report.
	for _, g := range []struct {
		name, otherAdvertise string
		f                    *Fleet
		logs                 *observer.ObservedLogs
	}{{"second", "10.0.0.3", second, logs2}, {"third", "10.0.0.1", third, logs3}} {
		waitFor(t, "the namesake reported by the "+g.name, 10*time.Second, func() error {
			es := g.logs.FilterMessage(msg).All()
			if len(es) == 0 {
				return errors.New("no error logged")
			}
			f := es[0].ContextMap()
			if es[0].Level != zap.ErrorLevel || f["node"] != "a" || f["other_advertise"] != g.otherAdvertise {
				return fmt.Errorf("logged %s %v, want error with node a, other_advertise %s", es[0].Level, f, g.otherAdvertise)
			}
			ns := g.f.Status().Namesakes
			if len(ns) != 1 || ns[0].Advertise != g.otherAdvertise || ns[0].Instance == "" {
				return fmt.Errorf("status namesakes %+v", ns)
			}
			return nil
		})
	}
	// Logged when it appears, not at each of its heartbeats (every ttl/3).
	time.Sleep(time.Second)
	for name, logs := range map[string]*observer.ObservedLogs{"second": logs2, "third": logs3} {
		if n := logs.FilterMessage(msg).Len(); n > 2 {
			t.Errorf("%s logged the namesake %d times in about 4 of its heartbeats", name, n)
		}
	}
	// The namesake goes away (renamed, say): it leaves the status after ttl.
	third.halt()
	waitFor(t, "the namesake gone from the status", 5*time.Second, func() error {
		if ns := second.Status().Namesakes; len(ns) != 0 {
			return fmt.Errorf("still %+v", ns)
		}
		return nil
	})
	_ = logs1
}
