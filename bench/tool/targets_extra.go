package main

import (
	"fmt"
	"strings"
)

// extraTarget is a goal checked against the rows of an extra part (TLS,
// scaling, idle) rather than the load rounds: issue 23's goals for the
// fast path at TLS, at 9,000 connections and idle.
type extraTarget struct {
	Name    string
	Part    string // tls | scaling | idle
	Case    string // the row's case ("" for any: idle's case is its connection count)
	Proxy   string // the row's proxy (scenario name)
	Against string // ratio: the other row, same part and case
	Kind    string // ratio (>= Limit x Against's, round by round) | kbper (idle memory per connection <= Limit KB) | kbvs (KB per connection <= Limit x Against's) | share (Extra throughput_share_r* >= Limit)
	Limit   float64
	Report  bool // reported only, no limit
}

func extraTargetList() []extraTarget {
	return []extraTarget{
		{Name: "fast path: TLS 1.3 keep-alive vs nginx", Part: "tls", Case: "keep-alive", Proxy: "gw-fast", Against: "nginx", Kind: "ratio", Limit: 0.6},
		{Name: "fast path: TLS 1.3 full handshakes vs nginx", Part: "tls", Case: "handshakes", Proxy: "gw-fast", Against: "nginx", Kind: "ratio", Report: true},
		{Name: "fast path, no duties: 9,000 connections vs nginx", Part: "scaling", Case: "9000 connections", Proxy: "gw-fast", Against: "nginx", Kind: "ratio", Limit: 0.7},
		{Name: "fast path, no duties: memory per idle keep-alive connection", Part: "idle", Proxy: "gw-fast", Kind: "kbper", Limit: 12},
		{Name: "fast path, every duty: memory per idle keep-alive connection", Part: "idle", Proxy: "gw-fast-all", Kind: "kbper", Report: true},
		{Name: "Traefik: memory per idle keep-alive connection", Part: "idle", Proxy: "traefik", Kind: "kbper", Report: true},
		// issue 31: slow request heads
		{Name: "fast path: memory per slowloris connection vs nginx", Part: "slowloris", Proxy: "gw-fast", Against: "nginx", Kind: "kbvs", Limit: 1.3},
		{Name: "fast path: legitimate throughput under 3,000 slowloris connections", Part: "slowloris", Proxy: "gw-fast", Kind: "share", Limit: 0.9},
	}
}

// extraRow finds a part's row of a proxy (and case, when given) that has
// figures.
func (r *Report) extraRow(part, proxy, cas string) *ExtraRow {
	for _, x := range r.Extras {
		if x.Part == part && x.Proxy == proxy && (cas == "" || x.Case == cas) && x.Err == "" && len(x.Rounds) > 0 {
			return x
		}
	}
	return nil
}

// partRounds is how many rounds a part ran (the most any of its rows has).
func (r *Report) partRounds(part string) int {
	n := 0
	for _, x := range r.Extras {
		if x.Part == part {
			n = max(n, len(x.Rounds))
		}
	}
	return n
}

// kbPerConn is an idle row's memory per held connection, in KB.
func kbPerConn(x *ExtraRow) float64 {
	n := parseLeadingFloat(x.Case)
	if n <= 0 || len(x.Rounds) == 0 {
		return -1
	}
	return 1000 * (x.Rounds[0] - x.Extra["rss_before_mb"]) / n
}

// extraTargets evaluates extraTargetList: a ratio round by round over the
// rounds in which both rows kept their server saturated, judged as the
// load targets are (the median, and enough of the part's rounds: every
// round when fewer than 3 ran); memory per idle connection from the one
// measurement.
func (r *Report) extraTargets() []TargetResult {
	var out []TargetResult
	for _, t := range extraTargetList() {
		tr := TargetResult{Name: t.Name, Scenario: t.Proxy, Kind: "extra-" + t.Kind}
		x := r.extraRow(t.Part, t.Proxy, t.Case)
		if x != nil {
			tr.Path = x.Path
		}
		switch t.Kind {
		case "ratio":
			tr.Goal = fmt.Sprintf(">= %.1fx %s (%s, %s)", t.Limit, t.Against, t.Part, t.Case)
			if t.Report {
				tr.Goal = fmt.Sprintf("reported (share of %s, %s, %s)", t.Against, t.Part, t.Case)
			}
			y := r.extraRow(t.Part, t.Against, t.Case)
			if x == nil || y == nil {
				tr.Measured, tr.Status = "-", "not measured"
				break
			}
			xv, xs := x.byRound()
			yv, ys := y.byRound()
			vals, unsat := map[int]float64{}, 0
			for round, v := range xv {
				w, have := yv[round]
				if !have || w <= 0 {
					continue
				}
				if !xs[round] || !ys[round] {
					unsat++
					continue
				}
				vals[round] = v / w
			}
			meets := func(v float64) bool { return t.Report || v >= t.Limit }
			st, valid := judgeRounds(&tr, roundsNeeded(r.partRounds(t.Part)), vals, unsat, meets)
			if !valid {
				tr.Measured = "-"
				break
			}
			tr.Value = st.Med
			tr.Measured = fmt.Sprintf("%s (%.0f vs %.0f req/s)", ratioStr(st), stat(x.Rounds).Med, stat(y.Rounds).Med)
			if t.Report && tr.Status != "not saturated" && tr.Status != "not measured" {
				tr.Status = "reported"
			}
		case "kbvs":
			tr.Goal = fmt.Sprintf("<= %.1fx %s's", t.Limit, t.Against)
			y := r.extraRow(t.Part, t.Against, t.Case)
			if x == nil || y == nil || stat(y.Rounds).Med <= 0 {
				tr.Measured, tr.Status = "-", "not measured"
				break
			}
			tr.Value = stat(x.Rounds).Med / stat(y.Rounds).Med
			tr.Measured = fmt.Sprintf("%.2fx (%.1f KB vs %.1f KB per connection)", tr.Value, stat(x.Rounds).Med, stat(y.Rounds).Med)
			tr.Status = metStr(tr.Value <= t.Limit)
		case "share":
			tr.Goal = fmt.Sprintf(">= %.2fx of without", t.Limit)
			var v []float64
			if x != nil {
				for k, s := range x.Extra {
					if strings.HasPrefix(k, "throughput_share_r") {
						v = append(v, s)
					}
				}
			}
			if len(v) == 0 {
				tr.Measured, tr.Status = "-", "not measured"
				break
			}
			st := stat(v)
			tr.Value = st.Med
			tr.Measured = fmt.Sprintf("%.2fx [%.2f .. %.2f]", st.Med, st.Min, st.Max)
			tr.Status = metStr(st.Med >= t.Limit)
		case "kbper":
			tr.Goal = fmt.Sprintf("<= %.0f KB", t.Limit)
			if t.Report {
				tr.Goal = "reported"
			}
			if x == nil || kbPerConn(x) < 0 {
				tr.Measured, tr.Status = "-", "not measured"
				break
			}
			tr.Value = kbPerConn(x)
			tr.Measured = fmt.Sprintf("%.1f KB (%s: %.1f MB, %.1f MB before)", tr.Value, strings.TrimSpace(x.Case), x.Rounds[0], x.Extra["rss_before_mb"])
			tr.Status = metStr(tr.Value <= t.Limit)
			if t.Report {
				tr.Status = "reported"
			}
		}
		out = append(out, tr)
	}
	return out
}
