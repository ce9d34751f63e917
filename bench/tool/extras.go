package main

import (
	"bufio"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The parts after the load rounds: TLS termination, gzip, connection
// scaling, fixed-rate latency and idle connections. Each starts every proxy
// fresh, on core 1, with the load on core 0, as the load rounds do.

const extrasPort = 19950

// ExtraRow is one proxy measured in one of these parts.
type ExtraRow struct {
	Part    string             `json:"part"`    // tls | gzip | scaling | latency | idle
	Proxy   string             `json:"proxy"`   // scenario name
	Case    string             `json:"case"`    // e.g. "handshakes", "keep-alive", "1000 connections", "80%"
	Rounds  []float64          `json:"rounds"`  // the main figure of each round (req/s, or MB for idle)
	Extra   map[string]float64 `json:"extra"`   // p99_ms, peak_rss_mb, ...
	Checked string             `json:"checked"` // what was checked of the answers
	Err     string             `json:"error,omitempty"`
	// RoundIDs is the round of each value of Rounds; Busy the share of
	// core 1 the server used during it (throughput rows), Others the share
	// other processes took.
	RoundIDs []int     `json:"round_ids,omitempty"`
	Busy     []float64 `json:"core_share_server,omitempty"`
	Others   []float64 `json:"core_share_others,omitempty"`
	// Path: for a gateway row, which path served it (PathInfo.Label), and
	// a contradiction with its plan (a bench bug).
	Path        string `json:"path,omitempty"`
	PathProblem string `json:"path_problem,omitempty"`
}

// add records one round's figure.
func (x *ExtraRow) add(round int, v float64, share *coreShare) {
	x.Rounds = append(x.Rounds, v)
	x.RoundIDs = append(x.RoundIDs, round)
	if share != nil {
		ours, others := share.end()
		x.Busy = append(x.Busy, ours)
		x.Others = append(x.Others, others)
	}
}

// byRound is the row's figures by round, the rounds in which the server
// was saturated (when the row measured it), and how many were not.
func (x *ExtraRow) byRound() (vals map[int]float64, saturated map[int]bool) {
	vals, saturated = map[int]float64{}, map[int]bool{}
	for i, v := range x.Rounds {
		round := i + 1
		if i < len(x.RoundIDs) {
			round = x.RoundIDs[i]
		}
		vals[round] = v
		saturated[round] = i >= len(x.Busy) || x.Busy[i] >= minBusy
	}
	return vals, saturated
}

// extraProxies: the proxies the extra parts compare. withAll: the
// gateway with every duty (Caddy's path and the apigate wrapper's) beside
// the bare fast path, for the parts that measure connections and memory.
func extraProxies(withAll bool) []Scenario {
	allH1 := allDuties
	allH1.Transport = "h1"
	l := []Scenario{
		{Name: "gw-h1", Label: "gateway, transport h1", Server: "gateway", Conf: Conf{Transport: "h1"}},
		{Name: "gw-fast", Label: "gateway, apigate wrapper", Server: "gateway", Conf: fast(Conf{})},
		{Name: "caddy", Label: "stock Caddy", Server: "caddy"},
		{Name: "nginx", Label: "nginx", Server: "nginx"},
		{Name: "haproxy", Label: "HAProxy", Server: "haproxy"},
		{Name: "traefik", Label: "Traefik " + traefikVersion, Server: "traefik"},
	}
	if withAll {
		l[0] = Scenario{Name: "gw-all-h1", Label: "gateway, all duties, transport h1", Server: "gateway", Conf: allH1, Token: "HS256"}
		l = append(l[:2], append([]Scenario{{Name: "gw-fast-all", Label: "gateway, all duties, apigate wrapper", Server: "gateway", Conf: fast(allDuties), Token: "HS256"}}, l[2:]...)...)
	}
	return l
}

// extraRounds: the extra parts run 3 interleaved rounds (1 when quick).
func (b *Bench) extraRounds() int {
	if b.Quick {
		return 1
	}
	return 3
}

// withServer starts s (with conf tweaks) on extrasPort, waits for url to
// answer 200, runs f, and stops it. For the gateway it returns which path
// served it (nil for the others).
func (b *Bench) withServer(s Scenario, tweak func(*Conf), tag, path string, f func(p *Proc, base string) error) (*PathInfo, error) {
	if s.Server == "direct" {
		return nil, f(nil, "http://"+backendAddr)
	}
	c := b.conf(s, extrasPort)
	if tweak != nil {
		tweak(&c)
	}
	scheme := "http"
	if c.TLSCert != "" {
		scheme = "https"
	}
	addr := fmt.Sprintf("127.0.0.1:%d", extrasPort)
	base := scheme + "://" + addr
	waitPortFree(addr, 5*time.Second)
	p, err := b.startServer(s, c, tag)
	if err != nil {
		return nil, err
	}
	defer func() { p.Stop(5 * time.Second); waitPortFree(addr, 5*time.Second) }()
	if err := waitStatus(base+path, b.authHeader(s), 200, 20*time.Second, p); err != nil {
		return nil, err
	}
	if s.Server != "gateway" {
		return nil, f(p, base)
	}
	before := scrapeMetrics("http://"+c.Admin+"/metrics", fastpathCounter)[fastpathCounter]
	err = f(p, base)
	served := scrapeMetrics("http://"+c.Admin+"/metrics", fastpathCounter)[fastpathCounter] - before
	return readPath(p.Log, c.FastPath, served, 0), err
}

// setPath labels every row of a proxy in a part with the path that
// served it.
func setPath(all []*ExtraRow, part, proxy string, pi *PathInfo) {
	if pi == nil {
		return
	}
	for _, x := range all {
		if x.Part == part && x.Proxy == proxy {
			x.Path, x.PathProblem = pi.Label(), pi.Problem()
		}
	}
}

// --- TLS 1.3 termination ---

// tlsFiles makes (once) an ECDSA P-256 certificate for 127.0.0.1: cert,
// key, and both in one file for HAProxy.
func (b *Bench) tlsFiles() (cert, key, pemFile string, err error) {
	dir := filepath.Join(b.Work, "tls")
	cert, key, pemFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "combined.pem")
	if _, err := os.Stat(pemFile); err == nil {
		return cert, key, pemFile, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", "", err
	}
	cp := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kp := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	for _, f := range []struct {
		path string
		data []byte
	}{{cert, cp}, {key, kp}, {pemFile, append(append([]byte{}, cp...), kp...)}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return cert, key, pemFile, nil
}

// tls measures TLS 1.3 termination with a 5 KB answer: full handshakes per
// second (wrk sends Connection: close, so every request is a new TLS
// connection), and keep-alive throughput at 300 connections.
func (b *Bench) tlsPart() {
	cert, key, pemFile, err := b.tlsFiles()
	if err != nil {
		b.report.NotRun = append(b.report.NotRun, "tls: "+err.Error())
		return
	}
	progress("TLS 1.3 termination (ECDSA P-256, 5 KB answer): handshakes per second and keep-alive throughput, %d rounds", b.extraRounds())
	tweak := func(c *Conf) { c.TLSCert, c.TLSKey, c.TLSPem = cert, key, pemFile }
	rows := map[string]*ExtraRow{}
	for round := 1; round <= b.extraRounds(); round++ {
		for _, s := range rotate(extraProxies(false), round) {
			pi, err := b.withServer(s, tweak, fmt.Sprintf("tls-%s-r%d", s.Name, round), "/5k", func(p *Proc, base string) error {
				if err := checkBody(base+"/5k", "", len(body5k), ""); err != nil {
					return err
				}
				for _, c := range []struct {
					name   string
					conns  int
					header string
				}{{"handshakes", 50, "Connection: close"}, {"keep-alive", 300, ""}} {
					share := startCoreShare(p.Pid())
					w, err := runWrk(WrkJob{URL: base + "/5k", Conns: c.conns, Duration: b.Dur, Header: c.header})
					if err != nil {
						return err
					}
					if w.Non2xx > 0 || w.Errors > 0 && c.header == "" {
						return fmt.Errorf("%s: %d non-2xx, %d socket errors", c.name, w.Non2xx, w.Errors)
					}
					row := rowFor(rows, &b.report.Extras, "tls", s.Name, c.name)
					row.add(round, w.RPS, share)
					row.Extra["p99_ms_r"+strconv.Itoa(round)] = w.P99ms
					row.Checked = "a check request got the 5 KB body over TLS 1.3"
				}
				return nil
			})
			if err != nil {
				rowFor(rows, &b.report.Extras, "tls", s.Name, "handshakes").Err = err.Error()
				progress("  tls %-10s ERROR: %s", s.Name, oneLine(err.Error()))
				continue
			}
			setPath(b.report.Extras, "tls", s.Name, pi)
			progress("  tls %-10s round %d: %.0f handshakes/s, %.0f req/s keep-alive", s.Name, round,
				last(rows["tls/"+s.Name+"/handshakes"].Rounds), last(rows["tls/"+s.Name+"/keep-alive"].Rounds))
		}
	}
}

// gzipPart measures compressing a 10 KB JSON answer at level 6, at 300
// connections, for clients that accept gzip.
func (b *Bench) gzipPart() {
	progress("gzip level 6 of a 10 KB JSON answer, 300 connections, %d rounds", b.extraRounds())
	tweak := func(c *Conf) { c.Gzip = true }
	rows := map[string]*ExtraRow{}
	for round := 1; round <= b.extraRounds(); round++ {
		for _, s := range rotate(extraProxies(false), round) {
			pi, err := b.withServer(s, tweak, fmt.Sprintf("gzip-%s-r%d", s.Name, round), "/json10k", func(p *Proc, base string) error {
				if err := checkBody(base+"/json10k", "", len(body10k), "gzip"); err != nil {
					return err
				}
				share := startCoreShare(p.Pid())
				w, err := runWrk(WrkJob{URL: base + "/json10k", Conns: 300, Duration: b.Dur, Header: "Accept-Encoding: gzip"})
				if err != nil {
					return err
				}
				if w.Non2xx > 0 || w.Errors > 0 {
					return fmt.Errorf("%d non-2xx, %d socket errors", w.Non2xx, w.Errors)
				}
				row := rowFor(rows, &b.report.Extras, "gzip", s.Name, "300 connections")
				row.add(round, w.RPS, share)
				row.Extra["p99_ms_r"+strconv.Itoa(round)] = w.P99ms
				row.Checked = "a check request got Content-Encoding: gzip, and the body unzipped to the 10 KB JSON"
				return nil
			})
			if err != nil {
				rowFor(rows, &b.report.Extras, "gzip", s.Name, "300 connections").Err = err.Error()
				progress("  gzip %-10s ERROR: %s", s.Name, oneLine(err.Error()))
				continue
			}
			setPath(b.report.Extras, "gzip", s.Name, pi)
			progress("  gzip %-10s round %d: %.0f req/s", s.Name, round, last(rows["gzip/"+s.Name+"/300 connections"].Rounds))
		}
	}
}

// scalingLevels are the connection counts of the scaling part.
// 9,000 is issue 23's level, and the most that fits the open-file hard
// limit of 20,000 of the machines this runs on (10,000 was measured until
// the fast path's goal named 9,000).
var scalingLevels = []int{100, 1000, 5000, 9000}

// scalingPart measures req/s, P99 and peak memory from 100 to 10,000
// concurrent connections, levels in increasing order on one process each.
func (b *Bench) scalingPart() {
	// A proxy holds a descriptor per client and per upstream connection:
	// where the open-file limit (its hard limit cannot be raised here)
	// does not allow a level, the largest thousand that fits is measured.
	var levels []int
	lim := fdLimit()
	for _, l := range scalingLevels {
		if l > maxConns() {
			capped := maxConns() / 1000 * 1000
			b.report.NotRun = append(b.report.NotRun, fmt.Sprintf("scaling: %d connections need about %d open files per proxy; the limit is %d, so %d were measured instead", l, 2*l+200, lim, capped))
			l = capped
		}
		if len(levels) == 0 || levels[len(levels)-1] < l {
			levels = append(levels, l)
		}
	}
	progress("connection scaling: %v connections, 1 round", levels)
	rows := map[string]*ExtraRow{}
	for _, s := range extraProxies(true) {
		pi, err := b.withServer(s, nil, "scaling-"+s.Name, "/items/1", func(p *Proc, base string) error {
			if _, err := runWrk(b.wrkJob(s, base+"/items/1", 100, b.Warmup, 0)); err != nil {
				return err
			}
			for _, n := range levels {
				share := startCoreShare(p.Pid())
				w, err := runWrk(b.wrkJob(s, base+"/items/1", n, b.Dur, 0))
				if err != nil {
					return err
				}
				row := rowFor(rows, &b.report.Extras, "scaling", s.Name, fmt.Sprintf("%d connections", n))
				row.add(1, w.RPS, share)
				row.Extra["p99_ms"] = w.P99ms
				row.Extra["peak_rss_mb"] = float64(peakRSS(p.Pid())) / 1e6
				row.Extra["errors"] = float64(w.Errors + w.Non2xx)
				row.Checked = "wrk's answers: non-2xx and socket errors counted"
				progress("  scaling %-10s %5d connections: %.0f req/s, p99 %.1f ms, peak RSS %.1f MB, %d errors", s.Name, n, w.RPS, w.P99ms, row.Extra["peak_rss_mb"], w.Errors+w.Non2xx)
			}
			return nil
		})
		if err != nil {
			rowFor(rows, &b.report.Extras, "scaling", s.Name, "error").Err = err.Error()
			progress("  scaling %-10s ERROR: %s", s.Name, oneLine(err.Error()))
		}
		setPath(b.report.Extras, "scaling", s.Name, pi)
	}
}

// latencyPart drives each proxy at 50% and 80% of the maximum it reached
// in the load rounds (measured again here if it did not run there), with
// the open-loop generator: P50, P99 and P99.9 from each request's
// scheduled time.
func (b *Bench) latencyPart() {
	// one wrk duration per rate (it was two until the Traefik and fast
	// path rows made the run too long for 45 minutes)
	b.report.LatencyS = b.Dur.Seconds()
	progress("fixed-rate latency at 50%% and 80%% of each proxy's maximum, %s each, open loop", b.Dur)
	// "direct" (the backend itself) shows the floor the generator and
	// the backend set, sharing core 0
	withAll := extraProxies(true)
	list := append([]Scenario{{Name: "direct", Label: "backend directly", Server: "direct"}}, append(extraProxies(false), withAll[0], withAll[2])...)
	rows := map[string]*ExtraRow{}
	for _, s := range list {
		pi, err := b.withServer(s, nil, "latency-"+s.Name, "/items/1", func(p *Proc, base string) error {
			max := b.report.rps(s.Name, 300).Med
			source := "the load rounds' median at 300 connections"
			if !(max > 0) {
				w, err := runWrk(b.wrkJob(s, base+"/items/1", 300, b.Dur, 0))
				if err != nil {
					return err
				}
				max, source = w.RPS, "a wrk run at 300 connections just before"
			}
			for _, frac := range []float64{0.5, 0.8} {
				header := ""
				if s.Token != "" {
					header = "Authorization: Bearer " + b.tokens[s.Token]
				}
				o, err := b.runOpenLoop(strings.TrimPrefix(base, "http://"), "/items/1", header, frac*max, 300, b.Dur)
				if err != nil {
					return err
				}
				row := rowFor(rows, &b.report.Extras, "latency", s.Name, fmt.Sprintf("%.0f%%", 100*frac))
				row.Rounds = append(row.Rounds, o.Achieved)
				row.Extra = map[string]float64{"rate": o.Rate, "max": max, "p50_ms": o.P50ms, "p99_ms": o.P99ms, "p999_ms": o.P999ms,
					"max_ms": o.MaxMs, "errors": float64(o.Errors), "late": float64(o.Late), "sent": float64(o.Sent)}
				row.Checked = "maximum from " + source
				progress("  latency %-10s %3.0f%% of %.0f: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, %d late, %d errors",
					s.Name, 100*frac, max, o.P50ms, o.P99ms, o.P999ms, o.Late, o.Errors)
			}
			return nil
		})
		if err != nil {
			rowFor(rows, &b.report.Extras, "latency", s.Name, "error").Err = err.Error()
			progress("  latency %-10s ERROR: %s", s.Name, oneLine(err.Error()))
		}
		setPath(b.report.Extras, "latency", s.Name, pi)
	}
}

// idleConns is how many idle keep-alive client connections the idle part
// holds, if the open-file limit allows (maxConns).
const idleConns = 10000

// maxConns is the most client connections every proxy can take under the
// open-file limit, each with a server connection beside it: 10,000, or
// fewer where the limit (a hard limit of 20,000 here) does not allow it.
func maxConns() int { return min(idleConns, (fdLimit()-200)/2) }

// idlePart measures each proxy's memory with 10,000 idle keep-alive
// client connections (each sent one request, then left open).
func (b *Bench) idlePart() {
	n := maxConns()
	if n < idleConns {
		b.report.NotRun = append(b.report.NotRun, fmt.Sprintf("idle: the open-file limit (%d) lets every proxy take %d connections, so %d were held instead of %d", fdLimit(), n, n, idleConns))
	}
	progress("idle memory: %d idle keep-alive connections", n)
	rows := map[string]*ExtraRow{}
	for _, s := range extraProxies(true) {
		pi, err := b.withServer(s, nil, "idle-"+s.Name, "/items/1", func(p *Proc, base string) error {
			before := float64(statusKB(p.Pid(), "VmRSS:")) / 1024
			addr := strings.TrimPrefix(base, "http://")
			header := ""
			if s.Token != "" {
				header = "Authorization: Bearer " + b.tokens[s.Token]
			}
			cmd := exec.Command("taskset", "-c", coreLoad, b.Tool, "idleconns", addr, "/items/1", strconv.Itoa(n), header)
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				return err
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "ready") {
				return fmt.Errorf("idleconns: %q %v", line, err)
			}
			time.Sleep(2 * time.Second) // let the proxy settle
			rss := 0.0
			for _, pid := range append([]int{p.Pid()}, descendants(p.Pid())...) {
				rss += float64(statusKB(pid, "VmRSS:")) / 1024
			}
			row := rowFor(rows, &b.report.Extras, "idle", s.Name, fmt.Sprintf("%d idle connections", n))
			row.add(1, rss*1.048576, nil) // MB
			row.Extra["rss_before_mb"] = before * 1.048576
			row.Extra["answered"] = parseLeadingFloat(strings.TrimPrefix(line, "ready "))
			row.Checked = "each connection got a 2xx answer before it went idle"
			progress("  idle %-10s RSS %.1f MB with %d idle connections (%.1f MB before)", s.Name, rss*1.048576, n, before*1.048576)
			return nil
		})
		if err != nil {
			rowFor(rows, &b.report.Extras, "idle", s.Name, "error").Err = err.Error()
			progress("  idle %-10s ERROR: %s", s.Name, oneLine(err.Error()))
		}
		setPath(b.report.Extras, "idle", s.Name, pi)
	}
}

// cmdIdleConns is `benchtool idleconns <addr> <path> <n> [header]`: it
// opens n connections, sends one request on each and reads its answer,
// prints "ready <answered>", and keeps them open until stdin closes.
func cmdIdleConns(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: idleconns <addr> <path> <n> [header]")
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	header := ""
	if len(args) > 3 && args[3] != "" {
		// (an empty header argument adds no line: a stray CRLF after the
		// head would be read as the start of a next request, and a server
		// would hold that connection's read buffer while it waits)
		header = args[3] + "\r\n"
	}
	req := []byte("GET " + args[1] + " HTTP/1.1\r\nHost: " + args[0] + "\r\n" + header + "\r\n")
	conns := make([]net.Conn, 0, n)
	answered := 0
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		ok, err := roundTripRaw(c, bufio.NewReaderSize(c, 4096), req)
		if err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		if ok {
			answered++
		}
		c.SetDeadline(time.Time{})
		conns = append(conns, c)
	}
	fmt.Printf("ready %d\n", answered)
	io.Copy(io.Discard, os.Stdin) // until the bench closes it
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// checkBody fetches url and checks that its body is want bytes long,
// after gunzipping when encoding is gzip (which it then must be).
func checkBody(url, auth string, want int, encoding string) error {
	req, _ := http.NewRequest("GET", url, nil)
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if encoding == "gzip" {
		if resp.Header.Get("Content-Encoding") != "gzip" {
			return fmt.Errorf("%s: answered without Content-Encoding: gzip", url)
		}
		zr, err := gzipReader(resp.Body)
		if err != nil {
			return err
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if len(b) != want {
		return fmt.Errorf("%s: body of %d bytes, want %d", url, len(b), want)
	}
	if resp.TLS != nil && resp.TLS.Version != 0x0304 {
		return fmt.Errorf("%s: TLS version %#x, want 1.3", url, resp.TLS.Version)
	}
	return nil
}

// fdLimit is this process's open-file limit (the servers and wrk inherit it).
func fdLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	return int(r.Cur)
}

// raiseFDLimit lifts the open-file limit as far as it may go (as root, past
// the hard limit), so that 10,000 connections fit in every process.
func raiseFDLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return
	}
	want := uint64(200000)
	if r.Max < want {
		r2 := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r2) == nil {
			return
		}
	}
	r.Cur = r.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
}

func rowFor(rows map[string]*ExtraRow, all *[]*ExtraRow, part, proxy, cas string) *ExtraRow {
	k := part + "/" + proxy + "/" + cas
	if r, ok := rows[k]; ok {
		return r
	}
	r := &ExtraRow{Part: part, Proxy: proxy, Case: cas, Extra: map[string]float64{}}
	rows[k] = r
	*all = append(*all, r)
	return r
}

// rotate starts the list at a different place in each round.
func rotate(l []Scenario, round int) []Scenario {
	k := (round - 1) % len(l)
	return append(append([]Scenario{}, l[k:]...), l[:k]...)
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[len(v)-1]
}

func parseLeadingFloat(s string) float64 {
	v, _ := strconv.ParseFloat(strings.Fields(s + " 0")[0], 64)
	return v
}

func gzipReader(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

// extrasMarkdown writes the sections of the extra parts.
func (r *Report) extrasMarkdown(p func(string, ...any)) {
	byPart := map[string][]*ExtraRow{}
	for _, x := range r.Extras {
		byPart[x.Part] = append(byPart[x.Part], x)
	}
	med := func(x *ExtraRow) string {
		st := stat(x.Rounds)
		if !st.valid() {
			return "-"
		}
		if len(x.Rounds) == 1 {
			return fmt.Sprintf("%.0f", st.Med)
		}
		return fmt.Sprintf("%.0f [%.0f-%.0f]", st.Med, st.Min, st.Max)
	}
	p99 := func(x *ExtraRow) string {
		var v []float64
		for k, val := range x.Extra {
			if strings.HasPrefix(k, "p99_ms_r") {
				v = append(v, val)
			}
		}
		if st := stat(v); st.valid() {
			return fmt.Sprintf("%.1f", st.Med)
		}
		return "-"
	}
	errs := func(rows []*ExtraRow) {
		for _, x := range rows {
			if x.Err != "" {
				p("- %s: **error**: %s", x.Proxy, oneLine(x.Err))
			}
			if x.PathProblem != "" {
				p("- %s (%s), **bench bug**: the row's plan and the gateway disagree on the path: %s", x.Proxy, x.Case, x.PathProblem)
			}
		}
	}
	// name is a row's proxy, with the path that served it for the gateway
	name := func(x *ExtraRow) string {
		if x.Path != "" {
			return x.Proxy + " (" + x.Path + ")"
		}
		return x.Proxy
	}
	busy := func(x *ExtraRow) string {
		if st := stat(x.Busy); st.valid() {
			out := fmt.Sprintf("%.0f%%", 100*st.Med)
			if st.Min < minBusy {
				out += " *not saturated*"
			}
			return out
		}
		return "-"
	}
	if rows := byPart["tls"]; len(rows) > 0 {
		p("## 6. TLS 1.3 termination")
		p("")
		p("Each proxy terminates TLS 1.3 only, with an ECDSA P-256 certificate, and forwards to the backend's 5 KB answer. *Handshakes*: wrk at 50 connections sends `Connection: close`, so every request is a new connection and a full handshake; *keep-alive*: 300 connections. " +
			"nginx has `ssl_session_cache shared:SSL:10m` as its docs recommend (wrk does not resume sessions, so every handshake is a full one). Median of the rounds [min-max], req/s.")
		p("")
		p("| proxy | handshakes per second | keep-alive req/s | keep-alive p99 ms | core 1 (keep-alive) |")
		p("|---|---|---|---|---|")
		for _, s := range extraProxies(false) {
			var hs, ka *ExtraRow
			for _, x := range rows {
				if x.Proxy == s.Name && x.Case == "handshakes" {
					hs = x
				}
				if x.Proxy == s.Name && x.Case == "keep-alive" {
					ka = x
				}
			}
			if hs == nil && ka == nil {
				continue
			}
			h, k, kp, kb, label := "-", "-", "-", "-", s.Label
			if hs != nil {
				h = med(hs)
				if hs.Path != "" {
					label += " (" + hs.Path + ")"
				}
			}
			if ka != nil {
				k, kp, kb = med(ka), p99(ka), busy(ka)
			}
			p("| %s | %s | %s | %s | %s |", label, h, k, kp, kb)
		}
		p("")
		errs(rows)
		p("")
	}
	if rows := byPart["gzip"]; len(rows) > 0 {
		p("## 7. gzip")
		p("")
		p("A 10 KB JSON answer compressed at level 6 for wrk, which sends `Accept-Encoding: gzip`, at 300 connections: Caddy's `encode { gzip 6 }`, nginx's `gzip_comp_level 6` (`gzip_proxied any`), HAProxy's `compression algo gzip` (Debian's HAProxy is built with libslz, which has no levels: `tune.comp.maxlevel 6` is set but is not a zlib level), Traefik's `compress` middleware (gzip at its default level: it has no level option). A check request must get `Content-Encoding: gzip` and the whole JSON. Median of the rounds [min-max].")
		p("")
		p("| proxy | req/s | p99 ms | core 1 |")
		p("|---|---|---|---|")
		for _, x := range rows {
			if x.Err == "" {
				p("| %s | %s | %s | %s |", name(x), med(x), p99(x), busy(x))
			}
		}
		p("")
		errs(rows)
		p("")
	}
	if rows := byPart["scaling"]; len(rows) > 0 {
		p("## 8. Connection scaling")
		p("")
		p("One process per proxy, wrk at each level of concurrent connections in turn (%v were planned; see *Not measured* for a level the machine's open-file limit lowered; %s each, after a warm-up at 100), one round. Peak RSS is VmHWM after each level (it only grows, so each figure is the peak up to that level). "+
			"The gateway rows: every duty (audit, jwt_auth, rbac, rate_limit, permission) with transport h1 on Caddy's path (gw-all-h1) and with the apigate wrapper (gw-fast-all), and the apigate wrapper without duties (gw-fast), which the 9,000-connection target compares with nginx.", scalingLevels, r.durStr())
		p("")
		p("| proxy | connections | req/s | p99 ms | peak RSS | errors (non-2xx and socket) | core 1 |")
		p("|---|---|---|---|---|---|---|")
		for _, x := range rows {
			if x.Err == "" {
				p("| %s | %s | %s | %.1f | %.1f MB | %.0f | %s |", name(x), strings.TrimSuffix(x.Case, " connections"), med(x), x.Extra["p99_ms"], x.Extra["peak_rss_mb"], x.Extra["errors"], busy(x))
			}
		}
		p("")
		errs(rows)
		p("")
	}
	if rows := byPart["latency"]; len(rows) > 0 {
		p("## 9. Latency at a fixed rate")
		p("")
		p("`benchtool openloop` (Debian packages no wrk2) schedules requests at a fixed rate over 300 kept-alive connections and measures each one from the time it was *scheduled*, so a stalled server is charged for the requests it delayed (no coordinated omission). Rates: 50%% and 80%% of the proxy's maximum in this run's load rounds (300 connections). %s per rate. "+
			"The generator shares core 0 with the backend: a request it could only send more than 1 ms after its time is counted as *sent late*, and its delay is charged to the proxy, so these figures are upper bounds; the *direct* rows (the backend alone) show that floor.", r.latStr())
		p("")
		p("| proxy | load | rate req/s | P50 ms | P99 ms | P99.9 ms | max ms | sent late (> 1 ms) | errors |")
		p("|---|---|---|---|---|---|---|---|---|")
		for _, x := range rows {
			if x.Err == "" {
				late := fmt.Sprintf("%.0f of %.0f", x.Extra["late"], x.Extra["sent"])
				if x.Extra["late"] > 0.1*x.Extra["sent"] {
					late += " (*the generator could not keep this rate: not the proxy's figure*)"
				}
				p("| %s | %s of %.0f | %.0f | %.2f | %.2f | %.2f | %.1f | %s | %.0f |", name(x), x.Case, x.Extra["max"], x.Extra["rate"],
					x.Extra["p50_ms"], x.Extra["p99_ms"], x.Extra["p999_ms"], x.Extra["max_ms"], late, x.Extra["errors"])
			}
		}
		p("")
		errs(rows)
		p("")
	}
	r.breakerMarkdown(p)
	if rows := byPart["slowloris"]; len(rows) > 0 {
		p("## 11b. Slow request heads (slowloris)")
		p("")
		p("%d connections each send the start of a request head, then one more header line every 5 s (as slowloris does; both servers keep such a connection until their header timeout, a minute by default). Per connection: the resident memory (VmRSS, nginx master + worker) it adds, measured 6 s after the heads began; legitimate load: wrk at 300 connections with the slow heads held, over the same without them, in the same run.", slowlorisConns)
		p("")
		p("| proxy | memory per slow head (KB, rounds) | legitimate throughput with / without |")
		p("|---|---|---|")
		for _, x := range rows {
			if x.Err == "" && len(x.Rounds) > 0 {
				var shares []string
				for r := 1; r <= len(x.Rounds); r++ {
					if v, ok := x.Extra[fmt.Sprintf("throughput_share_r%d", r)]; ok {
						shares = append(shares, fmt.Sprintf("%.2f", v))
					}
				}
				st := stat(x.Rounds)
				p("| %s | %.1f [%.1f-%.1f] | %s |", name(x), st.Med, st.Min, st.Max, strings.Join(shares, ", "))
			}
		}
		p("")
		errs(rows)
		p("")
	}
	if rows := byPart["idle"]; len(rows) > 0 {
		p("## 11. Idle connections")
		p("")
		p("Resident memory (VmRSS, for nginx master + worker) of each proxy holding the idle keep-alive client connections of the table (10,000 where the open-file limit allows), each of which got one answer; measured 2 s after the last one went idle. The gateway rows as in the scaling part: every duty on Caddy's path and with the apigate wrapper, and the apigate wrapper without duties.")
		p("")
		p("| proxy | RSS with the idle connections | RSS before | per connection |")
		p("|---|---|---|---|")
		for _, x := range rows {
			if x.Err == "" && len(x.Rounds) > 0 {
				n := parseLeadingFloat(x.Case)
				p("| %s | %.1f MB | %.1f MB | %.1f KB |", name(x), x.Rounds[0], x.Extra["rss_before_mb"], 1000*(x.Rounds[0]-x.Extra["rss_before_mb"])/n)
			}
		}
		p("")
		errs(rows)
		p("")
	}
}

func (r *Report) durStr() string { return fmt.Sprintf("%.0f s", r.DurationS) }

// latStr is the latency part's duration per rate (two wrk durations in
// reports from before it was recorded).
func (r *Report) latStr() string {
	if r.LatencyS > 0 {
		return fmt.Sprintf("%.0f s", r.LatencyS)
	}
	return fmt.Sprintf("%.0f s", 2*r.DurationS)
}

// slowlorisConns is how many slow-head connections the slowloris part
// holds (issue 31).
const slowlorisConns = 3000

// slowlorisPart measures, for nginx and the fast path, what 3,000
// connections that each sent part of a request head, then a header line
// every 5 s (slowloris), cost: the resident memory each adds, and the
// legitimate load's throughput (wrk, 300 connections) beside them over
// without them. Both servers keep such a connection until their header
// timeout (a minute by default), so its memory is what an attacker buys.
func (b *Bench) slowlorisPart() {
	n := min(slowlorisConns, maxConns()/2)
	progress("slowloris: %d connections sending a head a line every 5 s", n)
	rows := map[string]*ExtraRow{}
	for round := 1; round <= b.extraRounds(); round++ {
		for _, s := range []Scenario{
			{Name: "nginx", Label: "nginx", Server: "nginx"},
			{Name: "gw-fast", Label: "gateway, apigate wrapper", Server: "gateway", Conf: fast(Conf{})},
		} {
			pi, err := b.withServer(s, nil, fmt.Sprintf("slowloris-%s-r%d", s.Name, round), "/items/1", func(p *Proc, base string) error {
				url := base + "/items/1"
				clean, err := runWrk(b.wrkJob(s, url, 300, b.Dur, 0))
				if err != nil {
					return err
				}
				rss := func() float64 {
					v := 0.0
					for _, pid := range append([]int{p.Pid()}, descendants(p.Pid())...) {
						v += float64(statusKB(pid, "VmRSS:")) / 1024
					}
					return v * 1.048576 // MB
				}
				before := rss()
				cmd := exec.Command("taskset", "-c", coreLoad, b.Tool, "slowloris", strings.TrimPrefix(base, "http://"), strconv.Itoa(n), "5s")
				cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
				stdin, _ := cmd.StdinPipe()
				out, _ := cmd.StdoutPipe()
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					return err
				}
				defer func() { stdin.Close(); cmd.Wait() }()
				if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
					return fmt.Errorf("slowloris: %q %v", line, err)
				}
				time.Sleep(6 * time.Second) // a line sent on every connection since
				held := rss()
				attacked, err := runWrk(b.wrkJob(s, url, 300, b.Dur, 0))
				if err != nil {
					return err
				}
				row := rowFor(rows, &b.report.Extras, "slowloris", s.Name, fmt.Sprintf("%d slow heads", n))
				row.add(round, 1024*(held-before)/float64(n), nil) // KB per connection
				row.Extra[fmt.Sprintf("throughput_share_r%d", round)] = attacked.RPS / clean.RPS
				row.Extra["rss_before_mb"], row.Extra["rss_held_mb"] = before, held
				row.Checked = "the legitimate load got only 2xx answers with and without the slow heads"
				if clean.Non2xx+clean.Errors+attacked.Non2xx+attacked.Errors > 0 {
					return fmt.Errorf("non-2xx or socket errors: %d/%d without, %d/%d with", clean.Non2xx, clean.Errors, attacked.Non2xx, attacked.Errors)
				}
				progress("  slowloris %-8s %.1f KB per slow head (RSS %.1f -> %.1f MB), legitimate load %.0f -> %.0f req/s (%.2fx)",
					s.Name, 1024*(held-before)/float64(n), before, held, clean.RPS, attacked.RPS, attacked.RPS/clean.RPS)
				return nil
			})
			if err != nil {
				rowFor(rows, &b.report.Extras, "slowloris", s.Name, "error").Err = err.Error()
				progress("  slowloris %-8s ERROR: %s", s.Name, oneLine(err.Error()))
			}
			setPath(b.report.Extras, "slowloris", s.Name, pi)
		}
	}
}

// cmdSlowloris is `benchtool slowloris <addr> <n> <interval>`: it opens n
// connections, sends each the start of a request head, prints "ready",
// then sends one more header line on each every interval, until stdin
// closes.
func cmdSlowloris(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: slowloris <addr> <n> <interval>")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	every, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %v", i, err)
		}
		fmt.Fprintf(c, "GET /items/%d HTTP/1.1\r\nHost: %s\r\nUser-Agent: slow\r\n", i, args[0])
		conns = append(conns, c)
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	t := time.NewTicker(every)
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-done:
			for _, c := range conns {
				c.Close()
			}
			return nil
		case <-t.C:
			for _, c := range conns {
				fmt.Fprintf(c, "X-Slow-%d: %d\r\n", k, k)
			}
		}
	}
}
