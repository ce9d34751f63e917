package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// WrkResult is one wrk run.
type WrkResult struct {
	RPS      float64 `json:"rps"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	Requests int64   `json:"requests"`
	Non2xx   int64   `json:"non_2xx"`
	Errors   int64   `json:"socket_errors"`
	// MeanMs is the mean latency, from loaders that report no
	// percentiles (h2load); 0 for wrk's runs.
	MeanMs float64 `json:"mean_ms,omitempty"`
}

// WrkJob describes a wrk invocation.
type WrkJob struct {
	URL      string
	Conns    int
	Duration time.Duration
	Header   string // full header line, e.g. "Authorization: Bearer x"
	Script   string // Lua script path
	Env      []string
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reReqs   = regexp.MustCompile(`(\d+) requests in`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSock   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	reLat    = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// runWrk runs wrk with one thread pinned to core 0 (beside the backend).
func runWrk(j WrkJob) (WrkResult, error) {
	args := []string{"-c", "0", "wrk", "-t1", "-c", strconv.Itoa(j.Conns),
		"-d", fmt.Sprintf("%ds", int(j.Duration.Seconds())), "--latency", "--timeout", "5s"}
	if j.Header != "" {
		args = append(args, "-H", j.Header)
	}
	if j.Script != "" {
		args = append(args, "-s", j.Script)
	}
	args = append(args, j.URL)
	cmd := exec.Command("taskset", args...)
	cmd.Env = append(os.Environ(), j.Env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return WrkResult{}, fmt.Errorf("wrk: %v: %s", err, strings.TrimSpace(errb.String()+out.String()))
	}
	return parseWrk(out.String())
}

func parseWrk(s string) (WrkResult, error) {
	var r WrkResult
	m := reRPS.FindStringSubmatch(s)
	if m == nil {
		return r, fmt.Errorf("wrk output without Requests/sec: %s", s)
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	if m = reReqs.FindStringSubmatch(s); m != nil {
		r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m = reNon2xx.FindStringSubmatch(s); m != nil {
		r.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m = reSock.FindStringSubmatch(s); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.Errors += n
		}
	}
	lat := reLat.FindAllStringSubmatch(s, -1)
	if len(lat) != 2 {
		return r, fmt.Errorf("wrk output without its 50%% and 99%% latency lines (found %d): %s", len(lat), s)
	}
	for _, m := range lat {
		v := toMs(m[2], m[3])
		if m[1] == "50" {
			r.P50ms = v
		} else {
			r.P99ms = v
		}
	}
	return r, nil
}

// toMs is a latency of wrk's or h2load's output (a number and its unit:
// us, ms or s) in milliseconds.
func toMs(num, unit string) float64 {
	v, _ := strconv.ParseFloat(num, 64)
	switch unit {
	case "us":
		v /= 1000
	case "s":
		v *= 1000
	}
	return v
}
