package main

import (
	"fmt"
	"math"
	"strings"
)

// The four steps, the comparison users read first (issue 26): for the
// gateway and the peers users would otherwise pick, the bare proxy, then
// JWT, then roles, rate limit, permission check and audit, each on top of
// the steps before it that the peer can do, then discovery. A duty a peer
// cannot do is a cell that says so. `bench/run` with ONLY=steps runs just
// the rows of this table and the discovery part.

// stepCols are the table's throughput columns.
var stepCols = []string{"bare", "+ JWT", "+ roles", "+ rate limit", "+ permission", "+ audit"}

// stepCell is one peer at one step: the scenario that measures it, or
// (Scenario "") why the peer cannot do it; How says how the peer does it.
type stepCell struct {
	Scenario string
	How      string
}

// stepPeer is one row of the table.
type stepPeer struct {
	Name  string
	Cells []stepCell // one per stepCols
	// Disc names the discovery series (DiscoveryResult.series); DiscNote
	// is shown when the peer has none.
	Disc     []string
	DiscNote string
}

func stepTable() []stepPeer {
	return []stepPeer{
		{Name: "gateway (apigate wrapper: the fast path where it is on)", Cells: []stepCell{
			{"gw-fast", "reverse_proxy, transport h1"},
			{"gw-fast-jwt-hs256", "jwt_auth HS256 (built in)"},
			{"gw-fast-rbac", "rbac on the verified claims (built in)"},
			{"gw-fast-steps-rl", "rate_limit per user (built in)"},
			{"gw-fast-steps-perm", "permission service, decisions cached (built in)"},
			{"gw-fast-all", "audit to an HTTP sink, batched (built in)"},
		}, Disc: []string{"gateway"}},
		{Name: "Traefik " + traefikVersion, Cells: []stepCell{
			{"traefik", "file provider, upstream keep-alive"},
			{"traefik-fwdauth-hs256", "ForwardAuth to the auth service on every request (bolted on)"},
			{"", "cannot: Traefik reads no token claims (the auth service would have to decide)"},
			{"traefik-steps-rl", "rateLimit middleware per user (X-User-Id from the auth service)"},
			{"traefik-steps-perm", "a second ForwardAuth, to the permission service, on every request (Traefik cannot cache it)"},
			{"", "cannot: its access log goes to a file or stdout; no audit sink"},
		}, Disc: []string{"traefik", "traefik-0"}},
		{Name: "nginx 1.22", Cells: []stepCell{
			{"nginx", "proxy_pass, upstream keepalive"},
			{"nginx-authreq-hs256", "auth_request to the auth service on every request (bolted on)"},
			{"", "cannot: open-source nginx reads no token claims"},
			{"nginx-steps-rl", "limit_req per token"},
			{"", "cannot: one auth_request per location, and it is taken by the JWT check"},
			{"", "cannot: access_log to a file or syslog; no audit sink"},
		}, DiscNote: "none (no label discovery)"},
		{Name: "HAProxy 2.6", Cells: []stepCell{
			{"haproxy", "http-reuse always"},
			{"haproxy-jwt-hs256", "jwt_verify (built in)"},
			{"haproxy-steps-rbac", "ACLs on the verified token's roles (built in; its JSON query returns no arrays, so the first four elements one by one)"},
			{"haproxy-steps-rl", "stick table per user (built in)"},
			{"", "cannot without Lua or SPOE: no external call"},
			{"", "cannot: logs to syslog; no audit sink"},
		}, DiscNote: "none (no label discovery)"},
	}
}

// stepScenarios are the scenarios the table needs (ONLY=steps).
func stepScenarios() []string {
	var out []string
	for _, p := range stepTable() {
		for _, c := range p.Cells {
			if c.Scenario != "" {
				out = append(out, c.Scenario)
			}
		}
	}
	return out
}

// StepFigure is one measured cell: throughput and its cost against the
// peer's bare rate, and whether it may be quoted: measured in enough
// rounds (4 of 5) with the server saturated, as a target is met.
type StepFigure struct {
	RPS      Stat
	Cost     Stat // 1 - rps/bare, round by round (bare's own cell: none)
	Rounds   int  // rounds that count: no error, server saturated (and, for a cost, bare too)
	Needed   int
	Quotable bool
	Path     string // gateway cells: the path that served it
}

// stepFigure measures one cell of a peer.
func (r *Report) stepFigure(name, bare string) StepFigure {
	f := StepFigure{Needed: r.roundsNeeded(), Cost: stat(nil)}
	f.RPS = r.rps(name, 300)
	for _, s := range r.Samples[name] {
		if s.ok(300) && s.Saturated {
			f.Rounds++
		}
	}
	if name != bare {
		// the cost from every round both measured; quotable only from the
		// rounds in which both were saturated
		ratio := r.ratio(name, bare, 300)
		f.Cost = Stat{1 - ratio.Med, 1 - ratio.Max, 1 - ratio.Min}
		vals, _ := r.pairs(name, bare, 300, func(a, b Sample) float64 { return 0 })
		f.Rounds = len(vals)
	}
	f.Quotable = f.Rounds >= f.Needed && f.RPS.valid()
	if s, ok := r.scenario(name); ok && s.Server == "gateway" {
		f.Path = pathLabel(r.Samples[name])
	}
	return f
}

func (f StepFigure) cell() string {
	if !f.RPS.valid() {
		return "not measured"
	}
	out := fmt.Sprintf("%.0f req/s", f.RPS.Med)
	if f.Cost.valid() {
		out += fmt.Sprintf("<br>%+.1f%%", -100*f.Cost.Med)
	}
	if !f.Quotable {
		out += fmt.Sprintf("<br>*(%d saturated rounds, %d needed: not quotable)*", f.Rounds, f.Needed)
	}
	if f.Path != "" && !strings.HasPrefix(f.Path, "fast path") {
		out += "<br>*" + f.Path + "*"
	}
	return out
}

// stepsMarkdown writes the four-step table (when the run measured any of
// it).
func (r *Report) stepsMarkdown(p func(string, ...any)) {
	any := false
	for _, n := range stepScenarios() {
		if len(r.Samples[n]) > 0 {
			any = true
		}
	}
	if !any {
		return
	}
	p("## The four steps: bare, + JWT, + roles, limits, permissions and audit, + discovery")
	p("")
	p("Requests per second on one core at 300 connections (median of the rounds), and below each figure its cost as the change from that peer's own bare rate, round by round. "+
		"Each step is on top of the steps before it that the peer can do; a duty a peer cannot do says so, and how each peer does the others is listed under the table. "+
		"A figure is quotable only when at least %d rounds measured it with its server saturated (as a target is met). "+
		"Discovery: add / remove p50 from the discovery part (from the `podman` command returning to the first request routed, and to the proxy's own no-route answer).", r.roundsNeeded())
	p("")
	head := "| peer |"
	sep := "|---|"
	for _, c := range stepCols {
		head += " " + c + " |"
		sep += "---|"
	}
	p("%s discovery add / remove p50 |", head)
	p("%s---|", sep)
	for _, peer := range stepTable() {
		row := "| " + peer.Name + " |"
		bare := peer.Cells[0].Scenario
		for _, c := range peer.Cells {
			if c.Scenario == "" {
				row += " " + strings.SplitN(c.How, ":", 2)[0] + " |"
				continue
			}
			row += " " + r.stepFigure(c.Scenario, bare).cell() + " |"
		}
		p("%s %s |", row, r.discCell(peer))
	}
	p("")
	for _, peer := range stepTable() {
		var hows []string
		for i, c := range peer.Cells {
			name := c.Scenario
			if name == "" {
				name = "-"
			}
			hows = append(hows, fmt.Sprintf("%s: %s (`%s`)", stepCols[i], c.How, name))
		}
		p("- **%s**: %s.", peer.Name, strings.Join(hows, "; "))
	}
	p("")
}

// discCell is a peer's discovery figures: add / remove p50 of each of its
// series.
func (r *Report) discCell(peer stepPeer) string {
	if len(peer.Disc) == 0 {
		return peer.DiscNote
	}
	d := r.Discovery
	if d == nil {
		return "not measured"
	}
	var parts []string
	for _, key := range peer.Disc {
		s := d.series(key)
		if s == nil {
			continue
		}
		if s.Err != "" {
			parts = append(parts, s.Name+": not run")
			continue
		}
		a, rm := stat(s.Add), stat(s.Remove)
		txt := msOr(a.Med) + " / " + msOr(rm.Med)
		if s.Path != "" && s.Path != "fast path" {
			txt += "<br>*" + s.Path + "*"
		}
		if len(peer.Disc) > 1 {
			// the series' own words: "Traefik ... (default throttle, 2 s)"
			label := s.Name
			if i := strings.Index(label, "("); i >= 0 {
				label = strings.TrimSuffix(label[i+1:], ")")
			}
			txt = label + ": " + txt
		}
		parts = append(parts, txt)
	}
	if len(parts) == 0 {
		return "not measured"
	}
	return strings.Join(parts, "<br>")
}

// readmeParagraph is the four steps in a sentence per peer, with only the
// quotable figures, for the README's benchmark paragraph.
func (r *Report) readmeParagraph() string {
	var peers []string
	for _, peer := range stepTable() {
		bare := peer.Cells[0].Scenario
		var figs []string
		for i, c := range peer.Cells {
			if c.Scenario == "" {
				continue
			}
			f := r.stepFigure(c.Scenario, bare)
			if !f.Quotable {
				continue
			}
			txt := fmt.Sprintf("%s %.1fk", stepCols[i], f.RPS.Med/1000)
			if f.Cost.valid() && !math.IsNaN(f.Cost.Med) {
				txt += fmt.Sprintf(" (%+.0f%%)", -100*f.Cost.Med)
			}
			if f.Path != "" && !strings.HasPrefix(f.Path, "fast path") {
				txt += " on Caddy's path"
			}
			figs = append(figs, txt)
		}
		if len(figs) > 0 {
			peers = append(peers, peer.Name+": "+strings.Join(figs, ", "))
		}
	}
	if len(peers) == 0 {
		return ""
	}
	return fmt.Sprintf("Requests per second on one core, 300 connections (%s): %s.", r.Date, strings.Join(peers, "; "))
}
