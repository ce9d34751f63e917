package fastpath

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// routesSite exercises routing as Caddyfiles write it: handle blocks (one
// group), handle_path, route, matchers of every supported kind, respond
// with placeholders, header (immediate and deferred), rewrites, header_up
// and header_down, encode, and handle_errors.
const routesSite = `	encode zstd gzip

	@api {
		path /api/*
		not path /api/private/*
	}
	@json header Accept application/json
	@post method POST
	@hostB host b.example.com

	handle /health {
		respond ` + "`" + `{"status":"ok"}` + "`" + ` 200
	}
	handle /static/* {
		header X-Static yes
		header -Server
		respond "static {path} {method} {query} {http.request.host} {uri} {http.request.header.X-Name}" 203
	}
	handle_path /strip/* {
		reverse_proxy {$UP} {
			transport h1
		}
	}
	handle @hostB {
		respond "host b" 200
	}
	handle @api {
		header X-Api 1
		header >X-Deferred late
		route {
			header X-Route 1
			reverse_proxy @post {$UP} {
				transport h1
				header_up X-Up-Static post
				header_down X-Down-Static down
			}
			reverse_proxy {$UP} {
				transport h1
				header_up -User-Agent
				header_up X-Up-Static get
				header_up Host upstream.internal
				header_down -Via
			}
		}
	}
	handle /rewrite/* {
		rewrite * /echo{path}?rewritten=1
		reverse_proxy {$UP} {
			transport h1
		}
	}
	handle /uri/* {
		uri strip_prefix /uri
		uri replace foo bar
		reverse_proxy {$UP} {
			transport h1
		}
	}
	handle /down/* {
		reverse_proxy 127.0.0.1:1 {
			transport h1
		}
	}
	handle /error/* {
		error "teapot {path}" 418
	}
	handle /ph/* {
		respond "{http.request.uri.path} {http.request.uri.query.a} {http.request.header.X-Name} {http.request.cookie.c} {http.vars.client_ip} {http.request.remote.host} {http.request.hostport} {http.request.local.port} {http.request.proto} {http.request.scheme} {http.request.method} {http.request.orig_uri} {http.request.uri.path.0} {http.request.uri.path.file} {time.now.year} {http.matchers.nope} {http.request.body}" 200
	}
	handle /phproxy/* {
		rewrite * /echo/x?q={http.request.uri.query.q}
		reverse_proxy {$UP} {
			transport h1
			header_up X-Orig {http.request.orig_uri}
			header_up X-Client {http.vars.client_ip}
			header_down X-Up-Addr {http.reverse_proxy.upstream.hostport}
			header_down X-Up-Status {http.reverse_proxy.status_code}
			header_down X-Up-Type {http.reverse_proxy.header.Content-Type}
			header_down X-Up-Fails {http.reverse_proxy.upstream.fails}
		}
	}
	handle /json {
		respond @json "json" 200
		respond "not json" 200
	}
	handle /big {
		reverse_proxy {$UP} {
			transport h1
		}
	}
	handle /empty {
	}
	handle {
		header Content-Type application/json
		respond ` + "`" + `{"error":"no_route"}` + "`" + ` 404
	}

	handle_errors {
		@502 expression {err.status_code} == 502
		handle @502 {
			respond "bad gateway: {err.message}" 502
		}
		handle {
			respond "error {err.status_code} {err.status_text}" {err.status_code}
		}
	}`

// TestRoutes sends the same requests through routesSite on both paths.
func TestRoutes(t *testing.T) {
	up := newEchoUpstream(t)
	site := strings.ReplaceAll(routesSite, "{$UP}", up.Addr())
	loadTwin(t, "", site)
	big := strings.Repeat("0123456789", 3000)
	gzip := http.Header{"Accept-Encoding": {"gzip"}}
	zstd := http.Header{"Accept-Encoding": {"zstd"}}
	cases := []difftest.Case{
		{Name: "respond", Seq: []difftest.Request{{Method: "GET", Path: "/health"}, {Method: "HEAD", Path: "/health"}}},
		{Name: "request placeholders", Seq: []difftest.Request{{Method: "POST", Path: "/ph/a/b.txt?a=1&a=2", Header: http.Header{"X-Name": {"n"}, "Cookie": {"c=v; d=w"}},
			Body: func() io.Reader { return strings.NewReader("the body") }, Length: 8}}},
		{Name: "reverse_proxy placeholders", Seq: []difftest.Request{{Method: "GET", Path: "/phproxy/x?q=1"}, {Method: "GET", Path: "/phproxy/y?q=2"}}},
		{Name: "respond with placeholders", Seq: []difftest.Request{{Method: "GET", Path: "/static/a/b?x=1&y=%20", Header: http.Header{"X-Name": {"n"}}}}},
		{Name: "handle_path", Seq: []difftest.Request{{Method: "GET", Path: "/strip/one/two?q=1"}, {Method: "GET", Path: "/strip"}}},
		{Name: "host matcher", Seq: []difftest.Request{{Method: "GET", Path: "/anything", Header: http.Header{"Host": {"b.example.com"}}}}},
		{Name: "route with header_up and header_down", Seq: []difftest.Request{
			{Method: "GET", Path: "/api/x", Header: http.Header{"User-Agent": {"ua"}}},
			{Method: "POST", Path: "/api/y", Body: func() io.Reader { return strings.NewReader("body") }, Length: 4},
		}},
		{Name: "not matcher", Seq: []difftest.Request{{Method: "GET", Path: "/api/private/x"}}},
		{Name: "case-insensitive path", Seq: []difftest.Request{{Method: "GET", Path: "/API/x"}, {Method: "GET", Path: "/Health"}}},
		{Name: "rewrite", Seq: []difftest.Request{{Method: "GET", Path: "/rewrite/a?b=c"}}},
		{Name: "uri strip_prefix and replace", Seq: []difftest.Request{{Method: "GET", Path: "/uri/foo/x?foo=1"}}},
		{Name: "upstream down: handle_errors", Seq: []difftest.Request{{Method: "GET", Path: "/down/x"}}},
		{Name: "error handler", Seq: []difftest.Request{{Method: "GET", Path: "/error/x"}}},
		{Name: "header matcher", Seq: []difftest.Request{{Method: "GET", Path: "/json", Header: http.Header{"Accept": {"application/json"}}}, {Method: "GET", Path: "/json"}}},
		{Name: "no route", Seq: []difftest.Request{{Method: "GET", Path: "/nothing/here"}, {Method: "DELETE", Path: "/"}}},
		{Name: "empty handle", Seq: []difftest.Request{{Method: "GET", Path: "/empty"}}},
		{Name: "gzip", Seq: []difftest.Request{{Method: "GET", Path: "/big", Header: gzip}, {Method: "GET", Path: "/health", Header: gzip}, {Method: "HEAD", Path: "/big", Header: gzip}}},
		{Name: "zstd", Seq: []difftest.Request{{Method: "GET", Path: "/big", Header: zstd}}},
		{Name: "gzip request body", Seq: []difftest.Request{{Method: "POST", Path: "/api/z", Header: gzip,
			Body: func() io.Reader { return strings.NewReader(big) }, Length: int64(len(big))}}},
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) { compareSeq(t, tc.Seq) })
	}
}

var _ = fmt.Sprint

// metricsPort serves the config's Prometheus metrics in TestMetrics.
const metricsPort = 20404

// TestMetrics: with Caddy's `metrics` option, the fast path counts Caddy's
// own HTTP series the same: every series of server "fast" equals that of
// server "plain" times the fast runs (counts and histogram sample counts;
// not durations).
func TestMetrics(t *testing.T) {
	up := newEchoUpstream(t)
	site := strings.ReplaceAll(routesSite, "{$UP}", up.Addr())
	loadTwinOpts(t, twinOpts{globals: "\tmetrics", extra: fmt.Sprintf("http://:%d {\n\tmetrics /metrics\n}", metricsPort)}, site)
	seq := []difftest.Request{
		{Method: "GET", Path: "/health"}, {Method: "HEAD", Path: "/health"},
		{Method: "GET", Path: "/api/x"}, {Method: "POST", Path: "/api/y", Body: func() io.Reader { return strings.NewReader("body") }, Length: 4},
		{Method: "GET", Path: "/down/x"}, {Method: "GET", Path: "/error/x"}, {Method: "GET", Path: "/nothing"},
		{Method: "GET", Path: "/big", Header: http.Header{"Accept-Encoding": {"gzip"}}},
		{Method: "PURGE", Path: "/static/x"},
	}
	compareSeq(t, seq)
	series := scrape(t)
	var n int
	for key, v := range series {
		if !strings.Contains(key, `server="plain"`) || strings.Contains(key, "_sum") {
			continue
		}
		fk := strings.Replace(key, `server="plain"`, `server="fast"`, 1)
		if strings.HasPrefix(key, "caddy_http_") {
			n++
			// (the fast path's series count every fast run's requests)
			if pv, err := strconv.ParseFloat(v, 64); err != nil || series[fk] != strconv.FormatFloat(float64(fastRuns)*pv, 'g', -1, 64) {
				t.Errorf("%s: Caddy's path %v, fast path %v over %d runs", key, v, series[fk], fastRuns)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d caddy_http series for server plain: %v", n, series)
	}
}

// scrape reads the metrics endpoint: series name with labels -> value.
func scrape(t *testing.T) map[string]string {
	t.Helper()
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		// durations differ between the paths; counts must not
		if strings.Contains(line, "duration_seconds_bucket") {
			continue
		}
		out[line[:i]] = line[i+1:]
	}
	return out
}
