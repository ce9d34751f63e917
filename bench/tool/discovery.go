package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DiscoveryResult holds the add/remove latencies of each discovering
// proxy, in milliseconds.
type DiscoveryResult struct {
	Containers int        `json:"containers"`
	Gateway    DiscSeries `json:"gateway"`
	CDP        DiscSeries `json:"caddy_docker_proxy"`
	// Traefik's Docker provider with its default throttle
	// (providersThrottleDuration 2s) and with the lowest it allows (0:
	// throttling off).
	Traefik    DiscSeries `json:"traefik"`
	Traefik0   DiscSeries `json:"traefik_throttle_0"`
	PodmanRun  []float64  `json:"podman_run_ms"`
	PodmanStop []float64  `json:"podman_stop_ms"`
	Err        string     `json:"error,omitempty"`
	Notes      []string   `json:"notes,omitempty"`
}

// DiscSeries is one proxy's latencies: from the podman command returning
// (the container is running / has stopped) to the route serving / gone.
type DiscSeries struct {
	Name     string    `json:"name"`
	Add      []float64 `json:"add_ms"`
	Remove   []float64 `json:"remove_ms"`
	AddCmd   []float64 `json:"add_from_command_start_ms"`
	RmCmd    []float64 `json:"remove_from_command_start_ms"`
	Failures []string  `json:"failures,omitempty"`
	Err      string    `json:"error,omitempty"`
	// Path: the gateway's, which path served its requests (PathInfo.Label).
	Path string `json:"path,omitempty"`
}

// series is a proxy's series by key: gateway, cdp, traefik, traefik-0.
func (d *DiscoveryResult) series(key string) *DiscSeries {
	switch key {
	case "gateway":
		return &d.Gateway
	case "cdp":
		return &d.CDP
	case "traefik":
		return &d.Traefik
	case "traefik-0":
		return &d.Traefik0
	}
	return nil
}

// all is every series, in the table's order.
func (d *DiscoveryResult) all() []*DiscSeries {
	return []*DiscSeries{&d.Gateway, &d.CDP, &d.Traefik, &d.Traefik0}
}

func (d DiscSeries) stat(kind string) Stat {
	if kind == "add" {
		return stat(d.Add)
	}
	return stat(d.Remove)
}

const (
	discGatewayPort = 19980
	discCDPPort     = 19981
	discGatewayAdm  = "localhost:2913"
	discCDPAdm      = "localhost:2912"
	discTraefikPort = 19982 // default throttle
	discTraefik0    = 19983 // throttle 0
	discFirstPort   = 29000
	// caddy-docker-proxy's default polling interval (events do the work).
	cdpPolling = 30 * time.Second
)

// discovery starts a private Podman, the gateway (docker app) and Caddy
// with caddy-docker-proxy on its socket, then starts and stops n labelled
// containers one at a time, timing when each proxy routes to (and stops
// routing to) each container.
func (b *Bench) discovery(n int) {
	d := &DiscoveryResult{Containers: n, Gateway: DiscSeries{Name: "gateway (docker app)"}, CDP: DiscSeries{Name: "caddy-docker-proxy v2.13.1"},
		Traefik:  DiscSeries{Name: "Traefik " + traefikVersion + " (default throttle, 2 s)"},
		Traefik0: DiscSeries{Name: "Traefik " + traefikVersion + " (throttle 0)"}}
	b.report.Discovery = d
	progress("discovery: private Podman, %d containers, the gateway, caddy-docker-proxy and Traefik (twice) on the same socket", n)
	pod, err := newPodman(b.CtrServer, b.logDir)
	if err != nil {
		d.Err = err.Error()
		b.report.NotRun = append(b.report.NotRun, "discovery: "+err.Error())
		progress("discovery: not run: %v", err)
		return
	}
	defer pod.close()

	// the gateway
	gwConf := filepath.Join(b.confDir, "discovery-gateway.Caddyfile")
	state := filepath.Join(b.Work, "discovery-state.json")
	os.Remove(state)
	err = os.WriteFile(gwConf, []byte(fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
	http_port %d
	log {
		level ERROR
	}
	log fastpath {
		include caddy.listeners.apigate
		level INFO
	}
	servers :%d {
		name gateway
		listener_wrappers {
			apigate
		}
	}
	docker {
		admin %s
		host %s
		server gateway
		state_file %s
	}
}

:%d {
	handle /healthz {
		respond "ok"
	}
}
`, discGatewayAdm, discGatewayPort, discGatewayPort, discGatewayAdm, pod.host(), state, discGatewayPort)), 0o644)
	if err != nil {
		d.Err = err.Error()
		return
	}
	gw, err := startPinned("discovery-gateway", "0-1", filepath.Join(b.logDir, "discovery-gateway.log"), b.caddyEnv(),
		b.Gateway, "run", "--config", gwConf, "--adapter", "caddyfile")
	if err != nil {
		d.Err = err.Error()
		return
	}
	defer gw.Stop(5 * time.Second)
	gwBase := fmt.Sprintf("http://127.0.0.1:%d", discGatewayPort)
	if err := waitStatus(gwBase+"/healthz", "", 200, 30*time.Second, gw); err != nil {
		d.Gateway.Err = "gateway did not start: " + err.Error()
	}

	// caddy-docker-proxy
	cdpBase := fmt.Sprintf("http://127.0.0.1:%d", discCDPPort)
	var cdp *Proc
	if _, err := os.Stat(b.CDP); err != nil {
		d.CDP.Err = "caddy-docker-proxy binary missing: " + b.CDP
	} else {
		cdpConf := filepath.Join(b.confDir, "discovery-cdp.Caddyfile")
		os.WriteFile(cdpConf, []byte(fmt.Sprintf(`{
	admin %s
	auto_https off
	http_port %d
}

:%d {
	handle /healthz {
		respond "ok"
	}
	# what the gateway answers when no route matches, so that a removal
	# is the same answer from both proxies
	handle {
		respond `+"`"+`{"error":"no_route"}`+"`"+` 404
	}
}
`, discCDPAdm, discCDPPort, discCDPPort)), 0o644)
		// CADDY_DOCKER_NO_SCOPE: as caddy-docker-proxy recommends for Podman;
		// with the scope filter Podman ends the event stream at once (EOF).
		env := append(b.caddyEnv(), "DOCKER_HOST="+pod.host(), "CADDY_ADMIN="+discCDPAdm, "CADDY_DOCKER_NO_SCOPE=true")
		cdp, err = startPinned("discovery-cdp", "0-1", filepath.Join(b.logDir, "discovery-cdp.log"), env,
			b.CDP, "docker-proxy", "--caddyfile-path", cdpConf, "--event-throttle-interval", "100ms", "--polling-interval", cdpPolling.String())
		if err != nil {
			d.CDP.Err = err.Error()
		} else {
			defer cdp.Stop(5 * time.Second)
			d.Notes = append(d.Notes, "caddy-docker-proxy runs with CADDY_DOCKER_NO_SCOPE=true, its documented setting for Podman: with its default scope filter (swarm, local), Podman ends the event stream at once (EOF) and it would only notice changes on its 30 s poll.")
			if err := waitStatus(cdpBase+"/healthz", "", 200, 30*time.Second, cdp); err != nil {
				d.CDP.Err = "caddy-docker-proxy did not start: " + err.Error()
			}
		}
	}

	// Traefik, twice: its Docker provider with the default throttle and
	// with throttling off
	for _, t := range []struct {
		s        *DiscSeries
		port     int
		throttle string
	}{{&d.Traefik, discTraefikPort, "2s"}, {&d.Traefik0, discTraefik0, "0s"}} {
		p, err := b.startDiscoveryTraefik(pod.host(), t.port, t.throttle)
		if err != nil {
			t.s.Err = err.Error()
			continue
		}
		defer p.Stop(5 * time.Second)
		if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", t.port), 30*time.Second, p); err != nil {
			t.s.Err = "Traefik did not start: " + err.Error()
		}
	}

	var targets []target
	if d.Gateway.Err == "" {
		targets = append(targets, target{&d.Gateway, gwBase, noRoute})
	}
	if d.CDP.Err == "" {
		targets = append(targets, target{&d.CDP, cdpBase, noRoute})
	}
	for _, t := range []struct {
		s    *DiscSeries
		port int
	}{{&d.Traefik, discTraefikPort}, {&d.Traefik0, discTraefik0}} {
		if t.s.Err == "" {
			targets = append(targets, target{t.s, fmt.Sprintf("http://127.0.0.1:%d", t.port), traefikNoRoute})
		}
	}
	if len(targets) == 0 {
		d.Err = "no proxy started"
		return
	}
	names := make([]string, n)
	for i := 0; i < n; i++ {
		names[i] = fmt.Sprintf("svc%d", i)
	}
	// wait for both to settle (initial list of an empty engine)
	time.Sleep(time.Second)

	measure := func(i int, gone bool, cmdStart time.Time) {
		name := names[i]
		var wg sync.WaitGroup
		t0 := time.Now()
		cmdMs := ms(t0.Sub(cmdStart))
		for _, t := range targets {
			wg.Add(1)
			go func(t target) {
				defer wg.Done()
				lat, err := waitRoute(t.base+"/"+name+"/x", name, gone, t.gone, 20*time.Second, t0)
				if err != nil {
					t.s.Failures = append(t.s.Failures, fmt.Sprintf("%s %s: %v", map[bool]string{false: "add", true: "remove"}[gone], name, err))
					return
				}
				if gone {
					t.s.Remove = append(t.s.Remove, lat)
					t.s.RmCmd = append(t.s.RmCmd, lat+cmdMs)
				} else {
					t.s.Add = append(t.s.Add, lat)
					t.s.AddCmd = append(t.s.AddCmd, lat+cmdMs)
				}
			}(t)
		}
		wg.Wait()
	}

	for i, name := range names {
		port := discFirstPort + i
		args := []string{"run", "-d", "--name", "bench-" + name, "--network=host",
			"--label", "gateway.enable=true",
			"--label", "gateway.name=" + name,
			"--label", fmt.Sprintf("gateway.port=%d", port),
			"--label", "gateway.address=127.0.0.1",
			"--label", "gateway.router.r.path_prefix=/" + name,
			"--label", "gateway.router.r.auth.required=false",
			"--label", "gateway.router.r.audit=false",
			"--label", fmt.Sprintf("caddy=:%d", discCDPPort),
			"--label", fmt.Sprintf("caddy.handle_path=/%s/*", name),
			"--label", fmt.Sprintf("caddy.handle_path.reverse_proxy=127.0.0.1:%d", port),
			"--label", "traefik.enable=true",
			"--label", fmt.Sprintf("traefik.http.routers.%s.rule=PathPrefix(`/%s/`)", name, name),
			"--label", fmt.Sprintf("traefik.http.routers.%s.middlewares=%s-strip", name, name),
			"--label", fmt.Sprintf("traefik.http.middlewares.%s-strip.stripprefix.prefixes=/%s", name, name),
			"--label", fmt.Sprintf("traefik.http.services.%s.loadbalancer.server.url=http://127.0.0.1:%d", name, port),
			pod.image, "/ctrserver", fmt.Sprint(port), name}
		t0 := time.Now()
		if _, err := pod.cmd(args...); err != nil {
			d.Err = err.Error()
			progress("discovery: %v", err)
			return
		}
		d.PodmanRun = append(d.PodmanRun, ms(time.Since(t0)))
		measure(i, false, t0)
		progress("  add    %-6s %s", name, lastLat(targets, false))
		time.Sleep(300 * time.Millisecond)
	}
	for i, name := range names {
		t0 := time.Now()
		if _, err := pod.cmd("stop", "-t", "5", "bench-"+name); err != nil {
			d.Err = err.Error()
			return
		}
		d.PodmanStop = append(d.PodmanStop, ms(time.Since(t0)))
		measure(i, true, t0)
		progress("  remove %-6s %s", name, lastLat(targets, true))
		pod.cmd("rm", "-f", "bench-"+name)
		time.Sleep(300 * time.Millisecond)
	}
	if gw.Exited() {
		d.Gateway.Err = "gateway exited: " + gw.LogTail(5)
	}
	d.Gateway.Path = readPath(gw.Log, true, 0, 0).Label()
}

type target struct {
	s    *DiscSeries
	base string
	gone func(status int, body string) bool // the proxy's own answer when no route matches
}

// noRoute is the gateway's answer when no route matches (and
// caddy-docker-proxy's, whose Caddyfile has the same catch-all).
func noRoute(st int, body string) bool {
	return st == 404 && strings.Contains(body, `"error":"no_route"`)
}

// traefikNoRoute is Traefik's answer when no router matches.
func traefikNoRoute(st int, body string) bool {
	return st == 404 && strings.TrimSpace(body) == "404 page not found"
}

// startDiscoveryTraefik starts Traefik with its Docker provider on the
// private Podman's socket (exposedByDefault off: only containers labelled
// traefik.enable=true), with the given providersThrottleDuration.
func (b *Bench) startDiscoveryTraefik(host string, port int, throttle string) (*Proc, error) {
	if _, err := os.Stat(b.Traefik); err != nil {
		return nil, fmt.Errorf("traefik binary missing: %s (bench/build-traefik builds it)", b.Traefik)
	}
	tag := fmt.Sprintf("discovery-traefik-%s", throttle)
	conf := filepath.Join(b.confDir, tag+".yml")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`global:
  checkNewVersion: false
  sendAnonymousUsage: false
log:
  level: ERROR
entryPoints:
  web:
    address: "127.0.0.1:%d"
providers:
  providersThrottleDuration: %s
  docker:
    endpoint: "%s"
    exposedByDefault: false
    watch: true
`, port, throttle, host)), 0o644)
	if err != nil {
		return nil, err
	}
	return startPinned(tag, "0-1", filepath.Join(b.logDir, tag+".log"), nil, b.Traefik, "--configFile="+conf)
}

func lastLat(ts []target, gone bool) string {
	var parts []string
	for _, t := range ts {
		v := t.s.Add
		if gone {
			v = t.s.Remove
		}
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f ms", t.s.Name, v[len(v)-1]))
		}
	}
	return strings.Join(parts, ", ")
}

// waitRoute polls url until the container's answer appears (add) or until
// the route is gone (remove: noRoute, the proxy's own answer for a request
// no route matches; a 502 from the dead address or any other answer is not
// a removal). It returns the latency from t0 in
// milliseconds.
func waitRoute(url, name string, gone bool, noRoute func(int, string) bool, timeout time.Duration, t0 time.Time) (float64, error) {
	deadline := t0.Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, body, err := probe(ctx, url, "")
		cancel()
		now := time.Now()
		mine := err == nil && st == 200 && strings.HasPrefix(body, name+" ")
		if !gone && mine {
			return ms(now.Sub(t0)), nil
		}
		if gone && err == nil && noRoute(st, body) {
			return ms(now.Sub(t0)), nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %.80q", st, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("not within %s (last: %s)", timeout, last)
}

func (d *DiscoveryResult) markdown(p func(string, ...any)) {
	p("## 4. Discovery with Podman")
	p("")
	if d.Err != "" && len(d.Gateway.Add) == 0 {
		p("Not run: %s", d.Err)
		p("")
		return
	}
	p("%d containers (host network, a static HTTP server each) started one at a time with `podman run -d`, then stopped one at a time with `podman stop`, "+
		"on a private Podman %s; the gateway (docker app, default debounce, the apigate wrapper), Caddy with caddy-docker-proxy (event throttle 100 ms) and Traefik's Docker provider, twice (its default `providersThrottleDuration` of 2 s, and 0, the lowest it allows: throttling off), watch the same API socket. "+
		"Latency: from the podman command returning (the container is running / has exited) to the first request the proxy routes to the container / answers with its own no-route answer: the gateway's `404 {\"error\":\"no_route\"}` "+
		"(caddy-docker-proxy's Caddyfile has the same catch-all), Traefik's `404 page not found` (polled every 5 ms). The podman commands themselves took: run p50 %.0f ms, stop p50 %.0f ms.",
		d.Containers, "(runc)", stat(d.PodmanRun).Med, stat(d.PodmanStop).Med)
	p("")
	p("| proxy | add p50 | add min-max | remove p50 | remove min-max | add p50 from command start | remove p50 from command start | failures |")
	p("|---|---|---|---|---|---|---|---|")
	for _, s := range d.all() {
		if s.Name == "" {
			continue // a report from before Traefik was measured
		}
		if s.Err != "" {
			p("| %s | not run: %s | | | | | | |", s.Name, oneLine(s.Err))
			continue
		}
		a, r := stat(s.Add), stat(s.Remove)
		p("| %s | %s | %s | %s | %s | %s | %s | %d |", s.Name, msOr(a.Med), rangeOr(a), msOr(r.Med), rangeOr(r),
			msOr(stat(s.AddCmd).Med), msOr(stat(s.RmCmd).Med), len(s.Failures))
	}
	p("")
	if d.Gateway.Path != "" {
		p("- the gateway's discovered routes were served by: %s", d.Gateway.Path)
	}
	for _, s := range d.all() {
		for _, f := range s.Failures {
			p("- %s: %s", s.Name, oneLine(f))
		}
	}
	if d.Err != "" {
		p("- error: %s", oneLine(d.Err))
	}
	for _, n := range d.Notes {
		p("- note: %s", n)
	}
	p("")
}

func msOr(v float64) string {
	if v != v {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", v)
}

func rangeOr(s Stat) string {
	if !s.valid() {
		return "-"
	}
	return fmt.Sprintf("%.0f-%.0f ms", s.Min, s.Max)
}
