package fleettest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// balancer is what a layer-4 load balancer in front of the gateways does
// for the test's load: round robin over the gateways its health check
// passes, and a request whose connection fails (refused, reset before an
// answer: a gateway stopping or stopped) is sent to the next gateway
// (HAProxy's `retry-on conn-failure empty-response` with `option
// redispatch`). Its health check of a gateway is a request to a service
// of that gateway's own host: a gateway that restarted takes traffic once
// it routes.
type balancer struct {
	hosts  []*fleetHost
	health []string // per host, the path of its health check
	up     []atomic.Bool
	next   atomic.Uint64
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newBalancer(hosts []*fleetHost, health []string) *balancer {
	b := &balancer{hosts: hosts, health: health, up: make([]atomic.Bool, len(hosts)), stop: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	for i := range hosts {
		b.up[i].Store(true)
	}
	b.wg.Add(1)
	go b.check()
	return b
}

func (b *balancer) close() {
	close(b.stop)
	b.wg.Wait()
}

// check health-checks every gateway every 100ms: up after 2 passes in a
// row, down after a failed connection.
func (b *balancer) check() {
	defer b.wg.Done()
	passes := make([]int, len(b.hosts))
	for {
		select {
		case <-b.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		for i, h := range b.hosts {
			code, body, err := podmantest.Get(h.url(b.health[i]))
			svc := strings.Split(b.health[i], "/")[1]
			if err == nil && code == 200 && strings.HasPrefix(body, svc+" ") {
				if passes[i]++; passes[i] >= 2 {
					b.up[i].Store(true)
				}
			} else {
				passes[i] = 0
				if err != nil {
					b.up[i].Store(false)
				}
			}
		}
	}
}

// get sends GET path through the gateways; it returns the answer of the
// first gateway that answered.
func (b *balancer) get(path string) (int, string, error) {
	n := len(b.hosts)
	start := int(b.next.Add(1))
	var lastErr error
	for k := 0; k < 2*n; k++ {
		i := (start + k) % n
		if k < n && !b.up[i].Load() {
			continue // the second round tries the ones marked down too
		}
		resp, err := b.client.Get(b.hosts[i].url(path))
		if err != nil {
			lastErr = err // the connection failed: the next gateway
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return resp.StatusCode, string(body), nil
	}
	return 0, "", fmt.Errorf("no gateway answered: %w", lastErr)
}

// load sends requests for services through the balancer from workers
// goroutines until stopped, recording the answered paths in audited and
// every failure.
type load struct {
	b        *balancer
	run      string
	services []string
	audited  *sent
	stop     atomic.Bool
	wg       sync.WaitGroup
	n, ok    atomic.Int64
	mu       sync.Mutex
	failures []string
}

func (l *load) start(workers int) {
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				i := l.n.Add(1)
				svc := l.services[int(i)%len(l.services)]
				path := fmt.Sprintf("/%s/%s-%d", svc, l.run, i)
				code, body, err := l.b.get(path)
				if err == nil && code == 200 && body == svc+" "+path {
					l.ok.Add(1)
					l.audited.mu.Lock()
					if l.audited.paths == nil {
						l.audited.paths = map[string]bool{}
					}
					l.audited.paths[path] = true
					l.audited.mu.Unlock()
					continue
				}
				l.mu.Lock()
				l.failures = append(l.failures, fmt.Sprintf("%s: %d %q %v", path, code, body, err))
				l.mu.Unlock()
			}
		}()
	}
}

func (l *load) halt() {
	l.stop.Store(true)
	l.wg.Wait()
}

func (l *load) failed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}

// TestFleetRollingRestart runs two hosts on the reference config
// (testdata/host.Caddyfile) with a container on each, and load on both
// services through a load balancer: a rolling restart of both gateways
// (SIGTERM, start again, one after the other) fails no request, because a
// gateway that stops gracefully leaves its host's running containers to
// the other; then gateway A is SIGKILLed under load: B keeps serving
// both hosts' services (A's until the ttl, while its containers run), and
// A restarted takes its node over without a namesake conflict. Every
// answered request's audit event is in the AUDIT stream, once, including
// those A answered just before its kill -9.
func TestFleetRollingRestart(t *testing.T) {
	bin := gatewayBinary(t)
	pods := twoPodmans(t, [2]string{"ra", "rb"})
	cluster := natstest.StartCluster(t, 1)
	a, b := newRefHost(t, "a", pods[0]), newRefHost(t, "b", pods[1])
	a.start(t, bin, cluster.URL())
	b.start(t, bin, cluster.URL())
	pA, pB := freeport.Port(t), freeport.Port(t)
	if err := a.pod.Run("roll-a", pA, refLabels("roll-a", pA)); err != nil {
		t.Fatal(err)
	}
	if err := b.pod.Run("roll-b", pB, refLabels("roll-b", pB)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*fleetHost{a, b} {
		for _, svc := range []string{"roll-a", "roll-b"} {
			podmantest.Eventually(t, h.name+" routes "+svc, 30*time.Second, podmantest.Expect(h.url("/"+svc+"/x"), 200, svc+" /"+svc+"/x"))
		}
	}
	bal := newBalancer([]*fleetHost{a, b}, []string{"/roll-a/health", "/roll-b/health"})
	defer bal.close()
	var audited sent
	run := fmt.Sprint(time.Now().UnixNano())
	ld := &load{b: bal, run: run, services: []string{"roll-a", "roll-b"}, audited: &audited}
	ld.start(4)
	defer ld.halt()
	waitUp := func(i int, h *fleetHost) {
		t.Helper()
		podmantest.Eventually(t, "the balancer sends to "+h.name+" again", 30*time.Second, func() string {
			if !bal.up[i].Load() {
				return "down"
			}
			return ""
		})
	}

	outer := t
	t.Run("rolling restart of both gateways: no request fails", func(t *testing.T) {
		time.Sleep(time.Second)
		for i, h := range []*fleetHost{a, b} {
			t0 := time.Now()
			h.proc.stop(t)
			h.start(outer, bin, cluster.URL())
			waitUp(i, h)
			t.Logf("gateway %s restarted, routing again %v after its SIGTERM", h.name, time.Since(t0).Round(time.Millisecond))
			time.Sleep(time.Second) // load through both before the next
		}
		if f := ld.failed(); len(f) > 0 {
			t.Fatalf("%d of %d requests failed during the rolling restart, e.g. %v", len(f), ld.n.Load(), f[:min(len(f), 5)])
		}
		t.Logf("rolling restart of 2 gateways under load: %d requests, %d answered by their service, 0 failed", ld.n.Load(), ld.ok.Load())
		for _, h := range []*fleetHost{a, b} {
			log, _ := os.ReadFile(h.proc.log)
			if strings.Contains(string(log), "another gateway publishes under this node name") {
				t.Errorf("gateway %s reported a node name conflict across its own restart", h.name)
			}
		}
	})

	t.Run("SIGKILL of A: B keeps serving both hosts' services", func(t *testing.T) {
		before := len(ld.failed())
		killed := time.Now()
		a.kill()
		// Within the ttl B serves A's container (still running) and its
		// own; the balancer sends everything to B.
		time.Sleep(hostTTL / 2)
		if f := ld.failed()[before:]; len(f) > 0 {
			t.Fatalf("%d requests failed in the %v after A's kill -9, e.g. %v", len(f), time.Since(killed).Round(time.Millisecond), f[:min(len(f), 5)])
		}
		ld.halt()
		// A crash keeps A's records until the ttl: then B drops them.
		podmantest.Eventually(t, "B drops A's container after the ttl", 4*hostTTL, podmantest.Expect(b.url("/roll-a/x"), 404, ""))
		gone := time.Since(killed)
		t.Logf("B served A's container for %v after A's kill -9 (ttl %v)", gone.Round(time.Millisecond), hostTTL)
		// A's last heartbeat was at most ttl/3 before the kill; its
		// entry counts for ttl after that.
		if gone < hostTTL*2/3 {
			t.Errorf("B dropped A's container %v after the kill, before the ttl %v after A's last heartbeat", gone, hostTTL)
		}
		podmantest.Eventually(t, "B serves its own", 5*time.Second, podmantest.Expect(b.url("/roll-b/x"), 200, "roll-b /roll-b/x"))
		// A back: it takes its node over.
		a.start(outer, bin, cluster.URL())
		podmantest.Eventually(t, "B routes A's container again", 20*time.Second, podmantest.Expect(b.url("/roll-a/x"), 200, "roll-a /roll-a/x"))
		log, _ := os.ReadFile(a.proc.log)
		if strings.Contains(string(log), "another gateway publishes under this node name") {
			t.Error("A restarted after a kill -9 reported a node name conflict")
		}
	})

	t.Run("every answered request audited once", func(t *testing.T) {
		audited.checkAudit(t, cluster.URL(), run)
	})
}
