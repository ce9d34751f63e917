package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Run is the whole benchmark.
func (b *Bench) Run(containers int, skip, note string) error {
	b.started = time.Now()
	var err error
	if b.Root, err = filepath.Abs(b.Root); err != nil {
		return err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(b.Root, p)
	}
	b.Gateway, b.Caddy, b.CDP, b.CtrServer = abs(b.Gateway), abs(b.Caddy), abs(b.CDP), abs(b.CtrServer)
	b.Traefik, b.FastProxy = abs(b.Traefik), abs(b.FastProxy)
	b.Work = filepath.Join(b.Root, "bench", "work")
	b.Results = filepath.Join(b.Root, "bench", "results")
	b.confDir = filepath.Join(b.Work, "conf")
	b.logDir = filepath.Join(b.Work, "logs")
	for _, d := range []string{b.confDir, b.logDir, b.Results, filepath.Join(b.Work, "caddyhome")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if b.Tool, err = os.Executable(); err != nil {
		return err
	}
	skips := map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !isPart(s) {
				return fmt.Errorf("unknown part %q in -skip (parts: %s)", s, strings.Join(parts, ", "))
			}
			skips[s] = true
			b.skipped = append(b.skipped, s)
		}
	}
	// -only: scenario names select load scenarios; part names select parts
	// (and leave out the parts not named).
	onlyParts, onlyScen := map[string]bool{}, map[string]bool{}
	stepsOnly := false // ONLY=steps: the table, without profiles
	for _, n := range strings.Split(b.Only, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case n == "steps":
			// the four-step table: its rows and the discovery part
			for _, sc := range stepScenarios() {
				onlyScen[sc] = true
			}
			onlyParts["load"], onlyParts["discovery"] = true, true
			stepsOnly = true
		case n == "fastduties":
			// every duty's cost on the fast path (issue 24), opt-in rows
			// included, with the rows they are costs against
			for _, sc := range scenarios() {
				if sc.Server == "gateway" && sc.Conf.FastPath && sc.Proto == "" {
					onlyScen[sc.Name] = true
				}
			}
			onlyParts["load"] = true
		case n == "h2":
			// the rows over TLS 1.3 (issue 36): HTTP/2 bare and every
			// duty for each proxy, HTTP/1.1 over TLS beside them
			for _, sc := range scenarios() {
				if sc.Proto != "" {
					onlyScen[sc.Name] = true
				}
			}
			onlyParts["load"] = true
		case isPart(n):
			onlyParts[n] = true
		default:
			if _, ok := scenarioByName(n); !ok {
				return fmt.Errorf("-only: %q is neither a scenario, nor a part, nor steps, fastduties or h2 (parts: %s)", n, strings.Join(parts, ", "))
			}
			onlyScen[n] = true
			onlyParts["load"] = true
		}
	}
	run := func(part string) bool {
		if skips[part] {
			b.report.NotRun = append(b.report.NotRun, part+": skipped by -skip "+part)
			return false
		}
		if len(onlyParts) > 0 && !onlyParts[part] && !(part == "profile" && onlyParts["load"] && !stepsOnly) {
			return false
		}
		return true
	}
	for _, bin := range []string{b.Gateway, b.Caddy} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("missing binary %s (bench/run builds it)", bin)
		}
	}
	for _, l := range []string{"rotate-tokens.lua", "rotate-paths.lua", "openapi.yaml"} {
		src, err := os.ReadFile(filepath.Join(b.Root, "bench", "configs", l))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(b.Work, l), src, 0o644); err != nil {
			return err
		}
	}

	stopOnSignal()
	defer stopAll()

	r := &Report{
		Date: b.started.UTC().Format("2006-01-02"), Started: b.started.UTC(), Quick: b.Quick, Label: b.Label,
		Rounds: b.Rounds, DurationS: b.Dur.Seconds(), WarmupS: b.Warmup.Seconds(), Note: note,
		Command: os.Getenv("BENCH_COMMAND"), Samples: map[string][]Sample{},
	}
	if r.Command == "" {
		r.Command = "bench/run"
	}
	b.report = r
	r.Machine = machineInfo()
	r.Versions = b.versions()
	r.Traefik = b.traefikBuild()
	progress("machine: %s, %s cores, load %s", r.Machine["cpu"], r.Machine["cores"], r.Machine["load_before"])

	if b.Keys, err = loadOrCreateKeys(filepath.Join(b.Work, "keys")); err != nil {
		return err
	}
	b.tokens, b.pools = map[string]string{}, map[string]string{}
	for _, alg := range []string{"HS256", "RS256"} {
		t, err := b.Keys.Sign(alg, "bench-user", time.Now())
		if err != nil {
			return err
		}
		b.tokens[alg] = t
	}
	poolSize := map[string]int{"HS256": 100000, "RS256": 30000}
	for _, alg := range []string{"HS256", "RS256"} {
		p, err := b.Keys.tokenPool(alg, poolSize[alg])
		if err != nil {
			return err
		}
		b.pools[alg] = p
		first, err := firstLine(p)
		if err != nil {
			return err
		}
		b.tokens[alg+"-pool0"] = first
	}
	r.PoolSizes = poolSize

	// a run takes every scenario that is not opt-in (b.All: every one), or
	// those -only names
	var list []Scenario
	for _, s := range scenarios() {
		switch {
		case len(onlyScen) > 0 && onlyScen[s.Name], len(onlyScen) == 0 && (!s.OptIn || b.All):
			list = append(list, s)
		case len(onlyScen) == 0 && !skips["load"] && (len(onlyParts) == 0 || onlyParts["load"]):
			also := ""
			if s.Proto != "" {
				also = " or ONLY=h2"
			} else if s.Server == "gateway" && s.Conf.FastPath {
				also = " or ONLY=fastduties"
			}
			r.NotRun = append(r.NotRun, fmt.Sprintf("%s (%s): an opt-in row, left out of the default run to keep it under 45 minutes; ALL=1, ONLY=%s%s runs it", s.Name, s.Label, s.Name, also))
		}
	}
	r.Scenarios = list
	for _, s := range list {
		if s.Proto != "" {
			if b.tlsCert, b.tlsKey, b.tlsPem, err = b.tlsFiles(); err != nil {
				return fmt.Errorf("the TLS rows' certificate: %v", err)
			}
			if _, err := exec.LookPath("h2load"); err != nil {
				return fmt.Errorf("%s is loaded by h2load, which is not installed (Debian package nghttp2-client; scripts/install-deps bench installs it)", s.Name)
			}
			break
		}
	}

	progress("starting backend, auth, permission and audit services and nats-server on core %s", coreLoad)
	if err := b.startServices(); err != nil {
		return err
	}
	defer b.stopServices()

	// timed records how long each part took (the full run must stay under
	// 45 minutes: the report shows where the time went)
	timed := func(part string, f func()) {
		t0 := time.Now()
		f()
		r.PartSeconds = append(r.PartSeconds, PartTime{part, time.Since(t0).Seconds()})
	}
	loaded := run("load") && len(list) > 0
	if loaded {
		timed("load", func() { b.loadRounds(list) })
	}
	r.evaluate()
	if loaded && run("profile") {
		timed("profile", b.profiles)
	}
	for _, p := range []struct {
		name string
		f    func()
	}{{"tls", b.tlsPart}, {"gzip", b.gzipPart}, {"scaling", b.scalingPart}, {"latency", b.latencyPart},
		{"breaker", b.breaker}, {"idle", b.idlePart}, {"slowloris", b.slowlorisPart}, {"ops", b.operations}} {
		if run(p.name) {
			timed(p.name, p.f)
		}
	}
	b.stopServices()
	if run("discovery") {
		timed("discovery", func() { b.discovery(containers) })
	}
	r.evaluate()
	r.Finished = time.Now().UTC()
	r.Machine["load_after"] = loadAvg()
	return b.write()
}

// loadRounds runs every scenario once per round; each round starts at a
// different place in the list, so no scenario always runs first or last.
func (b *Bench) loadRounds(list []Scenario) {
	index := map[string]int{}
	for i, s := range list {
		index[s.Name] = i
	}
	perRun := b.Warmup + time.Duration(len(connLevels))*b.Dur + 2*time.Second
	total := time.Duration(b.Rounds*len(list)) * perRun
	progress("%d scenarios x %d rounds x %d connection levels x %s: about %s", len(list), b.Rounds, len(connLevels), b.Dur, total.Round(time.Second))
	done := 0
	t0 := time.Now()
	for round := 1; round <= b.Rounds; round++ {
		shift := ((round - 1) * len(list) / b.Rounds)
		for k := range list {
			s := list[(k+shift)%len(list)]
			smp := b.runScenario(s, index[s.Name], round)
			// a run during which other processes took core 1 measured them
			for smp.Err == "" && smp.CoreOthers > maxOthers && smp.Reruns < maxReruns {
				progress("round %d/%d %s: other processes took %.0f%% of core 1; running it again", round, b.Rounds, s.Name, 100*smp.CoreOthers)
				n := smp.Reruns + 1
				smp = b.runScenario(s, index[s.Name], round)
				smp.Reruns = n
			}
			b.report.Samples[s.Name] = append(b.report.Samples[s.Name], smp)
			done++
			eta := time.Duration(float64(time.Since(t0)) / float64(done) * float64(b.Rounds*len(list)-done))
			if smp.Err != "" {
				progress("round %d/%d [%2d/%d] %-24s ERROR: %s", round, b.Rounds, k+1, len(list), s.Name, oneLine(smp.Err))
				continue
			}
			var parts []string
			for _, c := range s.Levels() {
				w := smp.At[c]
				bad := ""
				if w.Non2xx > 0 || w.Errors > 0 {
					bad = fmt.Sprintf(" (!%d non-2xx, %d errors)", w.Non2xx, w.Errors)
				}
				parts = append(parts, fmt.Sprintf("c%d %7.0f rps p99 %6.1fms%s", c, w.RPS, w.P99ms, bad))
			}
			mem := ""
			if smp.PeakRSS > 0 {
				mem = fmt.Sprintf("  peak %5.1f MB", float64(smp.PeakRSS)/1e6)
			}
			sat := ""
			if !smp.Saturated {
				sat = "  NOT SATURATED"
			}
			progress("round %d/%d [%2d/%d] %-24s %s%s  core1 %2.0f%% others %2.0f%%%s  (eta %s)", round, b.Rounds, k+1, len(list), s.Name, strings.Join(parts, " | "), mem, 100*smp.CoreOurs, 100*smp.CoreOthers, sat, eta.Round(time.Second))
		}
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func firstLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	l, _, _ := strings.Cut(string(b), "\n")
	return l, nil
}

func machineInfo() map[string]string {
	m := map[string]string{"cores": fmt.Sprint(runtime.NumCPU()), "load_before": loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		m["memory"] = strings.Join(strings.Fields(l)[1:], " ")
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (b *Bench) versions() map[string]string {
	v := map[string]string{}
	run := func(name string, argv ...string) {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			v[name] = "unavailable"
			return
		}
		l := strings.TrimSpace(string(out))
		l, _, _ = strings.Cut(l, "\n")
		v[name] = l
	}
	run("gateway", b.Gateway, "version")
	run("caddy", b.Caddy, "version")
	run("caddy-docker-proxy", b.CDP, "version")
	run("traefik", b.Traefik, "version")
	run("nginx", "nginx", "-v")
	run("haproxy", "haproxy", "-v")
	run("wrk", "wrk", "--version")
	run("h2load", "h2load", "--version")
	run("nats-server", "nats-server", "--version")
	run("podman", "podman", "--version")
	run("go", "go", "version")
	if out, err := exec.Command("git", "-C", b.Root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		v["commit"] = strings.TrimSpace(string(out))
	}
	return v
}

// Every process this tool starts is stopped on exit, also on Ctrl-C.
var (
	live   = map[*Proc]bool{}
	liveMu = make(chan struct{}, 1)
)

func track(p *Proc)   { liveMu <- struct{}{}; live[p] = true; <-liveMu }
func untrack(p *Proc) { liveMu <- struct{}{}; delete(live, p); <-liveMu }

func stopAll() {
	liveMu <- struct{}{}
	var ps []*Proc
	for p := range live {
		ps = append(ps, p)
	}
	<-liveMu
	for _, p := range ps {
		p.Stop(2 * time.Second)
	}
}

func stopOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-ch
		progress("%v: stopping everything this run started", s)
		stopAll()
		cleanupPodman()
		os.Exit(130)
	}()
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// parts are the parts of a run, in the order they run (-skip and -only
// take these names).
var parts = []string{"load", "profile", "tls", "gzip", "scaling", "latency", "breaker", "idle", "slowloris", "ops", "discovery"}

func isPart(s string) bool {
	for _, p := range parts {
		if p == s {
			return true
		}
	}
	return false
}
