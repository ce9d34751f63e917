package caddydocker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

func rollbacksOf(t *testing.T, svc string) float64 {
	t.Helper()
	var m dto.Metric
	if err := globalMetrics().canaryRollbacks.WithLabelValues(svc).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func groups(canary *CanarySpec, extra ...VersionGroup) []VersionGroup {
	out := []VersionGroup{
		{Version: "v1", Dials: []string{"10.0.0.1:80", "10.0.0.2:80"}},
		{Version: "v2", Dials: []string{"10.0.0.9:80"}, Canary: canary},
	}
	return append(out, extra...)
}

// TestCanaryPromotion: a healthy canary is raised by step every interval,
// once the window holds min_requests of its answers, to 100 (complete);
// the record outlives the controller (a restart keeps the state).
func TestCanaryPromotion(t *testing.T) {
	file := filepath.Join(t.TempDir(), "routes-canary.json")
	c := newCanaries("srv", file, nil, globalMetrics(), zap.NewNop())
	spec := defaultSpec(10)
	spec.Step, spec.Interval, spec.MinRequests = 40, time.Second, 5
	splits, warns := c.splits(map[string][]VersionGroup{"promo": groups(&spec)})
	sp := splits["promo"]
	if sp == nil || len(warns) != 0 || sp.rel.weight.Load() != 10 || sp.rel.State() != CanaryRunning {
		t.Fatalf("split %+v warnings %v", sp, warns)
	}
	if strings.Join(sp.canary, ",") != "10.0.0.9:80" || len(sp.retired) != 0 {
		t.Fatalf("canary dials %v retired %v", sp.canary, sp.retired)
	}
	rel := sp.rel
	ctx := context.Background()
	t0 := time.Now()
	c.work(ctx, t0.Add(1100*time.Millisecond))
	if rel.weight.Load() != 10 || !strings.Contains(c.status(time.Now())[0].Waiting, "min_requests is 5") {
		t.Fatalf("promoted without answers: weight %d, status %+v", rel.weight.Load(), c.status(time.Now()))
	}
	for range 5 {
		rel.obs[1].ObserveAnswer(200, nil, time.Millisecond)
	}
	for i, want := range []int32{50, 90, 100} {
		now := t0.Add(time.Duration(i+1)*1100*time.Millisecond + time.Second)
		c.work(ctx, now)
		if got := rel.weight.Load(); got != want {
			t.Fatalf("step %d: weight %d, want %d", i+1, got, want)
		}
		c.work(ctx, now.Add(500*time.Millisecond)) // not due yet
		if got := rel.weight.Load(); got != want {
			t.Fatalf("stepped before the interval: %d", got)
		}
	}
	if rel.State() != CanaryComplete {
		t.Fatalf("state %s at 100", rel.State())
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), `"state": "complete"`) {
		t.Fatalf("state file %s: %v", b, err)
	}

	// a new controller (a restart) takes the record up
	c2 := newCanaries("srv", file, nil, globalMetrics(), zap.NewNop())
	sp2, _ := c2.splits(map[string][]VersionGroup{"promo": groups(&spec)})
	if r := sp2["promo"].rel; r.State() != CanaryComplete || r.weight.Load() != 100 {
		t.Fatalf("after a restart: %s at %d", r.State(), r.weight.Load())
	}

	// a new canary v3 after v2 completed: v2 is the stable side, v1
	// (which v2 replaced) is retired
	spec3 := spec
	spec3.Weight = 5
	sp3, _ := c2.splits(map[string][]VersionGroup{"promo": groups(&spec, VersionGroup{Version: "v3", Dials: []string{"10.0.0.10:80"}, Canary: &spec3})})
	s3 := sp3["promo"]
	if s3.rel.version != "v3" || strings.Join(s3.canary, ",") != "10.0.0.10:80" ||
		strings.Join(s3.retired, ",") != "10.0.0.1:80,10.0.0.2:80" || strings.Join(s3.rel.stable, ",") != "v2" {
		t.Fatalf("v3 after v2: canary %v retired %v stable %v (release %s)", s3.canary, s3.retired, s3.rel.stable, s3.rel.version)
	}
}

// TestCanaryRollback: failures beyond max_error_rate take the canary out
// at the answer that crosses the limit, the rollback is counted once,
// survives a restart, and a new canary version beside it takes its place
// (the rolled back one retired).
func TestCanaryRollback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "routes-canary.json")
	c := newCanaries("srv", file, nil, globalMetrics(), zap.NewNop())
	spec := defaultSpec(20)
	spec.MinRequests = 20
	sp, _ := c.splits(map[string][]VersionGroup{"rb": groups(&spec)})
	rel := sp["rb"].rel
	before := rollbacksOf(t, "rb")
	// 19 answers, all failed: fewer than min_requests, nothing happens
	for range 19 {
		rel.obs[1].ObserveAnswer(502, nil, time.Millisecond)
	}
	if rel.State() != CanaryRunning {
		t.Fatalf("rolled back before min_requests")
	}
	rel.obs[1].ObserveAnswer(200, nil, time.Millisecond) // the 20th: 95% failed
	if rel.State() != CanaryRolledBack || rel.weight.Load() != 0 {
		t.Fatalf("not rolled back at the 20th answer: %s %d", rel.State(), rel.weight.Load())
	}
	c.work(context.Background(), time.Now())
	if got := rollbacksOf(t, "rb") - before; got != 1 {
		t.Fatalf("rollbacks counted %v", got)
	}
	st := c.status(time.Now())[0]
	if st.State != CanaryRolledBack || !strings.Contains(st.Reason, "error rate 95.0% above max_error_rate 5%") || st.Sides[1].Requests != 20 {
		t.Fatalf("status %+v", st)
	}
	// more failures do not count again
	rel.obs[1].ObserveAnswer(500, nil, time.Millisecond)
	c.work(context.Background(), time.Now())
	if got := rollbacksOf(t, "rb") - before; got != 1 {
		t.Fatalf("rollbacks counted %v", got)
	}

	c2 := newCanaries("srv", file, nil, globalMetrics(), zap.NewNop())
	sp2, _ := c2.splits(map[string][]VersionGroup{"rb": groups(&spec)})
	if r := sp2["rb"].rel; r.State() != CanaryRolledBack || r.weight.Load() != 0 || r.reason == "" {
		t.Fatalf("after a restart: %s at %d (%q)", r.State(), r.weight.Load(), r.reason)
	}
	// other labels are another release, from its own weight
	spec2 := spec
	spec2.Weight = 15
	sp3, _ := c2.splits(map[string][]VersionGroup{"rb": groups(&spec2)})
	if r := sp3["rb"].rel; r.State() != CanaryRunning || r.weight.Load() != 15 {
		t.Fatalf("changed labels: %s at %d", r.State(), r.weight.Load())
	}
	// the rolled back v2 beside a new canary v3: v3 is the canary, v2 retired
	spec3 := spec
	spec3.Weight = 5
	sp4, warns := c2.splits(map[string][]VersionGroup{"rb": groups(&spec, VersionGroup{Version: "v3", Dials: []string{"10.0.0.10:80"}, Canary: &spec3})})
	if s := sp4["rb"]; s.rel.version != "v3" || strings.Join(s.retired, ",") != "10.0.0.9:80" || len(warns) != 0 {
		t.Fatalf("v3 beside a rolled back v2: %s retired %v warnings %v", s.rel.version, s.retired, warns)
	}
	// two fresh canaries: a warning, the last version wins
	sp5, warns := newCanaries("srv", "", nil, globalMetrics(), zap.NewNop()).splits(map[string][]VersionGroup{
		"two": groups(&spec, VersionGroup{Version: "v3", Dials: []string{"10.0.0.10:80"}, Canary: &spec3})})
	if s := sp5["two"]; s.rel.version != "v3" || len(warns) != 1 || !strings.Contains(warns[0], "both carry gateway.canary.* labels") {
		t.Fatalf("two canaries: %s warnings %v", s.rel.version, warns)
	}
}
