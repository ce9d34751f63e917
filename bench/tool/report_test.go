package main

import (
	"strings"
	"testing"
)

// samples makes one round per value of a scenario, at 300 connections.
func samples(rps []float64, saturated bool) []Sample {
	var out []Sample
	for i, v := range rps {
		out = append(out, Sample{Round: i + 1, At: map[int]WrkResult{300: {RPS: v, P99ms: 10}}, Saturated: saturated})
	}
	return out
}

// TestTargetNeedsRounds: a ratio target is met only when the median meets
// it and at least 4 of 5 rounds do; noise in either direction cannot pass.
func TestTargetNeedsRounds(t *testing.T) {
	target := func(r *Report, name string) TargetResult {
		r.evaluate()
		for _, tr := range r.Targets {
			if tr.Name == name {
				return tr
			}
		}
		t.Fatalf("no target %q", name)
		return TargetResult{}
	}
	const name = "transport h1, no duties, vs stock Caddy" // >= 2.0x
	for _, tc := range []struct {
		desc       string
		caddy, gw  []float64
		gwSat      bool
		wantStatus string
	}{
		{"every round 2.1x", []float64{10, 10, 10, 10, 10}, []float64{21, 21, 21, 21, 21}, true, "met"},
		{"median meets, 4 of 5 rounds", []float64{10, 10, 10, 10, 10}, []float64{21, 22, 20.5, 25, 15}, true, "met"},
		{"median meets, only 3 of 5 rounds", []float64{10, 10, 10, 10, 10}, []float64{21, 22, 20.5, 15, 15}, true, "noisy"},
		{"one huge round cannot carry it", []float64{10, 10, 10, 10, 10}, []float64{15, 15, 19, 90, 90}, true, "missed"},
		{"median misses", []float64{10, 10, 10, 10, 10}, []float64{19, 19, 19, 21, 21}, true, "missed"},
		{"not saturated", []float64{10, 10, 10, 10, 10}, []float64{21, 21, 21, 21, 21}, false, "not saturated"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			r := &Report{Rounds: 5, Samples: map[string][]Sample{
				"caddy": samples(tc.caddy, true), "gw-h1": samples(tc.gw, tc.gwSat)}}
			r.Scenarios = []Scenario{{Name: "caddy"}, {Name: "gw-h1"}}
			tr := target(r, name)
			if tr.Status != tc.wantStatus {
				t.Fatalf("status %q (%d of %d rounds meet, median %.2f), want %q", tr.Status, tr.Meeting, len(tr.PerRound), tr.Value, tc.wantStatus)
			}
			if tc.gwSat && len(tr.PerRound) != 5 {
				t.Fatalf("per-round values %v", tr.PerRound)
			}
		})
	}
}

func TestParseWrkNeedsLatency(t *testing.T) {
	ok := `Running 5s test @ http://127.0.0.1:1/
  Latency Distribution
     50%    1.10ms
     75%    2.00ms
     90%    3.00ms
     99%   12.50ms
  1000 requests in 5.00s, 1.00MB read
Requests/sec:    200.00
`
	r, err := parseWrk(ok)
	if err != nil || r.P50ms != 1.1 || r.P99ms != 12.5 || r.RPS != 200 {
		t.Fatalf("%+v, %v", r, err)
	}
	if _, err := parseWrk(strings.Replace(ok, "     99%   12.50ms\n", "", 1)); err == nil {
		t.Fatal("a wrk output without its 99% line parsed; its P99 would silently be 0")
	}
}
