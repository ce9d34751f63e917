package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The rows over TLS (issue 36: HTTP/2, and HTTP/1.1 over TLS beside it)
// are loaded by h2load (Debian package nghttp2-client), as the issue
// measured them: wrk speaks no HTTP/2. Like wrk it runs one thread pinned
// to core 0, beside the backend.

// Protocols of a scenario's load (Scenario.Proto).
const (
	protoH2    = "h2"     // HTTP/2 over TLS 1.3 (ALPN h2): h2load -c50 -m10
	protoTLSH1 = "tls-h1" // HTTP/1.1 over TLS 1.3 (ALPN http/1.1): h2load --h1 -c300
)

// h2Conns and h2Streams are the HTTP/2 rows' load: 50 connections of 10
// concurrent streams each (issue 36's measurement).
const (
	h2Conns   = 50
	h2Streams = 10
)

// H2Job describes an h2load invocation.
type H2Job struct {
	URL      string
	Proto    string // protoH2 | protoTLSH1
	Conns    int
	Streams  int // concurrent streams per connection (1 for HTTP/1.1: no pipelining)
	Duration time.Duration
	Header   string // full header line, e.g. "Authorization: Bearer x"
}

// args is h2load's command line (after taskset's).
func (j H2Job) args() []string {
	a := []string{"h2load", "-t1", "-c", strconv.Itoa(j.Conns), "-m", strconv.Itoa(max(j.Streams, 1)),
		"-D", strconv.Itoa(max(int(j.Duration.Seconds()), 1))}
	if j.Proto == protoTLSH1 {
		a = append(a, "--h1")
	} else {
		a = append(a, "--npn-list=h2")
	}
	if j.Header != "" {
		a = append(a, "-H", j.Header)
	}
	return append(a, j.URL)
}

// wantALPN is the application protocol h2load must report having spoken:
// a server that fell back to HTTP/1.1 on an h2 row measured something
// else than the row says.
func (j H2Job) wantALPN() string {
	if j.Proto == protoTLSH1 {
		return "http/1.1"
	}
	return "h2"
}

// h2loadGrace is how long past its duration an h2load run may take
// before it is stopped: its timing-based mode was seen to run on for
// minutes (HTTP/1.1 over TLS against HAProxy on a loaded machine, with
// some of its clients never connected); a run must end.
var h2loadGrace = 30 * time.Second

// runH2load runs h2load with one thread pinned to core 0.
func runH2load(j H2Job) (WrkResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.Duration+h2loadGrace)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", coreLoad}, j.args()...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return WrkResult{}, fmt.Errorf("h2load did not end %s after its %s run and was stopped: %s", h2loadGrace, j.Duration, oneLine(strings.TrimSpace(errb.String()+out.String())))
		}
		return WrkResult{}, fmt.Errorf("h2load: %v: %s", err, strings.TrimSpace(errb.String()+out.String()))
	}
	return parseH2load(out.String(), j.wantALPN())
}

var (
	h2Finished = regexp.MustCompile(`(?m)^finished in [0-9.]+m?s, ([0-9.]+) req/s`)
	h2Requests = regexp.MustCompile(`(?m)^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Status   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2ALPN     = regexp.MustCompile(`(?m)^Application protocol: (\S+)`)
	h2Mean     = regexp.MustCompile(`(?m)^time for request:\s+\S+\s+\S+\s+([0-9.]+)(us|ms|s)\s`)
)

// parseH2load reads h2load's summary into the bench's result: req/s,
// requests done, non-2xx/3xx answers (4xx and 5xx, as wrk counts them)
// and errors (requests failed other than by their status: resets,
// network errors, timeouts). h2load reports no latency percentiles, so
// P50ms and P99ms stay 0 (the report shows "-"); MeanMs is its mean. An
// output whose negotiated protocol is not want is an error.
func parseH2load(s, want string) (WrkResult, error) {
	var r WrkResult
	m := h2ALPN.FindStringSubmatch(s)
	if m == nil {
		return r, fmt.Errorf("h2load output without its Application protocol line (no TLS connection succeeded?): %s", oneLine(s))
	}
	if m[1] != want {
		return r, fmt.Errorf("h2load negotiated %q, not %q: the server did not offer it", m[1], want)
	}
	if m = h2Finished.FindStringSubmatch(s); m == nil {
		return r, fmt.Errorf("h2load output without its finished line: %s", oneLine(s))
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	n := func(v string) int64 { x, _ := strconv.ParseInt(v, 10, 64); return x }
	if m = h2Requests.FindStringSubmatch(s); m == nil {
		return r, fmt.Errorf("h2load output without its requests line: %s", oneLine(s))
	}
	done, failed, errored, timeout := n(m[3]), n(m[5]), n(m[6]), n(m[7])
	r.Requests = done
	if m = h2Status.FindStringSubmatch(s); m == nil {
		return r, fmt.Errorf("h2load output without its status codes line: %s", oneLine(s))
	}
	r.Non2xx = n(m[3]) + n(m[4])
	// failed counts the 4xx/5xx answers too; errored is its part that is
	// not an HTTP answer
	r.Errors = max(failed-r.Non2xx, errored+timeout, 0)
	if m = h2Mean.FindStringSubmatch(s); m != nil {
		r.MeanMs = toMs(m[1], m[2])
	}
	return r, nil
}
