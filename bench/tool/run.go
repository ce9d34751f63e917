package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Fixed addresses: the bench's own listeners use 19900-19999 and
// 29000-29999, its admin endpoints 2910-2919.
const (
	backendAddr = "127.0.0.1:19901"
	authAddr    = "127.0.0.1:19902"
	permAddr    = "127.0.0.1:19903"
	auditAddr   = "127.0.0.1:19904"
	natsAddr    = "127.0.0.1:19905"
	natsMonAddr = "127.0.0.1:19906"
	firstPort   = 19910 // scenario i listens on firstPort+i
	gwAdmin     = "localhost:2910"
	caddyAdmin  = "localhost:2911"

	traefikVersion = "v3.7.13" // bench/build-traefik builds it

	coreGateway = "1" // the proxy under test
	coreLoad    = "0" // wrk, backend and helper services
)

// Bench holds the state of one run.
type Bench struct {
	Root, Work, Results string
	Gateway, Caddy, CDP string
	Traefik, FastProxy  string // bench/work/traefik (bench/build-traefik), bench/work/fastproxy
	Tool, CtrServer     string
	Rounds              int
	Dur, Warmup         time.Duration
	Quick               bool
	All                 bool // the opt-in scenarios too
	Only                string
	Label               string   // -label, checked by cleanLabel
	skipped             []string // -skip's parts (named in the results file)
	Keys                *Keys
	tokens              map[string]string // alg -> one token
	pools               map[string]string // alg -> pool file
	services            []*Proc
	tlsCert, tlsKey     string // the TLS rows' certificate and key (tlsFiles) ...
	tlsPem              string // ... and both in one file (HAProxy)
	confDir, logDir     string
	started             time.Time
	report              *Report
	sessionCookie       string // the session row's login (Session)
}

// Sample is one scenario in one round.
type Sample struct {
	Round   int               `json:"round"`
	At      map[int]WrkResult `json:"at"` // by connections
	PeakRSS int64             `json:"peak_rss_bytes"`
	// share of core 1 used by the server under test and by all other
	// processes during the measured runs (noise indicator)
	CoreOurs   float64 `json:"core_share_server"`
	CoreOthers float64 `json:"core_share_others"`
	// CPUPerReq is the proxy's own CPU (user + system time of its
	// processes, from /proc) over the measured runs divided by the requests
	// wrk completed, in µs: the cost of a request, valid when the proxy is
	// not saturated too (req/s then measures the load side).
	CPUPerReq float64 `json:"cpu_us_per_req"`
	// CPUUserPerReq is the user-space part of CPUPerReq (the rest is the
	// kernel's: system calls, the network stack): where two engines make
	// the same system calls, the difference is here.
	CPUUserPerReq float64 `json:"cpu_user_us_per_req"`
	// Core0Busy is the busy share of core 0 (wrk, the backend and the
	// helper services) over the measured runs: near 1, req/s measured the
	// load side.
	Core0Busy float64 `json:"core0_busy"`
	// PeakAnon is the sampled peak of anonymous memory (heap, stacks),
	// i.e. VmHWM without the pages of the mapped binary
	PeakAnon int64              `json:"peak_anon_rss_bytes"`
	Extra    map[string]float64 `json:"extra,omitempty"`
	Err      string             `json:"error,omitempty"`
	// Saturated: the server under test used at least minBusy of core 1
	// during the run; a run that did not measured its load, not the server.
	Saturated bool `json:"saturated"`
	// Reruns: how many times the round's run was repeated because other
	// processes took more than maxOthers of core 1.
	Reruns int `json:"reruns,omitempty"`
	// Path is which path of the gateway served the run, as the gateway
	// itself said (gateway rows only; see PathInfo).
	Path *PathInfo `json:"path,omitempty"`
}

// connLevels are the load rounds' connection counts; the scaling part
// measures 100 to 10,000.
var connLevels = []int{300}

const (
	minBusy   = 0.90 // share of core 1 a saturated server uses
	maxOthers = 0.10 // share of core 1 other processes may take before a run is repeated
	maxReruns = 2
)

func (b *Bench) conf(s Scenario, port int) Conf {
	c := s.Conf
	c.Port = port
	c.Work = b.Work
	c.Backend = backendAddr
	c.AuthAddr = authAddr
	c.PermAddr = permAddr
	c.AuditAddr = auditAddr
	c.NATSAddr = natsAddr
	c.Secret = string(b.Keys.HMAC)
	c.PubPEM = b.Keys.PubPEM
	c.AuditKey = b.Keys.AuditKey
	c.Issuer = tokenIssuer
	c.Audience = tokenAudience
	c.FDLimit = fdLimit()
	c.MaxConn = maxConns()
	if c.AuditDisk {
		c.AuditSpool = filepath.Join(b.Work, "audit-spool")
	}
	if c.AccessLog {
		c.AccessLogFile = filepath.Join(b.Work, "access.log")
	}
	if c.OpenAPI {
		c.OpenAPISpec = filepath.Join(b.Work, "openapi.yaml")
	}
	if c.Quota || c.RateLimitFleet {
		c.QuotaDir = filepath.Join(b.Work, "quota")
	}
	if c.OIDC {
		c.OIDCIssuer = "http://" + oidcAddr
	}
	if s.Proto != "" {
		// TLS 1.3 with the ECDSA P-256 certificate, h2 offered by ALPN
		// (a tls-h1 row's client asks for http/1.1 only)
		c.TLSCert, c.TLSKey, c.TLSPem, c.HTTP2 = b.tlsCert, b.tlsKey, b.tlsPem, true
	}
	switch s.Server {
	case "gateway":
		c.Admin = gwAdmin
	case "caddy":
		c.Admin = caddyAdmin
	}
	return c
}

func (b *Bench) render(tmplName, out string, c Conf) error { return b.renderAny(tmplName, out, c) }

// renderAny renders a template of bench/configs with any data.
func (b *Bench) renderAny(tmplName, out string, c any) error {
	t, err := template.ParseFiles(filepath.Join(b.Root, "bench", "configs", tmplName))
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	return t.Execute(f, c)
}

// caddyEnv keeps Caddy's data and config directories inside bench/work.
func (b *Bench) caddyEnv() []string {
	home := filepath.Join(b.Work, "caddyhome")
	return []string{"HOME=" + home, "XDG_DATA_HOME=" + filepath.Join(home, "data"), "XDG_CONFIG_HOME=" + filepath.Join(home, "config")}
}

// startServer renders the scenario's config and starts its server pinned
// to the gateway core. It returns nil for "direct".
func (b *Bench) startServer(s Scenario, c Conf, tag string) (*Proc, error) {
	log := filepath.Join(b.logDir, tag+".log")
	if c.AccessLogFile != "" {
		// (each run starts with an empty log: the disk stays bounded)
		if err := os.Remove(c.AccessLogFile); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	switch s.Server {
	case "direct":
		return nil, nil
	case "gateway", "caddy":
		// A previous run's undelivered events would be replayed, and its
		// counts would be the consumer's from the start.
		for _, dir := range []string{c.AuditSpool, c.QuotaDir} {
			if dir == "" {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				return nil, err
			}
		}
		path := filepath.Join(b.confDir, tag+".Caddyfile")
		if err := b.render("Caddyfile.tmpl", path, c); err != nil {
			return nil, err
		}
		bin := b.Gateway
		if s.Server == "caddy" {
			bin = b.Caddy
		}
		return startPinned(tag, coreGateway, log, b.caddyEnv(), bin, "run", "--config", path, "--adapter", "caddyfile")
	case "nginx":
		path := filepath.Join(b.confDir, tag+".nginx.conf")
		if err := b.render("nginx.conf.tmpl", path, c); err != nil {
			return nil, err
		}
		for _, d := range []string{"body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			os.MkdirAll(filepath.Join(b.Work, "nginx-tmp", d), 0o755)
		}
		return startPinned(tag, coreGateway, log, nil, "nginx", "-p", b.Work, "-e", filepath.Join(b.Work, "nginx-error.log"), "-c", path)
	case "haproxy":
		path := filepath.Join(b.confDir, tag+".haproxy.cfg")
		if err := b.render("haproxy.cfg.tmpl", path, c); err != nil {
			return nil, err
		}
		return startPinned(tag, coreGateway, log, nil, "haproxy", "-db", "-f", path)
	case "traefik":
		return b.startTraefik(c, tag, log)
	case "fastproxy":
		if _, err := os.Stat(b.FastProxy); err != nil {
			return nil, fmt.Errorf("fastproxy binary missing: %s (bench/run builds it)", b.FastProxy)
		}
		return startPinned(tag, coreGateway, log, []string{"GOMAXPROCS=1"}, b.FastProxy, fmt.Sprintf("127.0.0.1:%d", c.Port), c.Backend)
	}
	return nil, fmt.Errorf("unknown server %q", s.Server)
}

// authHeader is the credential header line a scenario's requests carry:
// its token, the first token of its pool (the check request), or the
// session cookie its login got (Session rows).
func (b *Bench) authHeader(s Scenario) string {
	switch {
	case s.Token != "":
		return "Authorization: Bearer " + b.tokens[s.Token]
	case s.Pool != "":
		return "Authorization: Bearer " + b.tokens[s.Pool+"-pool0"]
	case s.Session:
		return "Cookie: gateway_session=" + b.sessionCookie
	}
	return ""
}

// load runs a row's loader against url for d: wrk for the rows in clear
// text (wrkJob), h2load for the rows over TLS (Proto).
func (b *Bench) load(s Scenario, url string, conns int, d time.Duration, offset int64) (WrkResult, error) {
	switch s.Proto {
	case "":
		return runWrk(b.wrkJob(s, url, conns, d, offset))
	case protoH3:
		return b.runH3Load(b.h2Job(s, url, conns, d))
	}
	return runH2load(b.h2Job(s, url, conns, d))
}

// h2Job is a TLS row's h2load run: its token (a TLS row rotates through
// no pool of tokens or paths: h2load sends one request again and again).
func (b *Bench) h2Job(s Scenario, url string, conns int, d time.Duration) H2Job {
	j := H2Job{URL: url, Proto: s.Proto, Conns: conns, Streams: 1, Duration: d}
	if s.Proto == protoH2 || s.Proto == protoH3 {
		j.Streams = h2Streams
	}
	if s.Token != "" || s.Session {
		j.Header = b.authHeader(s)
	}
	return j
}

// waitRow polls a row's check request (its load's request: a GET of
// url, or the POST of Scenario.Post) until it answers 200.
func (b *Bench) waitRow(s Scenario, url string, timeout time.Duration, p *Proc) error {
	var body []byte
	if s.Post {
		var err error
		if body, err = os.ReadFile(filepath.Join(b.Work, "post-body.json")); err != nil {
			return err
		}
	}
	return waitStatusBody(url, b.authHeader(s), body, 200, timeout, p)
}

// rowURL is the URL a row's load and check request go to.
func rowURL(s Scenario, addr string) string {
	target := s.Target
	if target == "" {
		target = "/items/1"
	}
	if s.Proto != "" {
		return "https://" + addr + target
	}
	return "http://" + addr + target
}

func (b *Bench) wrkJob(s Scenario, url string, conns int, d time.Duration, offset int64) WrkJob {
	j := WrkJob{URL: url, Conns: conns, Duration: d}
	if s.Token != "" || s.Session {
		j.Header = b.authHeader(s)
	}
	if s.Pool != "" {
		j.Script = filepath.Join(b.Work, "rotate-tokens.lua")
		j.Env = append(j.Env, "TOKENS_FILE="+b.pools[s.Pool], fmt.Sprintf("TOKENS_OFFSET=%d", offset))
	}
	if s.Paths {
		j.Script = filepath.Join(b.Work, "rotate-paths.lua")
		j.URL = strings.TrimSuffix(url, "/items/1")
	}
	if s.Post {
		j.Script = filepath.Join(b.Work, "post-body.lua")
		j.Env = append(j.Env, "BODY_FILE="+filepath.Join(b.Work, "post-body.json"))
	}
	return j
}

// runScenario measures one scenario once: start, check, warm up, wrk at
// each connection level, peak memory, stop.
func (b *Bench) runScenario(s Scenario, idx, round int) Sample {
	smp := Sample{Round: round, At: map[int]WrkResult{}, Extra: map[string]float64{}}
	port := firstPort + idx
	c := b.conf(s, port)
	tag := fmt.Sprintf("%s-r%d", s.Name, round)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if s.Server == "direct" {
		addr = backendAddr
	}
	url := rowURL(s, addr)
	waitPortFree(addr, 5*time.Second)
	if s.Session {
		stop, err := b.startProvider(addr, tag)
		if err != nil {
			smp.Err = err.Error()
			return smp
		}
		defer stop()
	}
	p, err := b.startServer(s, c, tag)
	if err != nil {
		smp.Err = err.Error()
		return smp
	}
	defer func() {
		p.Stop(5 * time.Second)
		if s.Server != "direct" {
			waitPortFree(addr, 5*time.Second)
		}
	}()
	if err := waitTCP(addr, 30*time.Second, p); err != nil {
		smp.Err = err.Error()
		return smp
	}
	if s.Session {
		if err := b.login(url); err != nil {
			smp.Err = err.Error()
			return smp
		}
	}
	if err := b.waitRow(s, url, 15*time.Second, p); err != nil {
		smp.Err = "check request did not get 200: " + err.Error()
		return smp
	}
	// warm-up: connections, caches, the Go heap
	// offset: where in the token pool the next run starts (after the tokens
	// already sent, plus the requests that were in flight)
	var offset int64
	upBefore, upErr := backendAccepts()
	warm := 50
	if s.Proto == protoH2 || s.Proto == protoH3 {
		warm = h2Conns
	}
	w, err := b.load(s, url, warm, b.Warmup, offset)
	if err != nil {
		smp.Err = err.Error()
		return smp
	}
	offset += w.Requests + 50
	if s.Conf.AuditSink != "" {
		time.Sleep(400 * time.Millisecond) // let the warm-up's batches arrive
	}
	before := b.counters(s)
	var anon *sampler
	if p != nil {
		anon = sampleAnon(p.Pid())
		defer anon.stop()
	}
	pid := 0
	if p != nil {
		pid = p.Pid()
	}
	share := startCoreShare(pid)
	for _, conns := range s.Levels() {
		r, err := b.load(s, url, conns, b.Dur, offset)
		if err != nil {
			smp.Err = err.Error()
			return smp
		}
		offset += r.Requests + int64(conns)
		smp.At[conns] = r
	}
	smp.CoreOurs, smp.CoreOthers = share.end()
	smp.Core0Busy = share.load()
	if n := requestsOf(smp); n > 0 && pid > 0 {
		smp.CPUPerReq = share.cpuSeconds() * 1e6 / float64(n)
		smp.CPUUserPerReq = share.userSeconds() * 1e6 / float64(n)
	}
	smp.Saturated = s.Server == "direct" || smp.CoreOurs >= minBusy
	if p != nil {
		smp.PeakAnon = anon.stop()
		smp.PeakRSS = peakRSS(p.Pid())
	}
	if s.Conf.AuditSink != "" {
		time.Sleep(400 * time.Millisecond)
	}
	after := b.counters(s)
	for k, v := range after {
		smp.Extra[k] = v - before[k]
	}
	if s.Server != "direct" && upErr == nil {
		// connections the proxy opened to the backend, warm-up included
		smp.Extra["upstream_conns"] = upstreamConnsSince(upBefore)
	}
	if s.Server == "gateway" {
		smp.Path = readPath(p.Log, s.Conf.FastPath, smp.Extra["fastpath_requests"], float64(requestsOf(smp)))
		if s.Proto == protoH2 || s.Proto == protoH3 {
			smp.Path.Proto = s.Proto
		}
	}
	if p != nil && p.Exited() {
		smp.Err = "server exited during the run: " + p.LogTail(10)
	}
	return smp
}

// requestsOf is how many requests wrk completed in a sample's measured runs.
func requestsOf(smp Sample) int64 {
	var n int64
	for _, w := range smp.At {
		n += w.Requests
	}
	return n
}

// counters reads the numbers that show a duty did its work: the
// gateway's JWT cache counters, permission service calls, audit events
// received.
func (b *Bench) counters(s Scenario) map[string]float64 {
	m := map[string]float64{}
	if s.Server == "gateway" {
		for k, v := range scrapeMetrics("http://"+gwAdmin+"/metrics", "gateway_jwt_cache_hits_total", "gateway_jwt_cache_misses_total",
			"gateway_audit_events_enqueued_total", "gateway_audit_events_sent_total", "gateway_audit_events_spooled_total", "gateway_audit_events_dropped_total",
			fastpathCounter) {
			if k == fastpathCounter {
				k = "fastpath_requests"
			}
			m[k] = v
		}
	}
	if s.Conf.Perm != "" {
		m["permission_calls"] = jsonNumber("http://"+permAddr+"/stats", "calls")
	}
	if strings.HasPrefix(s.Conf.AuditSink, "http") {
		m["audit_events_received"] = jsonNumber("http://"+auditAddr+"/stats", "events")
	}
	if strings.HasPrefix(s.Conf.AuditSink, "nats") {
		m["audit_events_received"] = jsonNumber("http://"+natsMonAddr+"/varz", "in_msgs")
	}
	return m
}

func scrapeMetrics(url string, names ...string) map[string]float64 {
	out := map[string]float64{}
	resp, err := plainClient.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if strings.HasPrefix(line, n+" ") || strings.HasPrefix(line, n+"{") {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				out[n] += v
			}
		}
	}
	return out
}

func jsonNumber(url, key string) float64 {
	_, body, err := probe(context.Background(), url, "")
	if err != nil {
		return math.NaN()
	}
	m := regexp.MustCompile(`"` + regexp.QuoteMeta(key) + `"\s*:\s*([0-9.eE+-]+)`).FindStringSubmatch(body)
	if m == nil {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// startServices starts the backend, the auth, permission and audit
// services (subcommands of this tool) and nats-server, all on core 0.
func (b *Bench) startServices() error {
	type svc struct {
		name, addr string
		argv       []string
	}
	natsDir := filepath.Join(b.Work, "nats")
	os.RemoveAll(natsDir)
	waitPortFree(backendAddr, 3*time.Second)
	bp, err := b.startBackend()
	if err != nil {
		return err
	}
	b.services = append(b.services, bp)
	if err := waitTCP(backendAddr, 20*time.Second, bp); err != nil {
		return fmt.Errorf("backend: %v", err)
	}
	list := []svc{
		{"authsvc", authAddr, []string{b.Tool, "authsvc", authAddr, b.Keys.Dir}},
		{"permsvc", permAddr, []string{b.Tool, "permsvc", permAddr}},
		{"auditsink", auditAddr, []string{b.Tool, "auditsink", auditAddr}},
		{"nats-server", natsAddr, []string{"nats-server", "-a", "127.0.0.1", "-p", "19905", "-js", "-sd", natsDir, "-m", "19906"}},
	}
	for _, s := range list {
		waitPortFree(s.addr, 3*time.Second)
		env := []string{"GOMAXPROCS=1"}
		p, err := startPinned(s.name, coreLoad, filepath.Join(b.logDir, s.name+".log"), env, s.argv...)
		if err != nil {
			return err
		}
		b.services = append(b.services, p)
		if err := waitTCP(s.addr, 20*time.Second, p); err != nil {
			return fmt.Errorf("%s: %v", s.name, err)
		}
	}
	return nil
}

func (b *Bench) stopServices() {
	for i := len(b.services) - 1; i >= 0; i-- {
		b.services[i].Stop(3 * time.Second)
	}
	b.services = nil
}
