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

// TestCanaryCompletedBesideRolledBack follows the docs' recovery: v2 is
// rolled back, v2.1 is deployed beside it and reaches 100%. While v2's
// container still runs, v2.1 stays the service's release, complete at
// weight 100 (status and gateway_canary_weight), v2 takes no requests
// and its rollback is not announced again; a release never ends before
// it began, also when a restart takes it up from the file.
func TestCanaryCompletedBesideRolledBack(t *testing.T) {
	file := filepath.Join(t.TempDir(), "routes-canary.json")
	log, logs := observed(t)
	c := newCanaries("srv", file, nil, globalMetrics(), log)
	spec := defaultSpec(20)
	spec.MinRequests = 5
	v2 := func() VersionGroup { return VersionGroup{Version: "v2", Dials: []string{"10.0.0.9:80"}, Canary: &spec} }
	sp, _ := c.splits(map[string][]VersionGroup{"rec": groups(&spec)})
	for range 5 {
		sp["rec"].rel.obs[1].ObserveAnswer(502, nil, time.Millisecond)
	}
	if sp["rec"].rel.State() != CanaryRolledBack {
		t.Fatal("v2 not rolled back")
	}
	ctx := context.Background()
	c.work(ctx, time.Now())

	spec21 := defaultSpec(10)
	spec21.Step, spec21.Interval, spec21.MinRequests = 90, time.Millisecond, 1
	v21 := VersionGroup{Version: "v2.1", Dials: []string{"10.0.0.21:80"}, Canary: &spec21}
	versions := map[string][]VersionGroup{"rec": {{Version: "v1", Dials: []string{"10.0.0.1:80"}}, v2(), v21}}
	sp, _ = c.splits(versions)
	rel := sp["rec"].rel
	if rel.version != "v2.1" || strings.Join(sp["rec"].retired, ",") != "10.0.0.9:80" {
		t.Fatalf("v2.1 beside the rolled-back v2: release %s, retired %v", rel.version, sp["rec"].retired)
	}
	rel.obs[1].ObserveAnswer(200, nil, time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	c.work(ctx, time.Now())
	if rel.State() != CanaryComplete || rel.weight.Load() != 100 {
		t.Fatalf("v2.1: %s at %d", rel.State(), rel.weight.Load())
	}

	check := func(t *testing.T, c *canaries, when string) {
		t.Helper()
		sp, _ := c.splits(versions)
		s := sp["rec"]
		if s.rel.version != "v2.1" || s.rel.State() != CanaryComplete || s.rel.weight.Load() != 100 ||
			strings.Join(s.canary, ",") != "10.0.0.21:80" || !strings.Contains(strings.Join(s.retired, ","), "10.0.0.9:80") {
			t.Fatalf("%s: release %s %s at %d, canary %v retired %v", when, s.rel.version, s.rel.State(), s.rel.weight.Load(), s.canary, s.retired)
		}
		st := c.status(time.Now())
		if len(st) != 1 || st[0].Version != "v2.1" || st[0].State != CanaryComplete || st[0].Weight != 100 {
			t.Fatalf("%s: status %+v", when, st)
		}
		var m dto.Metric
		if err := globalMetrics().canaryWeight.WithLabelValues("rec").Write(&m); err != nil || m.GetGauge().GetValue() != 100 {
			t.Fatalf("%s: gateway_canary_weight %v (%v)", when, m.GetGauge().GetValue(), err)
		}
		for _, r := range st {
			if r.Ended.Before(r.Since) {
				t.Fatalf("%s: release %s ended %v before it began %v", when, r.Version, r.Ended, r.Since)
			}
		}
	}
	check(t, c, "the next list")
	c.work(ctx, time.Now())
	check(t, c, "again")
	if n := logs.FilterMessage("canary rolled back").Len(); n != 1 {
		t.Errorf("the rollback was announced %d times, want once", n)
	}
	if n := logs.FilterMessage("canary release").FilterField(zap.String("version", "v2")).Len(); n != 1 {
		t.Errorf("v2 was taken up %d times, want once", n)
	}

	// a restart: taken up from the file, later than both ended
	time.Sleep(10 * time.Millisecond)
	check(t, newCanaries("srv", file, nil, globalMetrics(), zap.NewNop()), "after a restart")
}
