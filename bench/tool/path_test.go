package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLastFastPathLine reads the gateway's own words from a Caddy log:
// the last fast-path line wins (a reload logs again).
func TestLastFastPathLine(t *testing.T) {
	for _, tc := range []struct {
		name, log, state, reason string
	}{
		{"on", `{"level":"info","ts":1,"logger":"caddy.listeners.apigate","msg":"fast path on","server":"srv0"}`, "on", ""},
		{"off with reason", `{"level":"warn","ts":1,"logger":"caddy.listeners.apigate","msg":"fast path off","server":"srv0","reason":"http.handlers.audit"}`, "off", "http.handlers.audit"},
		{"none", `{"level":"error","ts":1,"msg":"something else"}`, "", ""},
		{"last wins", `{"msg":"fast path off","server":"srv0","reason":"http.handlers.encode"}` + "\n" + `not json "fast path on"` + "\n" + `{"msg":"fast path on","server":"srv0"}`, "on", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "gw.log")
			if err := os.WriteFile(p, []byte(tc.log+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			st, reason := lastFastPathLine(p)
			if st != tc.state || reason != tc.reason {
				t.Fatalf("got %q %q, want %q %q", st, reason, tc.state, tc.reason)
			}
		})
	}
}

// TestPathLabels: a row is labelled with the path the gateway said served
// it, and a row whose plan and observation disagree is a bench bug.
func TestPathLabels(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pi        PathInfo
		label     string
		bug       string // substring of Problem(), "" for none
		fastServe bool
	}{
		{"fast path served", PathInfo{Wrapper: true, Logged: "on", Served: 1000, Requests: 1000}, "fast path", "", true},
		{"duties keep it off", PathInfo{Wrapper: true, Logged: "off", Reason: "http.handlers.audit"}, "Caddy's path (fast path off: http.handlers.audit)", "", false},
		{"no wrapper", PathInfo{}, "Caddy's path", "", false},
		{"on but counted nothing", PathInfo{Wrapper: true, Logged: "on", Served: 0, Requests: 1000}, "fast path", "counted only 0 of the 1000", false},
		{"off but counted", PathInfo{Wrapper: true, Logged: "off", Reason: "x", Served: 5}, "Caddy's path (fast path off: x)", "fast path off, but its counter", false},
		{"wrapper but silent", PathInfo{Wrapper: true}, "unknown (no fast path line in the gateway's log)", "logged no fast path line", false},
		{"fast path without a wrapper", PathInfo{Logged: "on", Served: 10}, "fast path", "no apigate wrapper was configured", true},
		// HTTP/2 runs (issue 36): until the fast path serves h2, the wrapper
		// hands the connections to Caddy's server; that is Caddy's path,
		// not a bench bug; once it serves them, the same row says so
		{"h2 handed to Caddy's server", PathInfo{Wrapper: true, Logged: "on", Served: 0, Requests: 1000, Proto: protoH2}, "Caddy's path (fast path on, HTTP/2 connections handed to Caddy's server)", "", false},
		{"h2 served by the fast path", PathInfo{Wrapper: true, Logged: "on", Served: 1000, Requests: 1000, Proto: protoH2}, "fast path", "", true},
		{"h3 on Caddy's QUIC server", PathInfo{Wrapper: true, Logged: "on", Served: 0, Requests: 1000, Proto: protoH3}, "Caddy's path (HTTP/3: Caddy's QUIC server; the apigate wrapper wraps TCP only)", "", false},
		{"h2 partly counted", PathInfo{Wrapper: true, Logged: "on", Served: 10, Requests: 1000, Proto: protoH2}, "fast path", "counted only 10 of the 1000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pi := tc.pi
			if got := pi.Label(); got != tc.label {
				t.Errorf("label %q, want %q", got, tc.label)
			}
			got := pi.Problem()
			if (tc.bug == "") != (got == "") || !strings.Contains(got, tc.bug) {
				t.Errorf("problem %q, want one containing %q", got, tc.bug)
			}
			if pi.FastServed() != tc.fastServe {
				t.Errorf("FastServed %v", pi.FastServed())
			}
		})
	}
	// a row: one label when the rounds agree, each with its rounds when not
	on := &PathInfo{Wrapper: true, Logged: "on", Served: 100, Requests: 100}
	off := &PathInfo{Wrapper: true, Logged: "off", Reason: "http.handlers.jwt_auth"}
	if got := pathLabel([]Sample{{Round: 1, Path: on}, {Round: 2, Path: on}}); got != "fast path (100% of requests counted)" {
		t.Errorf("agreeing rounds: %q", got)
	}
	h2 := &PathInfo{Wrapper: true, Logged: "on", Served: 0, Requests: 100, Proto: protoH2}
	if got := pathLabel([]Sample{{Round: 1, Path: h2}}); got != "Caddy's path (fast path on, HTTP/2 connections handed to Caddy's server)" {
		t.Errorf("h2 handed to Caddy's server: %q", got)
	}
	got := pathLabel([]Sample{{Round: 1, Path: on}, {Round: 2, Path: off}})
	if !strings.Contains(got, "in round 1") || !strings.Contains(got, "fast path off: http.handlers.jwt_auth) in round 2") {
		t.Errorf("disagreeing rounds: %q", got)
	}
}
