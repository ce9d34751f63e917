package fastpath

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// TestFileServer: file_server on the plan, with its bodies handed to the
// kernel (sendfile) by the response writer's ReadFrom: the same answers
// (whole files, HEAD, ranges, conditional requests) and access log records
// as on Caddy's path.
func TestFileServer(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("0123456789abcdef", 16<<10) // 256 KB
	for name, body := range map[string]string{"big.txt": big, "small.txt": "small file\n", "page.html": "<!doctype html><p>hi</p>\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(dir, "access.log")
	loadTwin(t, "", fmt.Sprintf(`	log {
		output file %s
		format json
	}
	root * %s
	file_server`, logFile, dir))
	before := sendfiles.Load()
	seq := []difftest.Request{
		{Method: "GET", Path: "/big.txt"},
		{Method: "GET", Path: "/small.txt"},
		{Method: "GET", Path: "/page.html"},
		{Method: "HEAD", Path: "/big.txt"},
		{Method: "GET", Path: "/big.txt", Header: http.Header{"Range": {"bytes=1000-200999"}}},
		{Method: "GET", Path: "/big.txt", Header: http.Header{"If-None-Match": {"*"}}},
		{Method: "GET", Path: "/missing.txt"},
	}
	compareSeq(t, seq)
	if n := sendfiles.Load() - before; n < 2 {
		t.Errorf("ReadFrom handed %d bodies to the kernel, want the whole file and the range at least", n)
	}
	if runs := compareAccessLog(t, logFile, nil); len(runs[0]) != len(seq) {
		t.Fatalf("access log: %d records from each run, want %d", len(runs[0]), len(seq))
	}
}

func init() {
	caddy.RegisterModule(hijacker{})
	httpcaddyfile.RegisterHandlerDirective("test_hijack", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		return hijacker{}, nil
	})
}

// hijacker is a handler (this test binary's only) that takes the
// connection, reads what the client sent after the request, and answers
// it in raw bytes itself.
type hijacker struct{}

func (hijacker) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.test_hijack", New: func() caddy.Module { return new(hijacker) }}
}

func (hijacker) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	defer nc.Close()
	line, _ := brw.ReadString('\n')
	fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(line), line)
	return brw.Flush()
}

// TestHijack: a handler that hijacks the connection on the plan gets it
// (with the bytes read after the request), as on Caddy's path, and the
// fast path leaves it alone from then on.
func TestHijack(t *testing.T) {
	caddytester.StopServers(t, adminPort)
	caddytester.Load(t, adminPort, twin(twinOpts{globals: "\torder test_hijack first"}, `	test_hijack`))
	requireFast(t, "fast")
	for _, port := range []int{plainPort, fastPort} {
		c := dial(t, port)
		fmt.Fprintf(c, "GET /h HTTP/1.1\r\nHost: a\r\n\r\nafter the request\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		body := make([]byte, res.ContentLength)
		n, _ := res.Body.Read(body)
		if res.StatusCode != 200 || string(body[:n]) != "after the request\n" {
			t.Errorf("port %d: %d %q, want the hijacker's answer with the bytes after the request", port, res.StatusCode, body[:n])
		}
	}
}

// TestFramingFields: the fields the writer decides a head's framing on
// (Date, Content-Type, Content-Encoding, Transfer-Encoding, Content-Length,
// Connection), as an upstream sends them, reach the client as on Caddy's
// path: one Date (the upstream's), no sniffed type beside an encoding,
// chunked kept, a close honoured (the upstream's, a handler's), HTTP/1.0
// keep-alive answered.
func TestFramingFields(t *testing.T) {
	replies := map[string]string{
		"/date": "HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 2\r\n\r\nok",
		"/ce":   "HTTP/1.1 200 OK\r\nContent-Encoding: x-raw\r\nContent-Length: 14\r\n\r\n<html>hi</html",
		"/type": "HTTP/1.1 200 OK\r\nContent-Type: text/x-own\r\nContent-Length: 14\r\n\r\n<html>hi</html",
		// (with its type: a body of unknown length without one is sniffed
		// or not as Caddy's own copyResponse races its first write
		// against the head's flush from a timer, on either path)
		"/chunked": "HTTP/1.1 200 OK\r\nContent-Type: text/x-own\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"/close":   "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"/hclose":  "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"/204":     "HTTP/1.1 204 No Content\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Type: text/plain\r\n\r\n",
	}
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if r, ok := replies[req.URL.Path]; ok {
			return difftest.Reply(c, r)
		}
		return difftest.Reply(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	})
	loadTwin(t, "", fmt.Sprintf(`	header /hclose Connection close
	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: example.com\r\n\r\n" }
	for _, raw := range []string{
		get("/date") + get("/ce") + get("/type") + get("/chunked") + get("/204") + get("/close"),
		"GET /date HTTP/1.0\r\nHost: example.com\r\nConnection: keep-alive\r\n\r\n" + get("/date"),
		get("/hclose") + get("/date"), // (a handler's Connection: close)
	} {
		plain := rawExchange(t, plainPort, raw)
		if len(plain.Responses) == 0 || !strings.Contains(plain.Responses[0].Header, "Date=<1>") {
			t.Fatalf("Caddy's path answered%v", plain)
		}
		for _, run := range diffRuns[1:] {
			var fast rawResult
			run.do(func() { fast = rawExchange(t, run.port, raw) })
			if !reflect.DeepEqual(plain, fast) {
				t.Errorf("results differ\nCaddy's path:%v\n%s:%v", plain, run.name, fast)
			}
		}
	}
}

// TestStreamedResponses: a response the upstream marks as a stream
// (Content-Type text/event-stream, or the Incremental field) reaches the
// client write by write, as reverse_proxy flushes it: the upstream sends
// its second event only after the client has read the first, on Caddy's
// path and both fast runs.
func TestStreamedResponses(t *testing.T) {
	release := make(chan struct{}, 1)
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		head := map[string]string{
			"/sse":         "Content-Type: text/event-stream; charset=utf-8\r\n",
			"/incremental": "Incremental: ?1\r\nContent-Type: text/plain\r\n",
		}[req.URL.Path]
		if !difftest.Reply(c, "HTTP/1.1 200 OK\r\n"+head+"Content-Length: 21\r\n\r\ndata: first event\n\n") {
			return false
		}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return difftest.Reply(c, "\n\n")
	})
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	for _, path := range []string{"/sse", "/incremental"} {
		for _, run := range diffRuns {
			run.do(func() {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", run.port))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: example.com\r\n\r\n", path)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s %s: %v", run.name, path, err)
				}
				first := make([]byte, len("data: first event\n\n"))
				if _, err := io.ReadFull(res.Body, first); err != nil {
					t.Fatalf("%s %s: the first event did not come before the upstream's second write: %v", run.name, path, err)
				}
				release <- struct{}{}
				if rest, err := io.ReadAll(res.Body); err != nil || string(rest) != "\n\n" {
					t.Fatalf("%s %s: the rest %q, %v", run.name, path, rest, err)
				}
			})
		}
	}
}

// TestFieldWritable: a field fieldWritable passes is one the checking
// write (writeFields unchecked, net/http's rules) would write unchanged,
// so a taken head's fields may skip the checks; those it refuses are
// checked as they are written.
func TestFieldWritable(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		{"X-A", "a b", true},
		{"X-A", "", true},
		{"X-A", "a\tb", true},
		{"X-A", `"free";r=99;t=30`, true},
		{"X-A", " a", false},
		{"X-A", "a ", false},
		{"X-A", "a\t", false},
		{"X-A", "a\r\nX-B: 1", false},
		{"X-A", "a\nb", false},
		{"X-A", "a\x01b", false}, // (written as it stands, but checked)
		{"X A", "a", false},
		{"", "a", false},
	} {
		if got := fieldWritable(tc.name, []string{tc.value}); got != tc.want {
			t.Errorf("fieldWritable(%q, %q) = %v, want %v", tc.name, tc.value, got, tc.want)
		}
		if !tc.want {
			continue
		}
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		w := &respWriter{fields: []namedValues{{tc.name, []string{tc.value}}}}
		w.writeFields(bw, nil, false)
		bw.Flush()
		if want := tc.name + ": " + tc.value + "\r\n"; out.String() != want {
			t.Errorf("%q %q: the checking write gives %q, not the field as it stands", tc.name, tc.value, out.String())
		}
	}
}
