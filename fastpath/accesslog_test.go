package fastpath

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// accessLogConfig has three sites on both servers (plain, on Caddy's path,
// and fast): a.example with a JSON access log and the log directives,
// b.example with a log of its own name (and a proxied path, whose records
// read no upstream placeholder), c.example with none (so skipped).
// Errors are logged through the per-host loggers too (error logs of a
// server with access logs follow the host's logger names).
func accessLogConfig(logA, logB, up string) string { return accessLogConfigOpts(logA, logB, up, "") }

func accessLogConfigOpts(logA, logB, up, serverOpts string) string {
	return fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20400
	https_port 20401
	grace_period 1ms
	servers :%[2]d {
		name plain
		trusted_proxies static private_ranges
%[8]s
	}
	servers :%[3]d {
		name fast
		trusted_proxies static private_ranges
%[8]s
		listener_wrappers {
			apigate
		}
	}
}
http://a.example:%[2]d, http://a.example:%[3]d {
	log {
		output file %[4]s
		format json
	}
	log_skip /skip/*
	log_append x_name {http.request.header.X-Name}
	log_append @post early_body {http.request.body}
	log_append up_conn {http.reverse_proxy.header.Connection}
	log_append up_keepalive {http.reverse_proxy.header.Keep-Alive}
	log_append up_altsvc {http.reverse_proxy.header.Alt-Svc}
	log_append up_via {http.reverse_proxy.header.Via}
	log_append up_x {http.reverse_proxy.header.X-Up}
	log_append up_type {http.reverse_proxy.header.Content-Type}
	log_name /renamed/* other
	log_level /quiet/* DEBUG
	@post method POST
	handle /up/* {
		reverse_proxy %[6]s {
			transport h1
		}
	}
	handle /down/* {
		reverse_proxy %[6]s {
			transport h1
			header_down X-Up changed
			header_down -Content-Type
		}
	}
	handle /err/* {
		error "broken {path}" 503
	}
	handle /none/* {
	}
	handle /large {
		respond "%[7]s" 200
	}
	handle {
		header X-Site a
		respond "a {path} {client_ip}" 200
	}
}
http://b.example:%[2]d, http://b.example:%[3]d {
	log blog {
		output file %[5]s
		format json
	}
	handle /up/* {
		reverse_proxy %[6]s {
			transport h1
		}
	}
	handle {
		respond "b {uri}" 201
	}
}
http://c.example:%[2]d, http://c.example:%[3]d {
	respond "c" 200
}
`, adminPort, plainPort, fastPort, logA, logB, up, strings.Repeat("L", 3000), serverOpts)
}

// TestAccessLog: with access logs on, the fast path serves the server
// (the plan writes the records), and each record is Caddy's, field by
// field: the same logger, message, level, request (every header field the
// client sent, the client IP from trusted_proxies), bytes read, user,
// size, status, response headers, extra fields, in the same order; only
// the time, the duration and the client's port differ.
func TestAccessLog(t *testing.T) { testAccessLog(t, "", nil) }

// TestAccessLogH2: the same over HTTP/2 (h2c with prior knowledge): each
// record of a request the plan's HTTP/2 engine served is Caddy's, and
// gateway_fastpath_requests_total counts them.
func TestAccessLogH2(t *testing.T) { testAccessLog(t, "\t\tprotocols h1 h2c", h2cClient) }

func testAccessLog(t *testing.T, serverOpts string, client func() *http.Client) {
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	up := newEchoUpstream(t)
	caddytester.Load(t, adminPort, accessLogConfigOpts(logA, logB, up.Addr(), serverOpts))
	requireFast(t, "fast")

	body := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	a := func(h http.Header) http.Header {
		out := http.Header{"Host": {"a.example"}}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	seq := []difftest.Request{
		{Method: "GET", Path: "/hello?q=1", Header: a(http.Header{"X-Name": {"n1"}, "X_under": {"u"}, "Authorization": {"Bearer secret"}, "Cookie": {"c=1"}})},
		{Method: "GET", Path: "/hello", Header: a(http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Pragma": {"no-cache"}})},
		{Method: "HEAD", Path: "/hello", Header: a(nil)},
		{Method: "POST", Path: "/up/echo", Header: a(http.Header{"Content-Type": {"text/plain"}}), Body: body("posted body"), Length: 11},
		{Method: "POST", Path: "/up/chunked", Header: a(nil), Body: body("chunked body"), Length: -1},
		// hop-by-hop fields and a Via from the upstream: the fast path
		// hands the upstream's header map to the client's writer; the
		// placeholders still read the upstream's head
		{Method: "GET", Path: "/up/hop", Header: a(nil)},
		// header_down changes the fields the client gets, not the
		// placeholders
		{Method: "GET", Path: "/down/hop", Header: a(nil)},
		{Method: "GET", Path: "/err/x", Header: a(nil)},
		{Method: "GET", Path: "/none/x", Header: a(nil)},
		// (a body the handler does not read: the server drains it, which
		// the record does not count)
		{Method: "POST", Path: "/large", Header: a(nil), Body: body("unread body"), Length: 11},
		{Method: "GET", Path: "/skip/x", Header: a(nil)},
		{Method: "GET", Path: "/renamed/x", Header: a(nil)},
		{Method: "GET", Path: "/quiet/x", Header: a(nil)},
		{Method: "DELETE", Path: "/b/path?x=%20y", Header: http.Header{"Host": {"b.example"}}},
		// a proxied answer whose record reads no upstream placeholder:
		// the response fields the record lists are the writer's map,
		// which the transport left empty (filled when the log reads it)
		{Method: "GET", Path: "/up/hop", Header: http.Header{"Host": {"b.example"}}},
		{Method: "GET", Path: "/c", Header: http.Header{"Host": {"c.example"}}},
	}
	before := servedCount(t, "fast")
	compareSeqWith(t, seq, client)
	if n := servedCount(t, "fast") - before; int(n) != fastRuns*len(seq) {
		t.Errorf("the fast path served %v of %d requests", n, fastRuns*len(seq))
	}
	for _, file := range []string{logA, logB} {
		runs := compareAccessLog(t, file, nil)
		if client != nil {
			if req, _ := runs[1][0].Values["request"].(map[string]any); req["proto"] != "HTTP/2.0" {
				t.Errorf("%s: the request was not HTTP/2: %v", file, req["proto"])
			}
		}
	}
}

// logRecord is one access log record, normalized: its keys in order, and
// the values but the time, the duration and the client's port.
type logRecord struct {
	Keys   []string
	Values map[string]any
}

// readAccessLog reads a JSON access log file (waiting for the writes of
// every run), split by run (diffRuns, in their order): compareSeq sends a
// run's requests after the previous run's, and each record is written
// before its response is sent.
func readAccessLog(t *testing.T, file string) [][]logRecord {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var all []logRecord
		f, err := os.Open(file)
		if err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				all = append(all, normRecord(t, sc.Bytes()))
			}
			f.Close()
		}
		if len(all) > 0 && len(all)%len(diffRuns) == 0 || time.Now().After(deadline) {
			n := len(all) / len(diffRuns)
			runs := make([][]logRecord, len(diffRuns))
			for i := range runs {
				runs[i] = all[i*n : (i+1)*n]
			}
			return runs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compareAccessLog reads an access log file (readAccessLog) and checks
// that each fast run wrote the records Caddy's path wrote; norm, when not
// nil, normalizes each record first. It returns the records by run.
func compareAccessLog(t *testing.T, file string, norm func(*logRecord)) [][]logRecord {
	t.Helper()
	runs := readAccessLog(t, file)
	if len(runs[0]) == 0 {
		t.Fatalf("%s: no records", file)
	}
	for i := range runs[0] {
		for r := range runs {
			if norm != nil {
				norm(&runs[r][i])
			}
		}
		for r := 1; r < len(runs); r++ {
			if !reflect.DeepEqual(runs[0][i], runs[r][i]) {
				t.Errorf("%s: record %d differs\n%s: %v\n%s: %v", file, i, diffRuns[0].name, runs[0][i], diffRuns[r].name, runs[r][i])
			}
		}
	}
	return runs
}

// fastRuns is how many of the differential runs go to the fast path.
var fastRuns = len(diffRuns) - 1

var loggerIndex = regexp.MustCompile(`\.log[0-9]+$`)

func normRecord(t *testing.T, line []byte) logRecord {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("a record that is not JSON: %q: %v", line, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.Token()
	var keys []string
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	delete(m, "ts")
	delete(m, "duration")
	delete(m, "uuid") // (an ID: the request's {http.request.uuid}, which audit logs)
	if l, ok := m["logger"].(string); ok {
		// (a twin config's two sites each name their own log: log0, log1)
		m["logger"] = loggerIndex.ReplaceAllString(l, ".log#")
	}
	if req, ok := m["request"].(map[string]any); ok {
		delete(req, "remote_port")
		if h, ok := req["host"].(string); ok {
			req["host"] = strings.NewReplacer(fmt.Sprint(plainPort), "PORT", fmt.Sprint(fastPort), "PORT").Replace(h)
		}
	}
	return logRecord{Keys: keys, Values: m}
}
