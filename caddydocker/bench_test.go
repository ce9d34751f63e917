package caddydocker

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// BenchmarkDiscoveryLatency measures, against real Podman, the time from
// `podman run` returning to the first 200 through the gateway, and from
// `podman stop` / `podman kill` returning to the first non-200 and to the
// first 404 no_route (route removed). It is a benchmark so that plain
// `go test` never runs it; one iteration measures all containers:
//
//	go test ./caddydocker/ -run '^$' -bench DiscoveryLatency -benchtime 1x -v
//
// GATEWAY_DISCOVERY_BENCH_N sets the number of containers (default 12).
func BenchmarkDiscoveryLatency(b *testing.B) {
	for i := 0; i < b.N; i++ {
		discoveryLatency(b)
	}
}

func discoveryLatency(t *testing.B) {
	n := 12
	if v, err := strconv.Atoi(os.Getenv("GATEWAY_DISCOVERY_BENCH_N")); err == nil && v >= 10 {
		n = v
	}
	p := getPodman(t)
	t.Cleanup(p.RemoveAll)
	startGateway(t, gatewayConfig(p, filepath.Join(t.TempDir(), "routes.json")))
	t.Cleanup(func() { stopGateway(t) })
	podmantest.Eventually(t, "gateway up", 20*time.Second, expect("/nothing", 404, answerBody("no_route", "/nothing")))

	// poll until cond(status, body) holds; 2 ms between requests
	until := func(path string, cond func(int, string) bool) (time.Duration, error) {
		start := time.Now()
		for time.Since(start) < 30*time.Second {
			code, body, err := get(path)
			if err == nil && cond(code, body) {
				return time.Since(start), nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		return 0, fmt.Errorf("timeout on %s", path)
	}
	var add, gone, removed []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("bench%d", i)
		path := "/" + name
		pt := freeport.Port(t)
		if err := p.Run(name, pt, labels(name, pt, path)); err != nil {
			t.Fatal(err)
		}
		d, err := until(path+"/x", func(c int, _ string) bool { return c == 200 })
		if err != nil {
			t.Fatal(err)
		}
		add = append(add, d)

		how := "stop"
		if i%2 == 1 {
			how = "kill"
			err = p.Kill(name)
		} else {
			err = p.Stop(name)
		}
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		d, err = until(path+"/x", func(c int, _ string) bool { return c != 200 })
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, d)
		if _, err := until(path+"/x", func(c int, b string) bool { return c == 404 && b == answerBody("no_route", path+"/x") }); err != nil {
			t.Fatal(err)
		}
		removed = append(removed, time.Since(begin))
		t.Logf("%-8s %s: run->200 %v, %s->non-200 %v, %s->404 no_route %v", name, how, add[i].Round(time.Millisecond), how, gone[i].Round(time.Millisecond), how, removed[i].Round(time.Millisecond))
		_ = p.Remove(name)
	}
	// Replicas of one service: a pool change, no reload. A base replica
	// stays; each new one is measured until it answers, then (stopped)
	// until 8 answers in a row come from the base.
	pb := freeport.Port(t)
	if err := p.Run("rep-base", pb, labels("rep", pb, "/rep")); err != nil {
		t.Fatal(err)
	}
	if _, err := until("/rep/x", func(c int, b string) bool { return c == 200 }); err != nil {
		t.Fatal(err)
	}
	var repAdd, repGone []time.Duration
	for i := 0; i < n/2; i++ {
		name := fmt.Sprintf("rep%d", i)
		pt := freeport.Port(t)
		if err := p.Run(name, pt, labels("rep", pt, "/rep")); err != nil {
			t.Fatal(err)
		}
		d, err := until("/rep/x", func(c int, b string) bool { return c == 200 && strings.HasPrefix(b, name+" ") })
		if err != nil {
			t.Fatal(err)
		}
		repAdd = append(repAdd, d)
		if err := p.Stop(name); err != nil {
			t.Fatal(err)
		}
		begin, inRow := time.Now(), 0
		if _, err := until("/rep/x", func(c int, b string) bool {
			if c == 200 && strings.HasPrefix(b, "rep-base ") {
				inRow++
			} else {
				inRow = 0
			}
			return inRow == 8
		}); err != nil {
			t.Fatal(err)
		}
		repGone = append(repGone, time.Since(begin))
		_ = p.Remove(name)
	}
	report := fmt.Sprintf("discovery latency over %d containers (debounce 100ms):\n"+
		"  podman run  -> first 200:            p50 %v  p95 %v  max %v\n"+
		"  stop/kill   -> first non-200:        p50 %v  p95 %v  max %v\n"+
		"  stop/kill   -> first 404 no_route:   p50 %v  p95 %v  max %v\n"+
		"replicas of one service (%d, pool changes without a reload):\n"+
		"  podman run  -> first answer from it: p50 %v  p95 %v  max %v\n"+
		"  podman stop -> 8 answers from others: p50 %v  p95 %v  max %v",
		n, pct(add, 50), pct(add, 95), pct(add, 100), pct(gone, 50), pct(gone, 95), pct(gone, 100),
		pct(removed, 50), pct(removed, 95), pct(removed, 100),
		len(repAdd), pct(repAdd, 50), pct(repAdd, 95), pct(repAdd, 100), pct(repGone, 50), pct(repGone, 95), pct(repGone, 100))
	t.Log(report)
	fmt.Println(report)
	t.ReportMetric(float64(pct(add, 50).Milliseconds()), "add-p50-ms")
	t.ReportMetric(float64(pct(add, 95).Milliseconds()), "add-p95-ms")
	t.ReportMetric(float64(pct(gone, 50).Milliseconds()), "non200-p50-ms")
	t.ReportMetric(float64(pct(gone, 95).Milliseconds()), "non200-p95-ms")
	t.ReportMetric(float64(pct(removed, 50).Milliseconds()), "no_route-p50-ms")
	t.ReportMetric(float64(pct(removed, 95).Milliseconds()), "no_route-p95-ms")
	t.ReportMetric(float64(pct(repAdd, 50).Milliseconds()), "replica-add-p50-ms")
	t.ReportMetric(float64(pct(repGone, 50).Milliseconds()), "replica-gone-p50-ms")
	// ns/op stays Go's own: the time of the whole measurement (one iteration)
}

func pct(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	if i > len(s) {
		i = len(s)
	}
	return s[i-1].Round(time.Millisecond)
}
