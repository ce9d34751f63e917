package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Which path of the gateway served a run is the gateway's to say, not the
// bench's: a config with the apigate listener wrapper is served by the fast
// path only when the wrapper could compile every route of the server. So
// each gateway run records what the gateway said: its log line at config
// load ("fast path on", or "fast path off" with the reason) and its
// gateway_fastpath_requests_total counter over the measured runs. The
// report labels every gateway row with that, and a row whose plan and
// observation disagree is flagged as a bug in the bench.

const fastpathCounter = "gateway_fastpath_requests_total"

// PathInfo is what the gateway said about the path that served a run.
type PathInfo struct {
	// Wrapper: the config had the apigate listener wrapper.
	Wrapper bool `json:"wrapper"`
	// Logged is the last fast-path line of the gateway's log: "on",
	// "off", or "" when there was none.
	Logged string `json:"logged,omitempty"`
	// Reason is the reason of a "fast path off" line.
	Reason string `json:"reason,omitempty"`
	// Served is how many requests the fast path counted during the
	// measured runs; Requests how many wrk completed in them.
	Served   float64 `json:"served"`
	Requests float64 `json:"requests"`
	// Proto is the run's protocol when its clients spoke HTTP/2 or
	// HTTP/3 (protoH2, protoH3). Until the fast path serves h2 (issue
	// 36), the apigate wrapper hands every h2 connection to Caddy's
	// server; HTTP/3 (QUIC, over UDP) never reaches the wrapper, which
	// wraps TCP listeners: with the fast path on, a count of 0 is then
	// Caddy's path, not a contradiction.
	Proto string `json:"proto,omitempty"`
}

// handed: the fast path was on but served none of an HTTP/2 or HTTP/3
// run's requests: Caddy's server did.
func (pi *PathInfo) handed() bool {
	return pi != nil && (pi.Proto == protoH2 || pi.Proto == protoH3) && pi.Logged == "on" && pi.Served == 0 && pi.Requests > 0
}

// readPath reads the gateway's log (Caddy's JSON lines) for its last
// fast-path line.
func readPath(logPath string, wrapper bool, served, requests float64) *PathInfo {
	pi := &PathInfo{Wrapper: wrapper, Served: served, Requests: requests}
	pi.Logged, pi.Reason = lastFastPathLine(logPath)
	return pi
}

// lastFastPathLine returns "on" or "off" (with the reason) from the last
// fast-path line of a Caddy JSON log, or "" when it has none.
func lastFastPathLine(logPath string) (state, reason string) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"fast path o`) {
			continue
		}
		var l struct {
			Msg    string `json:"msg"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		switch l.Msg {
		case "fast path on":
			state, reason = "on", ""
		case "fast path off":
			state, reason = "off", l.Reason
		}
	}
	return state, reason
}

// FastServed reports whether the fast path served the run.
func (pi *PathInfo) FastServed() bool { return pi != nil && pi.Logged == "on" && pi.Served > 0 }

// Label is the path in words, for the report.
func (pi *PathInfo) Label() string {
	switch {
	case pi == nil:
		return "-"
	case pi.handed() && pi.Proto == protoH3:
		return "Caddy's path (HTTP/3: Caddy's QUIC server; the apigate wrapper wraps TCP only)"
	case pi.handed():
		return "Caddy's path (fast path on, HTTP/2 connections handed to Caddy's server)"
	case pi.Logged == "on":
		return "fast path"
	case pi.Logged == "off":
		return "Caddy's path (fast path off: " + pi.Reason + ")"
	case pi.Wrapper:
		return "unknown (no fast path line in the gateway's log)"
	}
	return "Caddy's path"
}

// Problem is a contradiction between the plan and what the gateway said,
// which would make the row's label wrong: a bug in the bench (or in the
// gateway's reporting), never to be read past.
func (pi *PathInfo) Problem() string {
	if pi == nil {
		return ""
	}
	switch {
	case !pi.Wrapper && (pi.Logged != "" || pi.Served > 0):
		return fmt.Sprintf("no apigate wrapper was configured, but the gateway logged %q and its fast path counted %.0f requests", pi.Logged, pi.Served)
	case pi.Wrapper && pi.Logged == "":
		return "the apigate wrapper was configured, but the gateway logged no fast path line"
	case pi.Logged == "off" && pi.Served > 0:
		return fmt.Sprintf("fast path off, but its counter counted %.0f requests", pi.Served)
	case pi.Logged == "on" && pi.Requests > 0 && pi.Served < 0.9*pi.Requests && !pi.handed():
		return fmt.Sprintf("fast path on, but it counted only %.0f of the %.0f requests (%.0f%%)", pi.Served, pi.Requests, 100*pi.Served/pi.Requests)
	}
	return ""
}

// pathLabel is the path that served a row's runs: one label when every
// run agrees, else each label with its rounds.
func pathLabel(samples []Sample) string {
	rounds := map[string][]string{}
	for _, s := range samples {
		if s.Path == nil || s.Err != "" {
			continue
		}
		l := s.Path.Label()
		if s.Path.Logged == "on" && s.Path.Requests > 0 && !s.Path.handed() {
			l = fmt.Sprintf("fast path (%.0f%% of requests counted)", 100*min(1, s.Path.Served/s.Path.Requests))
		}
		rounds[l] = append(rounds[l], fmt.Sprint(s.Round))
	}
	if len(rounds) == 0 {
		return "-"
	}
	if len(rounds) == 1 {
		for l := range rounds {
			return l
		}
	}
	var parts []string
	for _, l := range sortedKeys(rounds) {
		parts = append(parts, l+" in round "+strings.Join(rounds[l], ", "))
	}
	return strings.Join(parts, "; ")
}

// pathProblems lists the contradictions of a row's runs, by round.
func pathProblems(samples []Sample) []string {
	var out []string
	for _, s := range samples {
		if p := s.Path.Problem(); p != "" && s.Err == "" {
			out = append(out, fmt.Sprintf("round %d: %s", s.Round, p))
		}
	}
	sort.Strings(out)
	return out
}

// fastRow reports whether any run of a row was served by the fast path.
func fastRow(samples []Sample) bool {
	for _, s := range samples {
		if s.Path.FastServed() {
			return true
		}
	}
	return false
}

// pathNote is the path that served a gateway row whose config has the
// apigate wrapper ("" for any other row).
func (r *Report) pathNote(name string) string {
	s, ok := r.scenario(name)
	if !ok || s.Server != "gateway" || !s.Conf.FastPath {
		return ""
	}
	return pathLabel(r.Samples[name])
}
