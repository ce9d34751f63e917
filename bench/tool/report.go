package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Report is everything a run measured; it is written as JSON beside the
// Markdown report, and the chart can be redrawn from it.
type Report struct {
	Date      string              `json:"date"`
	Started   time.Time           `json:"started"`
	Finished  time.Time           `json:"finished"`
	Quick     bool                `json:"quick"`
	Label     string              `json:"label,omitempty"` // -label: the report's short name after the date
	Rounds    int                 `json:"rounds"`
	DurationS float64             `json:"duration_s"`
	WarmupS   float64             `json:"warmup_s"`
	LatencyS  float64             `json:"latency_s,omitempty"` // the latency part's duration per rate
	Note      string              `json:"note,omitempty"`
	Command   string              `json:"command"`
	Machine   map[string]string   `json:"machine"`
	Versions  map[string]string   `json:"versions"`
	PoolSizes map[string]int      `json:"token_pool_sizes"`
	Scenarios []Scenario          `json:"scenarios"`
	Samples   map[string][]Sample `json:"samples"`
	Targets   []TargetResult      `json:"targets"`
	Discovery *DiscoveryResult    `json:"discovery,omitempty"`
	Ops       *OpsResult          `json:"operations,omitempty"`
	Profiles  []Profile           `json:"profiles,omitempty"`
	Extras    []*ExtraRow         `json:"extras,omitempty"` // tls, gzip, scaling, latency, idle
	Breaker   []BreakerResult     `json:"circuit_breaking,omitempty"`
	// Traefik is how the Traefik peer was built (bench/build-traefik's
	// notes) and configured.
	Traefik *TraefikBuild `json:"traefik,omitempty"`
	NotRun  []string      `json:"not_run,omitempty"`
	// PartSeconds is how long each part took, in the order they ran.
	PartSeconds []PartTime `json:"part_seconds,omitempty"`
}

// PartTime is how long one part of a run took.
type PartTime struct {
	Part    string  `json:"part"`
	Seconds float64 `json:"seconds"`
}

// timeLine says how long the run and each part took, and how many load
// runs were repeated because other processes took core 1.
func (r *Report) timeLine() string {
	if len(r.PartSeconds) == 0 {
		return ""
	}
	var parts []string
	for _, p := range r.PartSeconds {
		parts = append(parts, fmt.Sprintf("%s %s", p.Part, time.Duration(p.Seconds*float64(time.Second)).Round(time.Second)))
	}
	reruns := 0
	for _, ss := range r.Samples {
		for _, s := range ss {
			reruns += s.Reruns
		}
	}
	return fmt.Sprintf("Run time %s (%s); %d load runs were run again because other processes took core 1.",
		r.Finished.Sub(r.Started).Round(time.Second), strings.Join(parts, ", "), reruns)
}

// TargetResult is a target beside its measured figure.
type TargetResult struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Status   string `json:"status"` // met | noisy | missed | not saturated | reported | not measured
	Scenario string `json:"scenario,omitempty"`
	Kind     string `json:"kind,omitempty"` // the Target's Kind
	// Path says which path of the gateway served the rows of a target
	// whose config has the apigate wrapper, as the gateway said.
	Path  string  `json:"path,omitempty"`
	Value float64 `json:"value"`
	// PerRound is the target's figure in each round that counts (both
	// rows measured without error and saturated), by round number.
	PerRound map[int]float64 `json:"per_round,omitempty"`
	// Meeting is how many of those rounds meet the goal; Needed how many
	// must (at least 4 of 5).
	Meeting int `json:"rounds_meeting,omitempty"`
	Needed  int `json:"rounds_needed,omitempty"`
}

// roundsNeeded: a target is met only when its median meets it and at least
// this many rounds do (4 of 5; every round when there are fewer than 3).
func (r *Report) roundsNeeded() int { return roundsNeeded(r.Rounds) }

// roundsNeeded is how many of n rounds must meet a goal: 4 of 5, every
// round when fewer than 3 are run.
func roundsNeeded(n int) int {
	return max(int(math.Ceil(0.8*float64(n))), 1)
}

// judge gives a target's status from its per-round values: met when the
// median meets the goal and enough rounds do, noisy when only the median
// does, missed otherwise; not saturated (or not measured) when too few
// rounds count.
func (r *Report) judge(tr *TargetResult, vals map[int]float64, unsaturated int, meets func(float64) bool) (Stat, bool) {
	return judgeRounds(tr, r.roundsNeeded(), vals, unsaturated, meets)
}

// judgeRounds is judge for a part with its own number of rounds (needed:
// roundsNeeded of it).
func judgeRounds(tr *TargetResult, needed int, vals map[int]float64, unsaturated int, meets func(float64) bool) (Stat, bool) {
	tr.PerRound = vals
	tr.Needed = needed
	var v []float64
	for _, x := range vals {
		v = append(v, x)
		if meets(x) {
			tr.Meeting++
		}
	}
	st := stat(v)
	switch {
	case len(v) < tr.Needed && unsaturated > 0:
		tr.Status = "not saturated"
	case len(v) < tr.Needed || !st.valid():
		tr.Status = "not measured"
	case !meets(st.Med):
		tr.Status = "missed"
	case tr.Meeting < tr.Needed:
		tr.Status = "noisy"
	default:
		tr.Status = "met"
	}
	return st, st.valid()
}

// pairs returns, round by round, f(sample of name, sample of against) for
// the rounds where both ran without error and were saturated, and how
// many rounds were left out for want of saturation.
func (r *Report) pairs(name, against string, conns int, f func(a, b Sample) float64) (map[int]float64, int) {
	base := map[int]Sample{}
	for _, s := range r.Samples[against] {
		if s.ok(conns) {
			base[s.Round] = s
		}
	}
	out := map[int]float64{}
	unsat := 0
	for _, s := range r.Samples[name] {
		b, have := base[s.Round]
		if !have || !s.ok(conns) {
			continue
		}
		if !s.Saturated || !b.Saturated {
			unsat++
			continue
		}
		out[s.Round] = f(s, b)
	}
	return out, unsat
}

// cpuPairs is, round by round, name's CPU per request over against's, for
// the rounds where both ran without error (saturated or not).
func (r *Report) cpuPairs(name, against string) map[int]float64 {
	base := map[int]float64{}
	for _, s := range r.Samples[against] {
		if s.Err == "" && s.CPUPerReq > 0 {
			base[s.Round] = s.CPUPerReq
		}
	}
	out := map[int]float64{}
	for _, s := range r.Samples[name] {
		if b, ok := base[s.Round]; ok && s.Err == "" && s.CPUPerReq > 0 {
			out[s.Round] = s.CPUPerReq / b
		}
	}
	return out
}

// Stat is a median with its range.
type Stat struct{ Med, Min, Max float64 }

func (s Stat) valid() bool { return !math.IsNaN(s.Med) }

func stat(v []float64) Stat {
	if len(v) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	x := append([]float64(nil), v...)
	sort.Float64s(x)
	med := x[len(x)/2]
	if len(x)%2 == 0 {
		med = (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	return Stat{med, x[0], x[len(x)-1]}
}

func (r *Report) scenario(name string) (Scenario, bool) {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// ok reports whether a sample is usable at conns: no error, no failed
// requests.
func (s Sample) ok(conns int) bool {
	w, have := s.At[conns]
	return s.Err == "" && have && w.Non2xx == 0 && w.Errors == 0 && w.RPS > 0
}

// rps is the throughput of a scenario over its rounds.
func (r *Report) rps(name string, conns int) Stat {
	var v []float64
	for _, s := range r.Samples[name] {
		if s.ok(conns) {
			v = append(v, s.At[conns].RPS)
		}
	}
	return stat(v)
}

// level is the client connections of a row's measured runs (Levels).
func (r *Report) level(name string) int {
	if s, ok := r.scenario(name); ok {
		return s.Levels()[0]
	}
	return connLevels[0]
}

// lat is a row's P50 or P99 over its rounds; none ("-") for a loader
// that reports no percentiles (h2load).
func (r *Report) lat(name string, conns int, p99 bool) Stat {
	var v []float64
	for _, s := range r.Samples[name] {
		if s.ok(conns) && s.At[conns].P99ms > 0 {
			if p99 {
				v = append(v, s.At[conns].P99ms)
			} else {
				v = append(v, s.At[conns].P50ms)
			}
		}
	}
	return stat(v)
}

// ratio is name's throughput over against's, taken round by round (both
// measured in the same round), then summarised.
func (r *Report) ratio(name, against string, conns int) Stat {
	base := map[int]float64{}
	for _, s := range r.Samples[against] {
		if s.ok(conns) {
			base[s.Round] = s.At[conns].RPS
		}
	}
	var v []float64
	for _, s := range r.Samples[name] {
		if b, ok := base[s.Round]; ok && s.ok(conns) {
			v = append(v, s.At[conns].RPS/b)
		}
	}
	return stat(v)
}

func (r *Report) peak(name string) float64 {
	var m float64
	for _, s := range r.Samples[name] {
		if s.Err == "" && float64(s.PeakRSS) > m {
			m = float64(s.PeakRSS)
		}
	}
	return m
}

func (r *Report) peakAnon(name string) float64 {
	var m float64
	for _, s := range r.Samples[name] {
		if s.Err == "" && float64(s.PeakAnon) > m {
			m = float64(s.PeakAnon)
		}
	}
	return m
}

// sampleStat is a per-round figure of a row over its rounds that ran
// without error and measured it (> 0).
func (r *Report) sampleStat(name string, of func(Sample) float64) Stat {
	var v []float64
	for _, s := range r.Samples[name] {
		if x := of(s); s.Err == "" && x > 0 {
			v = append(v, x)
		}
	}
	return stat(v)
}

// cpuPerReq is a row's CPU µs per request over its rounds.
func (r *Report) cpuPerReq(name string) Stat {
	return r.sampleStat(name, func(s Sample) float64 { return s.CPUPerReq })
}

// cpuUserPerReq is the user-space part of a row's CPU µs per request.
func (r *Report) cpuUserPerReq(name string) Stat {
	return r.sampleStat(name, func(s Sample) float64 { return s.CPUUserPerReq })
}

// core0 is a row's core-0 busy share over its rounds.
func (r *Report) core0(name string) Stat {
	return r.sampleStat(name, func(s Sample) float64 { return s.Core0Busy })
}

// coreStr is the median share of core 1 taken by the server and by other
// processes during the runs.
func (r *Report) coreStr(name string) string {
	var ours, others []float64
	for _, s := range r.Samples[name] {
		if s.Err == "" {
			ours = append(ours, s.CoreOurs)
			others = append(others, s.CoreOthers)
		}
	}
	if len(ours) == 0 {
		return "-"
	}
	out := fmt.Sprintf("%.0f%% / %.0f%%", 100*stat(ours).Med, 100*stat(others).Med)
	for _, s := range r.Samples[name] {
		if s.Err == "" && !s.Saturated {
			return out + " *not saturated*"
		}
	}
	return out
}

// upstreamStr is the median of the upstream connections a row's proxy
// opened per run.
func (r *Report) upstreamStr(name string) string {
	var v []float64
	for _, s := range r.Samples[name] {
		if u, ok := s.Extra["upstream_conns"]; ok && s.Err == "" && u >= 0 {
			v = append(v, u)
		}
	}
	if st := stat(v); st.valid() {
		return fmt.Sprintf("%.0f", st.Med)
	}
	return "-"
}

func (r *Report) memStr(name string) string {
	m := r.peak(name)
	if m <= 0 {
		return "-"
	}
	if a := r.peakAnon(name); a > 0 {
		return fmt.Sprintf("%.1f MB (anon %.1f)", m/1e6, a/1e6)
	}
	return fmt.Sprintf("%.1f MB", m/1e6)
}

func (r *Report) extra(name, key string) float64 {
	var t float64
	for _, s := range r.Samples[name] {
		t += s.Extra[key]
	}
	return t
}

func (r *Report) requests(name string) float64 {
	var t float64
	for _, s := range r.Samples[name] {
		for _, w := range s.At {
			t += float64(w.Requests)
		}
	}
	return t
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func costStr(s Stat) string {
	// cost = 1 - ratio; the range flips
	return fmt.Sprintf("%s [%s .. %s]", pct(1-s.Med), pct(1-s.Max), pct(1-s.Min))
}

func ratioStr(s Stat) string {
	return fmt.Sprintf("%.2fx [%.2f .. %.2f]", s.Med, s.Min, s.Max)
}

// evaluate fills in the targets table.
func (r *Report) evaluate() {
	var out []TargetResult
	for _, t := range targets() {
		// (a target compares rows of one load: their connections are the same)
		c := r.level(t.Scenario)
		tr := TargetResult{Name: t.Name, Scenario: t.Scenario, Kind: t.Kind}
		sc, _ := scenarioByName(t.Scenario)
		tr.Path = r.pathNote(t.Scenario)
		_, ok := r.scenario(t.Scenario)
		against := t.Against
		if against == "" {
			against = sc.Baseline
		}
		switch t.Kind {
		case "cost":
			tr.Goal = "<= " + pct(t.Limit) + " vs " + against
			if t.Report {
				tr.Goal = "reported (vs " + against + ")"
			}
		case "cpu":
			tr.Goal = fmt.Sprintf("<= %.2fx %s's", t.Limit, against)
			if t.Report {
				tr.Goal = "reported (vs " + against + "'s)"
			}
		case "ratio":
			switch {
			case t.Report:
				tr.Goal = "reported (share of " + against + ")"
			case t.Limit >= 1:
				tr.Goal = fmt.Sprintf(">= %.1fx %s", t.Limit, against)
			default:
				tr.Goal = ">= " + pct(t.Limit) + " of " + against
			}
		}
		switch t.Kind {
		case "p99", "conns", "rss", "rssmax", "anon":
			out = append(out, r.evaluateOther(t, tr, against, ok))
			continue
		}
		if !ok {
			tr.Measured, tr.Status = "-", "not measured"
			out = append(out, tr)
			continue
		}
		ratio := func(a, b Sample) float64 { return a.At[c].RPS / b.At[c].RPS }
		vals, unsat := r.pairs(t.Scenario, against, c, ratio)
		if t.Kind == "cpu" {
			// (valid whether or not the rows were saturated)
			vals, unsat = r.cpuPairs(t.Scenario, against), 0
		}
		var meets func(float64) bool
		if t.Kind == "cost" {
			for k, v := range vals {
				vals[k] = 1 - v
			}
			meets = func(x float64) bool { return x <= t.Limit }
		} else if t.Kind == "cpu" {
			meets = func(x float64) bool { return x <= t.Limit }
		} else {
			meets = func(x float64) bool { return x >= t.Limit }
		}
		if t.Report {
			meets = func(float64) bool { return true }
		}
		st, valid := r.judge(&tr, vals, unsat, meets)
		if !valid {
			tr.Measured = "-"
			out = append(out, tr)
			continue
		}
		tr.Value = st.Med
		switch {
		case t.Kind == "cost":
			tr.Measured = fmt.Sprintf("%s [%s .. %s]", pct(st.Med), pct(st.Min), pct(st.Max))
		case t.Kind == "cpu":
			tr.Measured = fmt.Sprintf("%.2fx [%.2f .. %.2f]", st.Med, st.Min, st.Max)
		case t.Limit >= 1 || t.Report && st.Med >= 1:
			tr.Measured = ratioStr(st)
		default:
			tr.Measured = fmt.Sprintf("%s [%s .. %s]", pct(st.Med), pct(st.Min), pct(st.Max))
		}
		if t.Report && tr.Status != "not saturated" && tr.Status != "not measured" {
			tr.Status = "reported"
		}
		out = append(out, tr)
	}
	out = append(out, r.extraTargets()...)
	// discovery
	for _, k := range []string{"add", "remove"} {
		tr := TargetResult{Name: "discovery " + k + " p50 (gateway)", Goal: "<= 300 ms"}
		if d := r.Discovery; d != nil && d.Err == "" {
			st := d.Gateway.stat(k)
			if st.valid() {
				tr.Value = st.Med
				tr.Measured = fmt.Sprintf("%.0f ms [%.0f .. %.0f]", st.Med, st.Min, st.Max)
				tr.Status = metStr(st.Med <= 300)
				out = append(out, tr)
				continue
			}
		}
		tr.Measured, tr.Status = "-", "not measured"
		out = append(out, tr)
	}
	r.Targets = out
}

// evaluateOther evaluates the targets that are not throughput ratios: a
// P99 against another scenario's (round by round), the upstream
// connections a proxy opened in a run, and peak memory against another
// scenario's.
func (r *Report) evaluateOther(t Target, tr TargetResult, against string, ok bool) TargetResult {
	c := r.level(t.Scenario)
	notMeasured := func() TargetResult {
		tr.Measured, tr.Status = "-", "not measured"
		return tr
	}
	switch t.Kind {
	case "p99":
		tr.Goal = fmt.Sprintf("<= %.1fx %s's P99", t.Limit, against)
	case "conns":
		tr.Goal = fmt.Sprintf("<= %.0f (the client connections), warm-up and load", t.Limit)
	case "rss":
		tr.Goal = "<= " + against + "'s"
	case "rssmax":
		tr.Goal = fmt.Sprintf("<= %.0f MB", t.Limit)
	case "anon":
		tr.Goal = fmt.Sprintf("<= %s's + %.0f MB (anon)", against, t.Limit)
	}
	if !ok {
		return notMeasured()
	}
	switch t.Kind {
	case "p99":
		vals, unsat := r.pairs(t.Scenario, against, c, func(a, b Sample) float64 { return a.At[c].P99ms / b.At[c].P99ms })
		st, valid := r.judge(&tr, vals, unsat, func(x float64) bool { return x <= t.Limit })
		if !valid {
			tr.Measured = "-"
			return tr
		}
		tr.Value = st.Med
		tr.Measured = fmt.Sprintf("%s (P99 %.1f ms vs %.1f ms)", ratioStr(st), r.lat(t.Scenario, c, true).Med, r.lat(against, c, true).Med)
	case "conns":
		vals := map[int]float64{}
		for _, s := range r.Samples[t.Scenario] {
			if v, have := s.Extra["upstream_conns"]; have && s.Err == "" && v >= 0 {
				vals[s.Round] = v
			}
		}
		st, valid := r.judge(&tr, vals, 0, func(x float64) bool { return x <= t.Limit })
		if !valid {
			tr.Measured = "-"
			return tr
		}
		tr.Value = st.Max
		tr.Measured = fmt.Sprintf("%.0f [%.0f .. %.0f]", st.Med, st.Min, st.Max)
	case "rss":
		m, b := r.peak(t.Scenario), r.peak(against)
		if m <= 0 || b <= 0 {
			return notMeasured()
		}
		tr.Value = m / 1e6
		tr.Measured = fmt.Sprintf("%.1f MB vs %.1f MB (VmHWM, max of rounds; anon %.1f vs %.1f)", m/1e6, b/1e6, r.peakAnon(t.Scenario)/1e6, r.peakAnon(against)/1e6)
		tr.Status = metStr(m <= b)
	case "rssmax":
		m := r.peak(t.Scenario)
		if m <= 0 {
			return notMeasured()
		}
		tr.Value = m / 1e6
		tr.Measured = fmt.Sprintf("%.1f MB VmHWM, max of rounds (of which heap and stacks, sampled: %.1f MB)", m/1e6, r.peakAnon(t.Scenario)/1e6)
		tr.Status = metStr(m <= t.Limit*1e6)
	case "anon":
		m, b := r.peakAnon(t.Scenario), r.peakAnon(against)
		if m <= 0 || b <= 0 {
			return notMeasured()
		}
		tr.Value = (m - b) / 1e6
		tr.Measured = fmt.Sprintf("%+.1f MB (anon %.1f vs %.1f, max of rounds)", (m-b)/1e6, m/1e6, b/1e6)
		tr.Status = metStr(m-b <= t.Limit*1e6)
	}
	if t.Report {
		tr.Status = "reported"
	}
	return tr
}

func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func loadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	return &r, json.Unmarshal(b, &r)
}

func (b *Bench) write() error {
	r := b.report
	base := freeBase(b.Results, reportBase(r.Date, r.Label, b.Only, b.skipped, r.Quick))
	jsonPath := filepath.Join(b.Results, base+".json")
	mdPath := filepath.Join(b.Results, base+".md")
	pngPath := filepath.Join(b.Results, base+".png")
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, js, 0o644); err != nil {
		return err
	}
	if len(r.Samples) > 0 {
		if err := drawChart(r, pngPath); err != nil {
			progress("chart: %v", err)
		}
	}
	if err := os.WriteFile(mdPath, []byte(r.markdown(filepath.Base(pngPath))), 0o644); err != nil {
		return err
	}
	progress("wrote %s, %s and %s", rel(b.Root, mdPath), rel(b.Root, pngPath), rel(b.Root, jsonPath))
	if err := writeIndex(b.Results); err != nil {
		return err
	}
	for _, t := range r.Targets {
		progress("  %-48s %-28s %-40s %s", t.Name, t.Goal, t.Measured, strings.ToUpper(t.Status))
	}
	return nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func fmtStat(s Stat, f string) string {
	if !s.valid() {
		return "-"
	}
	return fmt.Sprintf(f+" ["+f+"-"+f+"]", s.Med, s.Min, s.Max)
}

func (r *Report) markdown(png string) string {
	var w strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&w, format+"\n", a...) }
	mode := ""
	if r.Quick {
		mode = " (QUICK mode: short and single-round, indicative only)"
	}
	p("# Gateway benchmark, %s%s", r.Date, mode)
	p("")
	p("Made by `%s` from %s to %s UTC (commit %s). Method: [bench/README.md](../README.md).",
		r.Command, r.Started.Format("15:04"), r.Finished.Format("15:04"), r.Versions["commit"])
	p("")
	if r.Note != "" {
		p("> **Note:** %s", r.Note)
		p("")
	}
	p("Machine: %s, %s cores, %s, kernel %s; load average before %s, after %s.",
		r.Machine["cpu"], r.Machine["cores"], r.Machine["memory"], r.Machine["kernel"], r.Machine["load_before"], r.Machine["load_after"])
	if t := r.timeLine(); t != "" {
		p("%s", t)
	}
	p("Proxy under test pinned to core %s; wrk (1 thread), the backend (nginx) and the helper services on core %s. "+
		"%d interleaved rounds; each scenario is started fresh per round, warmed up %g s at 50 connections, then wrk runs %g s at 300 connections. "+
		"Figures are medians over rounds, with [min-max]; a cost is 1 - (throughput / its baseline's throughput in the same round).",
		coreGateway, coreLoad, r.Rounds, r.WarmupS, r.DurationS)
	p("")
	r.stepsMarkdown(p)
	p("![throughput chart](%s)", png)
	p("")
	p("## Targets, at 300 connections (the rows over TLS: at their own load, group 3c)")
	p("")
	p("A target is **met** only when its median meets the goal and at least %d of its rounds do (%d rounds were run); **noisy** when the median meets it but fewer rounds do; **missed** when the median does not. "+
		"Only rounds in which both rows ran without error and kept their server at least %.0f%% busy on core 1 count: a proxy that was not saturated measured its load, not itself (**not saturated**). "+
		"The value of every round is in the JSON (`targets[].per_round`).", r.roundsNeeded(), r.Rounds, 100*minBusy)
	p("")
	p("| target | goal | measured: median [range] | status | gateway path (as it said) |")
	p("|---|---|---|---|---|")
	for _, t := range r.Targets {
		st := t.Status
		if t.Needed > 0 && (st == "met" || st == "noisy" || st == "missed") {
			st = fmt.Sprintf("%s (%d of %d rounds)", st, t.Meeting, len(t.PerRound))
		}
		switch t.Status {
		case "met":
			st = "**" + st + "**"
		case "missed":
			st = "**MISSED**" + strings.TrimPrefix(st, "missed")
		}
		path := t.Path
		if path == "" {
			path = "-"
		}
		p("| %s | %s | %s | %s | %s |", t.Name, t.Goal, t.Measured, st, path)
	}
	p("")
	p("*Gateway path*: for a row configured with the fast path's listener wrapper (`apigate`), which path served it, as the gateway said: its `fast path on` / `fast path off` log line at config load (with the reason) and its `gateway_fastpath_requests_total` counter over the measured runs. " +
		"A target of a row that the fast path did not serve measures Caddy's path, whatever its name says.")
	p("")
	groups := []struct{ id, title string }{
		{"bare", "1. Bare proxy"}, {"auth", "2. Authentication"}, {"duties", "3. Gateway duties, alone and together"},
		{"steps", "3b. The four steps' other rows (each step on top of the ones before it)"},
		{"tls", "3c. Over TLS 1.3: HTTP/2, and HTTP/1.1 beside it (h2load)"},
	}
	for _, g := range groups {
		var rows []Scenario
		for _, s := range r.Scenarios {
			if s.Group == g.id && len(r.Samples[s.Name]) > 0 {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		p("## %s", g.title)
		p("")
		if g.id == "tls" {
			p("Each proxy terminates TLS 1.3 with the bench's ECDSA P-256 certificate (as in the TLS part), offers h2 and http/1.1 by ALPN, and proxies to the same backend over HTTP/1.1 in clear text. "+
				"Load: h2load (one thread, core %s) for the warm-up and then for the measured run: HTTP/2 rows at %d connections x %d concurrent streams (`h2load -c%d -m%d --npn-list=h2`), HTTP/1.1 rows at %d connections (`h2load --h1`); a run whose negotiated protocol is not the row's fails. "+
				"h2load reports no latency percentiles: p99 is \"-\" (its mean is in the JSON, `mean_ms`). "+
				"HTTP/3 rows (`*-h3`): `benchtool h3load`, a closed-loop client on quic-go (Debian's h2load has no QUIC), one thread on core %s, %d connections x %d streams; it is heavier than h2load, so read their cpu_us_per_req, not their req/s. "+
				"Each proxy's every-duty row has the duties of its four-step rows (the gateway: audit HTTP, jwt_auth HS256, rbac, rate_limit, permission cached). "+
				"`gw-fast-*` rows have the apigate wrapper; `gw-caddy-*` rows are the same gateway without it; which path served a request is the gateway's to say (*served by*).",
				coreLoad, h2Conns, h2Streams, h2Conns, h2Streams, connLevels[0], coreLoad, h2Conns, h2Streams)
			p("")
		}
		p("| scenario | what | req/s | p99 ms | vs baseline | cpu_us_per_req | of which user | core0_busy | peak RSS | core 1: server / others | upstream connections | served by |")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, s := range rows {
			vs := func(c int) string {
				if s.Baseline == "" {
					return "-"
				}
				st := r.ratio(s.Name, s.Baseline, c)
				if !st.valid() {
					return "-"
				}
				return fmt.Sprintf("%s of %s", pct(st.Med), s.Baseline)
			}
			mem := r.memStr(s.Name)
			served := "-"
			if s.Server == "gateway" {
				served = pathLabel(r.Samples[s.Name])
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", s.Name, s.Label,
				fmtStat(r.rps(s.Name, r.level(s.Name)), "%.0f"), fmtStat(r.lat(s.Name, r.level(s.Name), true), "%.1f"),
				vs(r.level(s.Name)), fmtStat(r.cpuPerReq(s.Name), "%.1f"), fmtStat(r.cpuUserPerReq(s.Name), "%.1f"), fmtStat(r.core0(s.Name), "%.2f"), mem, r.coreStr(s.Name), r.upstreamStr(s.Name), served)
		}
		p("")
		p("cpu_us_per_req: the proxy's own CPU time (user + system of its processes, from /proc) over the measured run, divided by the requests completed, in µs: what a request costs it, valid whether or not it was saturated; of which user: its user-space part (the rest is the kernel's: system calls and the loopback network stack), where engines that make the same system calls differ. " +
			"core0_busy: the busy share of core 0 (wrk, the backend, the helper services); near 1, req/s measured the load side, and only cpu_us_per_req compares the proxies.")
		p("")
		at := "All at 300 connections."
		if g.id == "tls" {
			at = fmt.Sprintf("HTTP/2 and HTTP/3 rows at %d connections x %d streams, HTTP/1.1 rows at %d connections.", h2Conns, h2Streams, connLevels[0])
		}
		p("%s Core 1 (the proxy's core): the median share of its time the server used during the measured run, and the share other processes of the machine took; a run in which others took more than %.0f%% was run again (up to %d times). "+
			"A row marked *not saturated* had its server less than %.0f%% busy in at least one round: it was limited by the load (wrk and the backend on core 0), not by itself, and those rounds count toward no target. "+
			"Upstream connections: the median number of connections the proxy opened to the backend from the warm-up to the end of the run (nginx's stub_status).", at, 100*maxOthers, maxReruns, 100*minBusy)
		p("")
		p("Peak RSS is VmHWM (for nginx, master + worker); \"anon\" is the sampled peak of anonymous memory (heap and stacks), i.e. without the pages of the mapped executable, which are most of an idle Caddy's resident set.")
		p("")
		for _, s := range rows {
			for _, bug := range pathProblems(r.Samples[s.Name]) {
				p("- %s, **bench bug**: the row's plan and the gateway disagree on the path: %s", s.Name, bug)
			}
			for _, smp := range r.Samples[s.Name] {
				if smp.Err != "" {
					p("- %s, round %d: **error**: %s", s.Name, smp.Round, oneLine(smp.Err))
				}
				for _, c := range s.Levels() {
					if wr, ok := smp.At[c]; ok && (wr.Non2xx > 0 || wr.Errors > 0) {
						p("- %s, round %d, %d connections: %d non-2xx responses, %d socket errors (round excluded)", s.Name, smp.Round, c, wr.Non2xx, wr.Errors)
					}
				}
			}
		}
		p("")
	}
	r.checks(p)
	if d := r.Discovery; d != nil {
		d.markdown(p)
	}
	if o := r.Ops; o != nil {
		o.markdown(p)
	}
	r.extrasMarkdown(p)
	if len(r.Profiles) > 0 {
		p("## Profiles of missed targets")
		p("")
		p("Taken from the gateway's admin endpoint (`/debug/pprof/profile`, 8 s CPU; `/debug/pprof/heap`) while the scenario ran again under wrk at 300 connections; `go tool pprof -top` of the gateway binary. The profiles are kept in bench/work/profiles/.")
		p("")
		for _, pr := range r.Profiles {
			p("### %s (%s)", pr.Scenario, pr.Kind)
			p("")
			if pr.Err != "" {
				p("Profile failed: %s", pr.Err)
				p("")
				continue
			}
			p("```")
			p("%s", strings.TrimRight(pr.Top, "\n"))
			p("```")
			p("")
		}
	}
	if len(r.NotRun) > 0 {
		p("## Not measured")
		p("")
		for _, n := range r.NotRun {
			p("- %s", n)
		}
		p("")
	}
	if para := r.readmeParagraph(); para != "" {
		p("## For the README")
		p("")
		p("The four steps with only the figures this report can stand behind (measured in at least %d rounds with the server saturated), for the README's benchmark paragraph:", r.roundsNeeded())
		p("")
		p("> %s", para)
		p("")
	}
	if r.Traefik != nil {
		r.traefikMarkdown(p)
	}
	p("## Versions")
	p("")
	for _, k := range sortedKeys(r.Versions) {
		p("- %s: `%s`", k, r.Versions[k])
	}
	return w.String()
}

// checks prints the counters that show each duty really worked.
func (r *Report) checks(p func(string, ...any)) {
	var lines []string
	for _, s := range r.Scenarios {
		if s.Server != "gateway" && !(s.Server == "traefik" && s.Conf.Perm != "") {
			continue
		}
		req := r.requests(s.Name) // completed responses, as wrk counts them
		if req == 0 {
			continue
		}
		if s.Conf.JWT != "" {
			h, m := r.extra(s.Name, "gateway_jwt_cache_hits_total"), r.extra(s.Name, "gateway_jwt_cache_misses_total")
			if h+m > 0 {
				lines = append(lines, fmt.Sprintf("%s: verified-token cache hit ratio %.1f%% (%0.f hits, %0.f misses)", s.Name, 100*h/(h+m), h, m))
			}
		}
		if s.Conf.Perm != "" {
			if c := r.extra(s.Name, "permission_calls"); !math.IsNaN(c) {
				lines = append(lines, fmt.Sprintf("%s: %.0f permission service calls for %.0f requests (%.3f per request)", s.Name, c, req, c/req))
			}
		}
		if s.Conf.AuditSink != "" {
			if e := r.extra(s.Name, "audit_events_received"); !math.IsNaN(e) {
				enq, sent := r.extra(s.Name, "gateway_audit_events_enqueued_total"), r.extra(s.Name, "gateway_audit_events_sent_total")
				spooled, dropped := r.extra(s.Name, "gateway_audit_events_spooled_total"), r.extra(s.Name, "gateway_audit_events_dropped_total")
				lines = append(lines, fmt.Sprintf("%s: %.0f audit events reached the %s during the %.0f requests of the runs (%.1f%%); the gateway's own counters over the same time: %.0f enqueued, %.0f sent, %.0f spooled to disk, %.0f dropped",
					s.Name, e, map[bool]string{true: "NATS server (its in_msgs, JetStream API calls included)", false: "HTTP receiver"}[strings.HasPrefix(s.Conf.AuditSink, "nats")], req, 100*e/req,
					enq, sent, spooled, dropped))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	p("## Checks that each duty did its work")
	p("")
	p("Counted over the measured runs (after the warm-up). Request counts are wrk's completed responses; requests still in flight when wrk stops reach the gateway but are not counted, so per-request figures can exceed 1 at 300 connections.")
	p("")
	for _, l := range lines {
		p("- %s", l)
	}
	p("")
}
