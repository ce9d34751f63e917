package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// h2loadOut is h2load 1.52's (Debian 12) output of an HTTP/2 run against
// the bench's nginx over TLS 1.3.
const h2loadOut = `starting benchmark...
spawning thread #0: 2 total client(s). Timing-based test with 0s of warm-up time and 1s of main duration for measurements.
Warm-up started for thread #0.
progress: 50% of clients started
progress: 100% of clients started
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.01s, 20098.00 req/s, 2.72MB/s
requests: 20098 total, 20118 started, 20098 done, 20098 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 20098 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 2.72MB (2854014) total, 1.02MB (1065194) headers (space savings 49.52%), 1.36MB (1426958) data
                     min         max         mean         sd        +/- sd
time for request:      254us      9.97ms       869us       702us    95.92%
time for connect:    12.31ms     13.07ms     12.69ms       535us   100.00%
time to 1st byte:    19.73ms     20.95ms     20.34ms       865us   100.00%
req/s           :   10019.00    10068.41    10043.71       34.93   100.00%
`

// TestParseH2load: the figures of an h2load run, its failures counted as
// wrk's are (4xx/5xx answers apart from resets, errors and timeouts), and
// a run that did not speak the row's protocol, or whose summary is cut,
// is an error rather than a row of zeros.
func TestParseH2load(t *testing.T) {
	r, err := parseH2load(h2loadOut, "h2")
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 20098 || r.Requests != 20098 || r.Non2xx != 0 || r.Errors != 0 || r.MeanMs != 0.869 || r.P99ms != 0 {
		t.Fatalf("%+v", r)
	}

	bad := strings.NewReplacer(
		"20098 succeeded, 0 failed, 0 errored, 0 timeout", "20000 succeeded, 98 failed, 3 errored, 1 timeout",
		"20098 2xx, 0 3xx, 0 4xx, 0 5xx", "20000 2xx, 0 3xx, 90 4xx, 5 5xx").Replace(h2loadOut)
	r, err = parseH2load(bad, "h2")
	if err != nil {
		t.Fatal(err)
	}
	// 95 answers were 4xx/5xx; 3 requests failed otherwise (98 - 95), and
	// errored + timeout is 4: the larger is counted
	if r.Non2xx != 95 || r.Errors != 4 {
		t.Fatalf("failures: %+v", r)
	}
	reset := strings.Replace(h2loadOut, "20098 succeeded, 0 failed, 0 errored, 0 timeout", "20090 succeeded, 8 failed, 0 errored, 0 timeout", 1)
	if r, err = parseH2load(reset, "h2"); err != nil || r.Errors != 8 {
		t.Fatalf("8 failed requests without a 4xx/5xx: %+v, %v", r, err)
	}

	if _, err := parseH2load(h2loadOut, "http/1.1"); err == nil || !strings.Contains(err.Error(), `negotiated "h2"`) {
		t.Fatalf("an h2 run read as HTTP/1.1: %v", err)
	}
	h1 := strings.Replace(h2loadOut, "Application protocol: h2", "Application protocol: http/1.1", 1)
	if _, err := parseH2load(h1, "h2"); err == nil {
		t.Fatal("a server that fell back to HTTP/1.1 passed as an HTTP/2 row")
	}
	for _, cut := range []string{"Application protocol: h2\n", "finished in", "requests: ", "status codes: "} {
		i := strings.Index(h2loadOut, cut)
		if _, err := parseH2load(h2loadOut[:i]+h2loadOut[i+len(cut):], "h2"); err == nil {
			t.Errorf("an output without %q parsed", strings.TrimSpace(cut))
		}
	}
}

// TestH2JobArgs: the rows' load is what the issue measured: HTTP/2 at 50
// connections x 10 streams with h2 alone offered, HTTP/1.1 over TLS at
// 300 connections without pipelining; the token goes in a header.
func TestH2JobArgs(t *testing.T) {
	b := &Bench{tokens: map[string]string{"HS256": "tok"}}
	h2, _ := scenarioByName("gw-fast-all-h2")
	got := b.h2Job(h2, "https://127.0.0.1:1/items/1", h2.Levels()[0], 5*time.Second).args()
	want := []string{"h2load", "-t1", "-c", "50", "-m", "10", "-D", "5", "--npn-list=h2", "-H", "Authorization: Bearer tok", "https://127.0.0.1:1/items/1"}
	if !slices.Equal(got, want) {
		t.Errorf("h2 row: %q, want %q", got, want)
	}
	h1, _ := scenarioByName("gw-fast-tls-h1")
	got = b.h2Job(h1, "https://127.0.0.1:1/items/1", h1.Levels()[0], 5*time.Second).args()
	want = []string{"h2load", "-t1", "-c", "300", "-m", "1", "-D", "5", "--h1", "https://127.0.0.1:1/items/1"}
	if !slices.Equal(got, want) {
		t.Errorf("tls-h1 row: %q, want %q", got, want)
	}
}

// TestTLSRowConfigs: every row over TLS renders a config that terminates
// TLS 1.3 with the bench's certificate and offers h2 by ALPN (nginx and
// HAProxy only when told to; Caddy and Traefik always do), the fast
// path's rows with the apigate wrapper and Caddy's path's without; a row
// in clear text gets neither.
func TestTLSRowConfigs(t *testing.T) {
	work := t.TempDir()
	b := &Bench{Root: "../..", Work: work, Keys: &Keys{HMAC: []byte("s")},
		tlsCert: "/certs/cert.pem", tlsKey: "/certs/key.pem", tlsPem: "/certs/combined.pem"}
	render := func(s Scenario) string {
		t.Helper()
		c := b.conf(s, 19999)
		out := filepath.Join(work, s.Name)
		var err error
		switch s.Server {
		case "nginx":
			err = b.render("nginx.conf.tmpl", out, c)
		case "haproxy":
			err = b.render("haproxy.cfg.tmpl", out, c)
		case "traefik":
			c.TraefikDynamic = out
			err = b.render("traefik-dynamic.yml.tmpl", out, c)
		default:
			err = b.render("Caddyfile.tmpl", out, c)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	want := map[string][]string{
		"nginx":   {"listen 127.0.0.1:19999 ssl http2 ", "ssl_protocols TLSv1.3;", "ssl_certificate /certs/cert.pem;"},
		"haproxy": {"ssl crt /certs/combined.pem ssl-min-ver TLSv1.3 alpn h2,http/1.1"},
		"traefik": {"tls: {}", `certFile: "/certs/cert.pem"`, "minVersion: VersionTLS13"},
		"caddy":   {"https_port 19999", "tls /certs/cert.pem /certs/key.pem {", "protocols tls1.3"},
		"gateway": {"https_port 19999", "tls /certs/cert.pem /certs/key.pem {", "protocols tls1.3"},
	}
	// the rows: HTTP/2 bare and every duty for each proxy
	need := map[string]bool{"nginx-h2": true, "nginx-all-h2": true, "haproxy-h2": true, "haproxy-all-h2": true, "traefik-h2": true, "traefik-all-h2": true,
		"caddy-h2": true, "gw-caddy-h2": true, "gw-caddy-all-h2": true, "gw-fast-h2": true, "gw-fast-all-h2": true}
	for _, s := range scenarios() {
		if s.Proto == "" {
			continue
		}
		delete(need, s.Name)
		if !s.OptIn || s.Group != "tls" {
			t.Errorf("%s: a TLS row outside group tls or in the default run", s.Name)
		}
		conf := render(s)
		for _, w := range want[s.Server] {
			if !strings.Contains(conf, w) {
				t.Errorf("%s: config lacks %q:\n%s", s.Name, w, conf)
			}
		}
		if s.Server == "gateway" && strings.Contains(conf, "apigate") != strings.HasPrefix(s.Name, "gw-fast") {
			t.Errorf("%s: apigate wrapper %v:\n%s", s.Name, strings.Contains(conf, "apigate"), conf)
		}
	}
	for n := range need {
		t.Errorf("no HTTP/2 row %s", n)
	}
	for _, n := range []string{"nginx", "haproxy"} {
		s, _ := scenarioByName(n)
		if conf := render(s); strings.Contains(conf, "ssl") || strings.Contains(conf, "http2") || strings.Contains(conf, "alpn") {
			t.Errorf("%s in clear text renders TLS or h2:\n%s", n, conf)
		}
	}
}

// TestH2loadStopped: an h2load that runs on past its duration (as Debian's
// did against HAProxy on a loaded machine) is stopped and the row gets an
// error, instead of hanging the bench.
func TestH2loadStopped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h2load"), []byte("#!/bin/sh\necho starting benchmark...\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	old := h2loadGrace
	h2loadGrace = 300 * time.Millisecond
	defer func() { h2loadGrace = old }()
	done := make(chan error, 1)
	go func() {
		_, err := runH2load(H2Job{URL: "https://127.0.0.1:1/", Proto: protoH2, Conns: 1, Streams: 1, Duration: time.Second})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not end") {
			t.Fatalf("err %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an h2load that does not end was not stopped within 10 s")
	}
}
