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
	Rounds    int                 `json:"rounds"`
	DurationS float64             `json:"duration_s"`
	WarmupS   float64             `json:"warmup_s"`
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
	NotRun    []string            `json:"not_run,omitempty"`
}

// TargetResult is a target beside its measured figure.
type TargetResult struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"`
	Status   string  `json:"status"` // met | missed | reported | not measured
	Scenario string  `json:"scenario,omitempty"`
	Value    float64 `json:"value"`
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

func (r *Report) lat(name string, conns int, p99 bool) Stat {
	var v []float64
	for _, s := range r.Samples[name] {
		if s.ok(conns) {
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
	return fmt.Sprintf("%.0f%% / %.0f%%", 100*stat(ours).Med, 100*stat(others).Med)
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
	const c = 300
	for _, t := range targets() {
		tr := TargetResult{Name: t.Name, Scenario: t.Scenario}
		sc, _ := scenarioByName(t.Scenario)
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
		case "p99", "conns", "rss":
			out = append(out, r.evaluateOther(t, tr, against, ok))
			continue
		}
		st := r.ratio(t.Scenario, against, c)
		if !ok || !st.valid() {
			tr.Measured, tr.Status = "-", "not measured"
			out = append(out, tr)
			continue
		}
		switch t.Kind {
		case "cost":
			tr.Value = 1 - st.Med
			tr.Measured = costStr(st)
			tr.Status = metStr(tr.Value <= t.Limit)
		case "ratio":
			tr.Value = st.Med
			if t.Limit >= 1 {
				tr.Measured = ratioStr(st)
			} else {
				tr.Measured = fmt.Sprintf("%s [%s .. %s]", pct(st.Med), pct(st.Min), pct(st.Max))
			}
			tr.Status = metStr(tr.Value >= t.Limit)
		}
		if t.Report {
			tr.Status = "reported"
		}
		out = append(out, tr)
	}
	// memory
	mem := TargetResult{Name: "peak memory, all duties, 300 connections", Goal: "<= 80 MB", Scenario: "gw-all"}
	if m := r.peak("gw-all"); m > 0 {
		mem.Value = m / 1e6
		mem.Measured = fmt.Sprintf("%.1f MB VmHWM, max of rounds (of which heap and stacks, sampled: %.1f MB)", m/1e6, r.peakAnon("gw-all")/1e6)
		mem.Status = metStr(m <= 80e6)
	} else {
		mem.Measured, mem.Status = "-", "not measured"
	}
	out = append(out, mem)
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
	const c = 300
	notMeasured := func() TargetResult {
		tr.Measured, tr.Status = "-", "not measured"
		return tr
	}
	if !ok {
		return notMeasured()
	}
	switch t.Kind {
	case "p99":
		tr.Goal = fmt.Sprintf("<= %.1fx %s's P99", t.Limit, against)
		base := map[int]float64{}
		for _, s := range r.Samples[against] {
			if s.ok(c) {
				base[s.Round] = s.At[c].P99ms
			}
		}
		var v []float64
		for _, s := range r.Samples[t.Scenario] {
			if b, have := base[s.Round]; have && b > 0 && s.ok(c) {
				v = append(v, s.At[c].P99ms/b)
			}
		}
		st := stat(v)
		if !st.valid() {
			return notMeasured()
		}
		tr.Value = st.Med
		tr.Measured = fmt.Sprintf("%s (P99 %.1f ms vs %.1f ms)", ratioStr(st), r.lat(t.Scenario, c, true).Med, r.lat(against, c, true).Med)
		tr.Status = metStr(st.Med <= t.Limit)
	case "conns":
		tr.Goal = fmt.Sprintf("<= %.0f (the client connections), warm-up and both loads", t.Limit)
		var most float64 = -1
		for _, s := range r.Samples[t.Scenario] {
			if v, have := s.Extra["upstream_conns"]; have && s.Err == "" && v > most {
				most = v
			}
		}
		if most < 0 {
			return notMeasured()
		}
		tr.Value = most
		tr.Measured = fmt.Sprintf("%.0f, most of any round", most)
		tr.Status = metStr(most <= t.Limit)
	case "rss":
		tr.Goal = "<= " + against + "'s"
		m, b := r.peak(t.Scenario), r.peak(against)
		if m <= 0 || b <= 0 {
			return notMeasured()
		}
		tr.Value = m / 1e6
		tr.Measured = fmt.Sprintf("%.1f MB vs %.1f MB (VmHWM, max of rounds; anon %.1f vs %.1f)", m/1e6, b/1e6, r.peakAnon(t.Scenario)/1e6, r.peakAnon(against)/1e6)
		tr.Status = metStr(m <= b)
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
	base := r.Date
	if r.Quick {
		base += "-quick"
	}
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
	p("Proxy under test pinned to core %s; wrk (1 thread), the backend and the helper services on core %s. "+
		"%d interleaved rounds; each scenario is started fresh per round, warmed up %gs, then wrk runs %gs at 50 and %gs at 300 connections. "+
		"Figures are medians over rounds, with [min-max]; a cost is 1 - (throughput / its baseline's throughput in the same round).",
		coreGateway, coreLoad, r.Rounds, r.WarmupS, r.DurationS, r.DurationS)
	p("")
	p("![throughput chart](%s)", png)
	p("")
	p("## Targets (issue 7), at 300 connections")
	p("")
	p("| target | goal | measured: median [range] | status |")
	p("|---|---|---|---|")
	for _, t := range r.Targets {
		st := t.Status
		switch st {
		case "met":
			st = "**met**"
		case "missed":
			st = "**MISSED**"
		}
		p("| %s | %s | %s | %s |", t.Name, t.Goal, t.Measured, st)
	}
	p("")
	groups := []struct{ id, title string }{
		{"bare", "1. Bare proxy"}, {"auth", "2. Authentication"}, {"duties", "3. Gateway duties, alone and together"},
	}
	for _, g := range groups {
		var rows []Scenario
		for _, s := range r.Scenarios {
			if s.Group == g.id {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		p("## %s", g.title)
		p("")
		p("| scenario | what | req/s @50 | p99 ms @50 | req/s @300 | p99 ms @300 | vs baseline @50 | vs baseline @300 | peak RSS | core 1: server / others |")
		p("|---|---|---|---|---|---|---|---|---|---|")
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
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", s.Name, s.Label,
				fmtStat(r.rps(s.Name, 50), "%.0f"), fmtStat(r.lat(s.Name, 50, true), "%.1f"),
				fmtStat(r.rps(s.Name, 300), "%.0f"), fmtStat(r.lat(s.Name, 300, true), "%.1f"),
				vs(50), vs(300), mem, r.coreStr(s.Name))
		}
		p("")
		p("Core 1 (the proxy's core): the median share of its time the server used during the measured runs, and the share other processes of the machine took (0%% on an idle machine; more means the figures of that row are depressed by foreign load).")
		p("")
		p("Peak RSS is VmHWM (for nginx, master + worker); \"anon\" is the sampled peak of anonymous memory (heap and stacks), i.e. without the pages of the mapped executable, which are most of an idle Caddy's resident set.")
		p("")
		for _, s := range rows {
			for _, smp := range r.Samples[s.Name] {
				if smp.Err != "" {
					p("- %s, round %d: **error**: %s", s.Name, smp.Round, oneLine(smp.Err))
				}
				for _, c := range connLevels {
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
		if s.Server != "gateway" {
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
				lines = append(lines, fmt.Sprintf("%s: %.0f audit events reached the %s during the %.0f requests of the runs (%.1f%%%s)", s.Name, e, map[bool]string{true: "NATS server (its in_msgs, JetStream API calls included)", false: "HTTP receiver"}[strings.HasPrefix(s.Conf.AuditSink, "nats")], req, 100*e/req, map[bool]string{true: "; the rest were still queued in the gateway", false: ""}[e < 0.95*req]))
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
