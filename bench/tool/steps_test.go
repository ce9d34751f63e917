package main

import (
	"fmt"
	"strings"
	"testing"
)

// sat is a saturated sample of one round at 300 connections.
func sat(round int, rps float64) Sample {
	return Sample{Round: round, At: map[int]WrkResult{300: {RPS: rps, P99ms: 5}}, Saturated: true}
}

// TestStepsQuotable: the four-step table quotes a figure (and the README
// paragraph carries it) only when enough rounds measured it with the
// server saturated; the gateway's cells say which path served them; a
// duty a peer cannot do is a cell that says so.
func TestStepsQuotable(t *testing.T) {
	r := &Report{Date: "2026-12-01", Rounds: 5, Samples: map[string][]Sample{}}
	for _, n := range []string{"nginx", "nginx-authreq-hs256", "nginx-steps-rl", "gw-fast", "gw-fast-jwt-hs256"} {
		s, _ := scenarioByName(n)
		r.Scenarios = append(r.Scenarios, s)
	}
	for round := 1; round <= 5; round++ {
		r.Samples["nginx"] = append(r.Samples["nginx"], sat(round, 80000))
		a := sat(round, 20000)
		a.Saturated = round > 2 // nginx cannot fill its core while the auth service is slow: 3 of 5
		r.Samples["nginx-authreq-hs256"] = append(r.Samples["nginx-authreq-hs256"], a)
		r.Samples["nginx-steps-rl"] = append(r.Samples["nginx-steps-rl"], sat(round, 60000))
		g := sat(round, 56000)
		g.Path = &PathInfo{Wrapper: true, Logged: "on", Served: 1, Requests: 1}
		r.Samples["gw-fast"] = append(r.Samples["gw-fast"], g)
		j := sat(round, 11000)
		j.Path = &PathInfo{Wrapper: true, Logged: "off", Reason: "http.handlers.jwt_auth"}
		r.Samples["gw-fast-jwt-hs256"] = append(r.Samples["gw-fast-jwt-hs256"], j)
	}
	if f := r.stepFigure("nginx-authreq-hs256", "nginx"); f.Quotable || f.Rounds != 3 {
		t.Errorf("3 saturated rounds of 5: %+v", f)
	}
	f := r.stepFigure("nginx-steps-rl", "nginx")
	if !f.Quotable || f.Cost.Med < 0.2499 || f.Cost.Med > 0.2501 {
		t.Errorf("nginx + limit_req: %+v", f)
	}
	para := r.readmeParagraph()
	for _, want := range []string{"(2026-12-01)", "nginx 1.22: bare 80.0k, + rate limit 60.0k (-25%)", "bare 56.0k, + JWT 11.0k (-80%) on Caddy's path"} {
		if !strings.Contains(para, want) {
			t.Errorf("README paragraph lacks %q:\n%s", want, para)
		}
	}
	if strings.Contains(para, "+ JWT 20.0k") {
		t.Errorf("README paragraph quotes a figure not saturated in 4 of 5 rounds:\n%s", para)
	}
	var md strings.Builder
	r.stepsMarkdown(func(f string, a ...any) { md.WriteString(strings.TrimSpace(sprintf(f, a...)) + "\n") })
	out := md.String()
	for _, want := range []string{"| nginx 1.22 | 80000 req/s |", "not quotable", "Caddy's path (fast path off: http.handlers.jwt_auth)", "| cannot |", "none (no label discovery)"} {
		if !strings.Contains(out, want) {
			t.Errorf("steps table lacks %q:\n%s", want, out)
		}
	}
}

// TestExtraTargets: the TLS, 9,000-connection and idle goals of the fast
// path are judged from the extra parts' rows: round by round, saturated
// rounds only, every round when fewer than 3 ran.
func TestExtraTargets(t *testing.T) {
	tls := func(proxy string, rps, busy []float64) *ExtraRow {
		x := &ExtraRow{Part: "tls", Proxy: proxy, Case: "keep-alive", Extra: map[string]float64{}, Path: "fast path"}
		for i := range rps {
			x.Rounds = append(x.Rounds, rps[i])
			x.RoundIDs = append(x.RoundIDs, i+1)
			x.Busy = append(x.Busy, busy[i])
		}
		return x
	}
	full := []float64{0.97, 0.97, 0.97}
	idle := func(mb float64) *ExtraRow {
		return &ExtraRow{Part: "idle", Proxy: "gw-fast", Case: "9900 idle connections", Rounds: []float64{mb}, Extra: map[string]float64{"rss_before_mb": 50}}
	}
	find := func(r *Report, name string) TargetResult {
		for _, tr := range r.extraTargets() {
			if tr.Name == name {
				return tr
			}
		}
		t.Fatalf("no target %q", name)
		return TargetResult{}
	}
	const ka = "fast path: TLS 1.3 keep-alive vs nginx"
	for _, tc := range []struct {
		name   string
		gw     *ExtraRow
		want   string
		target string
	}{
		{"keep-alive 0.62x in every round", tls("gw-fast", []float64{62, 62, 62}, full), "met", ka},
		{"keep-alive 0.62x in 2 of 3 rounds", tls("gw-fast", []float64{62, 55, 62}, full), "noisy", ka},
		{"keep-alive 0.5x", tls("gw-fast", []float64{50, 50, 50}, full), "missed", ka},
		{"keep-alive, a round not saturated", tls("gw-fast", []float64{62, 62, 62}, []float64{0.97, 0.5, 0.97}), "not saturated", ka},
		{"idle 11.1 KB per connection", idle(160), "met", "fast path, no duties: memory per idle keep-alive connection"},
		{"idle 13.1 KB per connection", idle(180), "missed", "fast path, no duties: memory per idle keep-alive connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Rounds: 5, Extras: []*ExtraRow{tc.gw, tls("nginx", []float64{100, 100, 100}, full)}}
			tr := find(r, tc.target)
			if tr.Status != tc.want {
				t.Fatalf("status %q (%s, %d of %d rounds), want %q", tr.Status, tr.Measured, tr.Meeting, tr.Needed, tc.want)
			}
			if tr.Path != tc.gw.Path {
				t.Fatalf("path %q", tr.Path)
			}
		})
	}
}

// TestPeakMemoryTarget: the every-duty memory goals (Caddy's path and the
// fast path) are <= 80 MB of peak RSS over the rounds.
func TestPeakMemoryTarget(t *testing.T) {
	for _, tc := range []struct {
		peak int64
		want string
	}{{70e6, "met"}, {90e6, "missed"}} {
		s := sat(1, 1000)
		s.PeakRSS = tc.peak
		s.Path = &PathInfo{Wrapper: true, Logged: "on", Served: 1, Requests: 1}
		r := &Report{Rounds: 1, Samples: map[string][]Sample{"gw-fast-all": {s}}}
		sc, _ := scenarioByName("gw-fast-all")
		r.Scenarios = []Scenario{sc}
		r.evaluate()
		var got *TargetResult
		for i := range r.Targets {
			if r.Targets[i].Name == "fast path, every duty: peak memory, 300 connections" {
				got = &r.Targets[i]
			}
		}
		if got == nil || got.Status != tc.want || !strings.HasPrefix(got.Path, "fast path") {
			t.Fatalf("peak %d: %+v, want %s", tc.peak, got, tc.want)
		}
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }
