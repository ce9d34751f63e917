package main

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Circuit breaking: three upstreams behind each proxy, one of which starts
// failing while a fixed-rate load runs. Two failures, each on a fresh proxy:
// the upstream refuses connections (it stops listening), or it answers 500.
// Measured: the client requests that failed, and for the 500s how many
// requests the failing upstream still got and when the last one came.

// breakerHealthy are the two healthy upstreams (listeners of the nginx
// backend); breakerFlaky is the one that fails, breakerCtl its control.
var breakerHealthy = [2]string{"127.0.0.1:19908", "127.0.0.1:19909"}

const (
	breakerFlaky  = "127.0.0.1:19960"
	breakerCtl    = "127.0.0.1:19961"
	breakerRate   = 2000 // requests per second
	breakerBefore = 3 * time.Second
	breakerAfter  = 9 * time.Second
)

// BreakerResult is one proxy under one failure.
type BreakerResult struct {
	Proxy   string `json:"proxy"`
	Failure string `json:"failure"` // refuse | 500
	// ClientFailures: requests the client saw fail (errors or non-2xx)
	// during the whole run (the upstream was fine before the failure).
	ClientFailures int64   `json:"client_failures"`
	Sent           int64   `json:"sent"`
	P99ms          float64 `json:"p99_ms"`
	// UpstreamAfter: requests the failing upstream got after it began
	// failing (500 only: a refused connection reaches nothing);
	// LastAfterMs: when the last of them came, from the failure's start.
	UpstreamAfter int64   `json:"upstream_requests_after_failure"`
	LastAfterMs   float64 `json:"last_upstream_request_after_ms"`
	Err           string  `json:"error,omitempty"`
}

// flaky is the failing upstream: `benchtool flaky <addr> <ctl>`. Its
// control address takes POST /mode?m=ok|refuse|500 and GET /stats.
type flaky struct {
	addr     string
	mu       sync.Mutex
	mode     string
	ln       net.Listener
	srv      *http.Server
	since    time.Time
	after    atomic.Int64 // requests since the mode changed
	lastNano atomic.Int64 // time of the last one, since the mode changed
}

func serveFlaky(addr, ctl string) error {
	f := &flaky{addr: addr}
	if err := f.setMode("ok"); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mode", func(w http.ResponseWriter, r *http.Request) {
		if err := f.setMode(r.URL.Query().Get("m")); err != nil {
			http.Error(w, err.Error(), 400)
		}
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"after":%d,"last_ms":%.1f}`, f.after.Load(), float64(f.lastNano.Load())/1e6)
	})
	return listen(ctl, mux)
}

func (f *flaky) setMode(m string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch m {
	case "ok", "500", "refuse":
	default:
		return fmt.Errorf("unknown mode %q", m)
	}
	f.mode = m
	f.since = time.Now()
	f.after.Store(0)
	f.lastNano.Store(0)
	if m == "refuse" {
		if f.srv != nil {
			f.srv.Close() // the listener and every connection
			f.srv, f.ln = nil, nil
		}
		return nil
	}
	if f.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	f.ln = ln
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), IdleTimeout: 120 * time.Second}
	go f.srv.Serve(ln)
	return nil
}

func (f *flaky) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	mode, since := f.mode, f.since
	f.mu.Unlock()
	f.after.Add(1)
	f.lastNano.Store(int64(time.Since(since)))
	if mode == "500" {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(backendBody))
}

// breaker runs the circuit-breaking part for each proxy and failure.
func (b *Bench) breaker() {
	progress("circuit breaking: 3 upstreams, one refuses connections or answers 500 after %s, at %d req/s", breakerBefore, breakerRate)
	fp, err := startPinned("flaky", coreLoad, filepath.Join(b.logDir, "flaky.log"), []string{"GOMAXPROCS=1"}, b.Tool, "flaky", breakerFlaky, breakerCtl)
	if err != nil {
		b.report.NotRun = append(b.report.NotRun, "circuit breaking: "+err.Error())
		return
	}
	defer fp.Stop(3 * time.Second)
	if err := waitTCP(breakerCtl, 10*time.Second, fp); err != nil {
		b.report.NotRun = append(b.report.NotRun, "circuit breaking: "+err.Error())
		return
	}
	for _, proxy := range []Scenario{
		{Name: "gateway", Server: "gateway", Conf: Conf{Transport: "h1"}},
		{Name: "nginx", Server: "nginx"},
		{Name: "haproxy", Server: "haproxy"},
		{Name: "traefik", Server: "traefik"},
	} {
		for _, failure := range []string{"refuse", "500"} {
			r := b.breakerRun(proxy, failure)
			b.report.Breaker = append(b.report.Breaker, r)
			if r.Err != "" {
				progress("  %-8s %-6s ERROR: %s", proxy.Name, failure, oneLine(r.Err))
				continue
			}
			progress("  %-8s %-6s client failures %d of %d, p99 %.1f ms, failing upstream got %d requests after, the last at %.0f ms",
				proxy.Name, failure, r.ClientFailures, r.Sent, r.P99ms, r.UpstreamAfter, r.LastAfterMs)
		}
	}
}

func (b *Bench) breakerRun(s Scenario, failure string) BreakerResult {
	r := BreakerResult{Proxy: s.Name, Failure: failure}
	ctl := func(m string) error {
		resp, err := plainClient.Post("http://"+breakerCtl+"/mode?m="+m, "text/plain", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("flaky: mode %s: %d", m, resp.StatusCode)
		}
		return nil
	}
	if err := ctl("ok"); err != nil {
		r.Err = err.Error()
		return r
	}
	const port = 19975 // (ops uses 19970)
	c := b.conf(s, port)
	c.Upstreams = []string{breakerHealthy[0], breakerHealthy[1], breakerFlaky}
	tag := fmt.Sprintf("breaker-%s-%s", s.Name, failure)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitPortFree(addr, 5*time.Second)
	p, err := b.startServer(s, c, tag)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer func() { p.Stop(5 * time.Second); waitPortFree(addr, 5*time.Second) }()
	if err := waitStatus("http://"+addr+"/", "", 200, 20*time.Second, p); err != nil {
		r.Err = err.Error()
		return r
	}
	type olr struct {
		res OpenLoopResult
		err error
	}
	done := make(chan olr, 1)
	go func() {
		res, err := b.runOpenLoop(addr, "/", "", breakerRate, 50, breakerBefore+breakerAfter)
		done <- olr{res, err}
	}()
	select {
	case <-time.After(breakerBefore):
	case o := <-done:
		r.Err = fmt.Sprintf("load ended early: %v", o.err)
		return r
	}
	if err := ctl(failure); err != nil {
		r.Err = err.Error()
		return r
	}
	o := <-done
	if o.err != nil {
		r.Err = o.err.Error()
		return r
	}
	r.ClientFailures, r.Sent, r.P99ms = o.res.Errors, o.res.Sent, o.res.P99ms
	if failure == "500" {
		r.UpstreamAfter = int64(jsonNumber("http://"+breakerCtl+"/stats", "after"))
		r.LastAfterMs = jsonNumber("http://"+breakerCtl+"/stats", "last_ms")
	}
	if p.Exited() {
		r.Err = "proxy exited: " + p.LogTail(5)
	}
	return r
}

func (r *Report) breakerMarkdown(p func(string, ...any)) {
	if len(r.Breaker) == 0 {
		return
	}
	p("## 10. Circuit breaking")
	p("")
	p("Three upstreams behind each proxy (round robin); a fixed-rate load of %d req/s over 50 connections for %s; after %s one upstream either stops listening (connections refused) or answers every request with 500. "+
		"Each proxy is configured as its documentation recommends for taking a failing upstream out: the gateway with Caddy's passive health checks (`max_fails 1`, `fail_duration 10s`, `unhealthy_status 5xx`) and retries (`lb_retries 2`, `lb_retry_match` on `{rp.status_code} >= 500`); "+
		"nginx with `max_fails=1 fail_timeout=10s` and `proxy_next_upstream error timeout http_500`; HAProxy with `observe layer7`, `error-limit 1`, `on-error mark-down`, `retries 2`, `option redispatch` and `retry-on all-retryable-errors 500`; "+
		"Traefik with its passive health check (`maxFailedAttempts 1`, `failureWindow 10s`: a connection error or a 5xx takes the server out) and the `retry` middleware (`attempts 3`; Traefik retries failed connections, never an answer).",
		breakerRate, breakerBefore+breakerAfter, breakerBefore)
	p("")
	p("| proxy | failure | client requests failed | sent | P99 ms (whole run, from the scheduled time) | requests the failing upstream still got | the last one, after the failure began |")
	p("|---|---|---|---|---|---|---|")
	for _, x := range r.Breaker {
		if x.Err != "" {
			p("| %s | %s | error: %s | | | | |", x.Proxy, x.Failure, oneLine(x.Err))
			continue
		}
		up, last := "- (refused: nothing arrives)", "-"
		if x.Failure == "500" {
			up, last = fmt.Sprint(x.UpstreamAfter), fmt.Sprintf("%.0f ms", x.LastAfterMs)
		}
		p("| %s | %s | %d | %d | %.1f | %s | %s |", x.Proxy, map[string]string{"refuse": "connections refused", "500": "answers 500"}[x.Failure], x.ClientFailures, x.Sent, x.P99ms, up, last)
	}
	p("")
}
