package fastpath

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// rawResult is what a client sees when it writes raw bytes: the responses,
// in order, and whether the server closed the connection after them.
type rawResult struct {
	Responses []rawResponse
	Closed    bool
}

type rawResponse struct {
	Status int
	Header string // sorted fields, Date's values counted
	Body   string
}

func (r rawResult) String() string {
	var b strings.Builder
	for i, res := range r.Responses {
		fmt.Fprintf(&b, "\n    [%d] %d %s body %q", i, res.Status, res.Header, res.Body)
	}
	fmt.Fprintf(&b, "\n    closed: %v", r.Closed)
	return b.String()
}

// rawExchange writes raw to 127.0.0.1:port and reads what the server
// answers by its framing, never by a quiet spell: a stall on a loaded
// machine delays an answer but does not change it. raw holds
// rawRequests(raw) requests (HEAD requests are named in heads, in the
// order of the responses); it reads responses, with answerWait for each,
// until every request has a final response or the server closes. Then,
// if the connection is still open, a probe request tells whether the
// server keeps it open (the probe is answered) or is closing it (the
// probe meets the close); when the last response says it closes, it waits
// for the close. A server that neither answers a request nor closes
// within answerWait fails the test: a case whose server legitimately waits
// for more of a request uses rawExchangeWaiting.
func rawExchange(t *testing.T, port int, raw string, heads ...bool) rawResult {
	t.Helper()
	return rawExchangeFramed(t, port, raw, heads, false)
}

// rawExchangeWaiting is rawExchange for a raw whose last request is
// incomplete (a body shorter than its Content-Length): a server that reads
// it as sent answers nothing and waits for the rest, so only there does a
// quiet spell of quietWait, with no answer and no close, stand for "holds
// the connection open".
func rawExchangeWaiting(t *testing.T, port int, raw string, heads ...bool) rawResult {
	t.Helper()
	return rawExchangeFramed(t, port, raw, heads, true)
}

const (
	// answerWait: how long a server may take over one answer, or over a
	// close it announced, on a loaded machine; only a failing case waits
	// that long.
	answerWait = 10 * time.Second
	// quietWait: what rawExchangeWaiting takes for "holds the connection
	// open without answering".
	quietWait = 400 * time.Millisecond
	// probeTarget: the request rawExchange sends once every request has
	// its answer (the echo upstream's targets leave it out)
	probeTarget = "/framing-probe"
)

// rawRequests counts the requests in raw: its request lines, the lines
// with an HTTP version (" HTTP/", in any case). No request has an answer
// without one, so a server answers at most that many (besides 1xx).
func rawRequests(raw string) int {
	n := 0
	for _, line := range strings.Split(raw, "\n") {
		if strings.Contains(strings.ToUpper(line), " HTTP/") {
			n++
		}
	}
	return n
}

func rawExchangeFramed(t *testing.T, port int, raw string, heads []bool, waits bool) rawResult {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out rawResult
	want := rawRequests(raw)
	for final := 0; final < want || waits; {
		wait := answerWait
		if waits {
			wait = quietWait
		}
		c.SetReadDeadline(time.Now().Add(wait))
		method := "GET"
		if i := len(out.Responses); i < len(heads) && heads[i] {
			method = "HEAD"
		}
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			if isTimeout(err) {
				if waits {
					return out // open, and no answer: what the case expects
				}
				t.Fatalf("port %d answered %d of %d requests, then neither answered nor closed within %v:%v", port, final, want, wait, out)
			}
			out.Closed = true // EOF or reset
			return out
		}
		out.Responses = append(out.Responses, readRaw(res))
		if res.StatusCode >= 200 {
			final++
		}
		if res.Close {
			// the server said it closes: check that it does
			c.SetReadDeadline(time.Now().Add(answerWait))
			_, err := br.ReadByte()
			out.Closed = err != nil && !isTimeout(err)
			return out
		}
	}
	// every request has its answer and the server did not say it closes:
	// it keeps the connection open if it answers one more request
	if _, err := io.WriteString(c, "GET "+probeTarget+" HTTP/1.1\r\n"+h+"\r\n"); err != nil {
		out.Closed = true
		return out
	}
	for {
		c.SetReadDeadline(time.Now().Add(answerWait))
		res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			if isTimeout(err) {
				t.Fatalf("port %d neither answered the probe after its %d answers nor closed within %v:%v", port, want, answerWait, out)
			}
			out.Closed = true
			return out
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode >= 200 {
			return out
		}
	}
}

// readRaw reads res, its body included, as a rawResponse.
func readRaw(res *http.Response) rawResponse {
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		body = append(body, "<cut: "+err.Error()+">"...)
	}
	keys := make([]string, 0, len(res.Header))
	for k := range res.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var h strings.Builder
	for _, k := range keys {
		if k == "Date" { // (its value is the time: how many there are)
			fmt.Fprintf(&h, "Date=<%d> ", len(res.Header[k]))
			continue
		}
		fmt.Fprintf(&h, "%s=%q ", k, res.Header[k])
	}
	if res.ContentLength >= 0 && res.Header.Get("Content-Length") == "" && len(body) > 0 {
		h.WriteString("(no Content-Length) ")
	}
	if len(res.TransferEncoding) > 0 {
		fmt.Fprintf(&h, "TE=%q ", res.TransferEncoding)
	}
	return rawResponse{Status: res.StatusCode, Header: h.String(), Body: string(body)}
}

// echoUpstream answers every request with what it received (method,
// target, the header fields it got, the body) and records the targets, so
// that a test sees whether a smuggled request reached it.
type echoUpstream struct {
	*difftest.Upstream
	mu      sync.Mutex
	targets []string
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	e := &echoUpstream{}
	e.Upstream = difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if req.RequestURI != probeTarget {
			e.mu.Lock()
			e.targets = append(e.targets, req.RequestURI)
			e.mu.Unlock()
		}
		keys := make([]string, 0, len(req.Header))
		for k := range req.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %s host=%s\n", req.Method, req.RequestURI, req.Proto, hostOnly(req.Host))
		for _, k := range keys {
			fmt.Fprintf(&b, "%s: %q\n", k, req.Header[k])
		}
		fmt.Fprintf(&b, "te=%q cl=%d body=%q trailer=%v\n", req.TransferEncoding, req.ContentLength, body, req.Trailer)
		// (the client's Host names each server's own port)
		out := strings.NewReplacer(fmt.Sprint(plainPort), "PORT", fmt.Sprint(fastPort), "PORT").Replace(b.String())
		b.Reset()
		b.WriteString(out)
		extra := ""
		if strings.Contains(req.RequestURI, "/hop") {
			// hop-by-hop fields (reverse_proxy's list) and a Via of its
			// own: what the client gets, and what the placeholders say
			extra = "Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nAlt-Svc: h3=\":1\"\r\nVia: 1.1 up\r\nX-Up: 1\r\n"
		}
		return difftest.Reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%sContent-Length: %d\r\n\r\n%s", extra, b.Len(), b.String()))
	})
	return e
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

func (e *echoUpstream) reset() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.targets
	e.targets = nil
	return t
}

// framingCase is one request-framing case: raw bytes, sent as they are, to
// a server on Caddy's path and to the same server on the fast path.
type framingCase struct {
	name  string
	raw   string
	heads []bool // which responses answer HEAD requests
	// waits: the last request is incomplete, and a server that reads it as
	// sent waits for the rest without answering (rawExchangeWaiting)
	waits bool
	// resetOK: Caddy's server may end the connection with a reset where the
	// fast path closes it cleanly; the answers are compared without it.
	resetOK bool
	// stricter: the fast path refuses (400, 501 or 431, then closes) what
	// Caddy's server accepts; the fast path must answer one error and
	// close, and the upstream must get nothing past the first request.
	stricter string
}

const h = "Host: example.com\r\n"

var framingCases = []framingCase{
	// well-formed
	{name: "two requests pipelined", raw: "GET /a HTTP/1.1\r\n" + h + "\r\nGET /b?x=1 HTTP/1.1\r\n" + h + "\r\n"},
	{name: "HTTP/1.0", raw: "GET /a HTTP/1.0\r\n\r\n"},
	{name: "HTTP/1.0 keep-alive", raw: "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n"},
	{name: "Connection: close", raw: "GET /a HTTP/1.1\r\n" + h + "Connection: close\r\n\r\nGET /b HTTP/1.1\r\n" + h + "\r\n"},
	{name: "POST with Content-Length, then GET", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n" + h + "\r\n"},
	{name: "chunked POST", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\n" + h + "\r\n"},
	{name: "chunked POST with trailer fields", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\n\r\n"},
	{name: "TE case and whitespace", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: \tChunked \r\n\r\n1\r\nx\r\n0\r\n\r\n"},
	{name: "CRLF after a POST body", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 1\r\n\r\nx\r\nGET /b HTTP/1.1\r\n" + h + "\r\n"},
	{name: "HEAD", raw: "HEAD /a HTTP/1.1\r\n" + h + "\r\nGET /b HTTP/1.1\r\n" + h + "\r\n", heads: []bool{true}},
	{name: "lower-case method and field names", raw: "get /a HTTP/1.1\r\nhost: example.com\r\nx-custom-field: v\r\n\r\n"},
	{name: "repeated fields", raw: "GET /a HTTP/1.1\r\n" + h + "X-A: 1\r\nX-A: 2\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n"},
	{name: "underscore and dot field names dropped", raw: "GET /a HTTP/1.1\r\n" + h + "X_Forwarded_User: root\r\nX.Y: 1\r\n\r\n"},
	{name: "Pragma: no-cache", raw: "GET /a HTTP/1.1\r\n" + h + "Pragma: no-cache\r\n\r\n"},
	{name: "hop-by-hop fields", raw: "GET /a HTTP/1.1\r\n" + h + "Connection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nTe: trailers, gzip\r\nProxy-Authorization: x\r\n\r\n"},
	{name: "X-Forwarded-* from the client", raw: "GET /a HTTP/1.1\r\n" + h + "X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nVia: 1.1 other\r\n\r\n"},
	{name: "Connection names X-Forwarded-For, Via and User-Agent", raw: "GET /a HTTP/1.1\r\n" + h + "Connection: X-Forwarded-For, via, User-Agent\r\nX-Forwarded-For: 1.2.3.4\r\nVia: 1.1 other\r\nUser-Agent: ua/1\r\n\r\n"},
	{name: "User-Agent and one X-Forwarded field from the client", raw: "GET /a HTTP/1.1\r\n" + h + "User-Agent: ua/1\r\nX-Forwarded-Host: evil\r\n\r\n"},
	{name: "empty field value", raw: "GET /a HTTP/1.1\r\n" + h + "X-Empty:\r\nX-Sp:   \r\n\r\n"},
	{name: "obs-text in a value", raw: "GET /a HTTP/1.1\r\n" + h + "X-Latin: caf\xe9\r\n\r\n"},
	{name: "query and escapes", raw: "GET /a%20b/%2F?q=%41&&x HTTP/1.1\r\n" + h + "\r\n"},
	{name: "empty query", raw: "GET /a? HTTP/1.1\r\n" + h + "\r\n"},
	{name: "dot segments", raw: "GET /a/../b/./c HTTP/1.1\r\n" + h + "\r\n"},
	{name: "head of 18 KB (over 16 KB, within net/http's slack)", raw: "GET /a HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("b", 18<<10) + "\r\n\r\n"},
	{name: "Expect: 100-continue", raw: "POST /a HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"},
	{name: "HTTP/1.0 POST with Content-Length", raw: "POST /a HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi"},

	// refused by both
	{name: "missing Host", raw: "GET /a HTTP/1.1\r\n\r\n"},
	{name: "two Host fields", raw: "GET /a HTTP/1.1\r\n" + h + h + "\r\n"},
	{name: "malformed Host", raw: "GET /a HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{name: "empty Host", raw: "GET /a HTTP/1.1\r\nHost:\r\n\r\n"},
	{name: "dots-only Host", raw: "GET /a HTTP/1.1\r\nHost: ...\r\n\r\n"},
	{name: "differing Content-Length fields", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
	{name: "Content-Length list of two values", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 5, 6\r\n\r\nhello!"},
	{name: "signed Content-Length", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nhello"},
	{name: "negative Content-Length", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: -1\r\n\r\n"},
	{name: "Content-Length in hex", raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 0x5\r\n\r\nhello"},
	{name: "transfer coding gzip", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\n"},
	{name: "transfer codings gzip, chunked", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
	{name: "two Transfer-Encoding fields", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{name: "xchunked", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"},
	{name: "space before the colon", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"},
	{name: "field name with a space", raw: "GET /a HTTP/1.1\r\n" + h + "Bad Name: x\r\n\r\n"},
	{name: "field line without a colon", raw: "GET /a HTTP/1.1\r\n" + h + "NoColon\r\n\r\n"},
	{name: "NUL in a value", raw: "GET /a HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n"},
	{name: "DEL in a value", raw: "GET /a HTTP/1.1\r\n" + h + "X-A: a\x7fb\r\n\r\n"},
	// (Caddy's server closes this one with bytes unread: the client may
	// get a reset instead of the answer)
	{name: "bare CR", raw: "GET /a HTTP/1.1\r\nX-A: 1\rX-B: 2\r\n" + h + "\r\n"},
	{name: "empty request line", raw: "\r\nGET /a HTTP/1.1\r\n" + h + "\r\n", resetOK: true},
	{name: "double space in the request line", raw: "GET  /a HTTP/1.1\r\n" + h + "\r\n"},
	{name: "space in the target", raw: "GET /a b HTTP/1.1\r\n" + h + "\r\n"},
	{name: "trailing space after the version", raw: "GET /a HTTP/1.1 \r\n" + h + "\r\n"},
	{name: "lower-case version", raw: "GET /a http/1.1\r\n" + h + "\r\n"},
	{name: "HTTP/1.2", raw: "GET /a HTTP/1.2\r\n" + h + "\r\n"},
	{name: "HTTP/2.0 request line", raw: "GET /a HTTP/2.0\r\n" + h + "\r\n"},
	{name: "invalid method byte", raw: "G@T /a HTTP/1.1\r\n" + h + "\r\n"},
	{name: "method longer than 32 bytes", raw: strings.Repeat("M", 40) + " /a HTTP/1.1\r\n" + h + "\r\n"},
	{name: "head over 20 KB", raw: "GET /a HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("b", 30<<10) + "\r\n\r\n"},
	{name: "bare LF in a chunk-size line", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"},
	{name: "bad chunk size", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
	{name: "chunk size overflow", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n"},
	{name: "chunk data longer than its size", raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n"},
	{name: "body shorter than Content-Length", waits: true, raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 10\r\n\r\nhello"},
	{name: "absolute-form target", raw: "GET http://other.example/a HTTP/1.1\r\n" + h + "\r\n"},
	{name: "asterisk target", raw: "OPTIONS * HTTP/1.1\r\n" + h + "\r\n"},
	{name: "CONNECT", raw: "CONNECT example.com:443 HTTP/1.1\r\n" + h + "\r\n"},
	{name: "Expect other than 100-continue", raw: "POST /a HTTP/1.1\r\n" + h + "Expect: 200-ok\r\nContent-Length: 2\r\n\r\nhi"},
	{name: "target with a fragment", raw: "GET /a#frag HTTP/1.1\r\n" + h + "\r\n"},
	{name: "target with a raw non-ASCII byte", raw: "GET /caf\xe9 HTTP/1.1\r\n" + h + "\r\n"},
	{name: "bad escape in the target", raw: "GET /a%zz HTTP/1.1\r\n" + h + "\r\n"},

	// the fast path is stricter (request smuggling vectors Caddy's server lets through)
	{name: "CL.TE", stricter: "Content-Length with Transfer-Encoding",
		raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 35\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n" + h + "\r\n"},
	{name: "TE.CL", stricter: "Content-Length with Transfer-Encoding",
		raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n24\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n\r\n0\r\n\r\n"},
	{name: "TE in HTTP/1.0 with Content-Length", stricter: "Transfer-Encoding in HTTP/1.0",
		raw: "POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n" + h + "\r\n"},
	{name: "repeated equal Content-Length", stricter: "repeated Content-Length",
		raw: "POST /a HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"},
	{name: "obs-fold", stricter: "obs-fold",
		raw: "GET /a HTTP/1.1\r\n" + h + "X-Folded: a\r\n b\r\n\r\n"},
	{name: "obs-fold of Transfer-Encoding", stricter: "obs-fold",
		raw: "POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n" + h + "\r\n"},
	{name: "bare LF line ends", stricter: "bare LF",
		raw: "GET /a HTTP/1.1\n" + "Host: example.com\n\n"},
	{name: "bare LF inside a head", stricter: "bare LF",
		raw: "GET /a HTTP/1.1\r\nHost: example.com\nX-A: 1\r\n\r\n"},
}

// TestFraming sends raw requests, well-formed and not, to both paths:
// what both accept is answered alike; what both refuse is refused alike;
// where the fast path is stricter, it answers an error and closes without
// passing a second request on.
func TestFraming(t *testing.T) {
	up := newEchoUpstream(t)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	for _, tc := range framingCases {
		t.Run(tc.name, func(t *testing.T) {
			up.reset()
			send := rawExchange
			if tc.waits {
				send = rawExchangeWaiting
			}
			plain := send(t, plainPort, tc.raw, tc.heads...)
			plainTargets := up.reset()
			if tc.resetOK {
				for i := range plain.Responses {
					if b, _, ok := strings.Cut(plain.Responses[i].Body, "<cut: "); ok && strings.Contains(plain.Responses[i].Body, "reset") {
						plain.Responses[i].Body = b
					}
				}
			}
			for _, run := range diffRuns[1:] {
				run.do(func() {
					fast := send(t, run.port, tc.raw, tc.heads...)
					checkFraming(t, tc, run.name, plain, fast, plainTargets, up.reset())
				})
			}
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "%s: Caddy's path:%v\n", tc.name, plain)
			}
		})
	}
}

// checkFraming compares what a framing case got on Caddy's path (plain)
// with what it got on a fast run (named run): the same answers, or, where
// the fast path is stricter, its refusal; and what reached the upstream.
func checkFraming(t *testing.T, tc framingCase, run string, plain, fast rawResult, plainTargets, fastTargets []string) {
	t.Helper()
	for _, tg := range fastTargets {
		if strings.Contains(tg, "smuggled") {
			t.Fatalf("%s: a smuggled request reached the upstream: %q", run, fastTargets)
		}
	}
	if tc.stricter == "" {
		if err := sameRefusals(plain, fast, tc.raw); err != nil {
			t.Fatalf("%s: %v\nCaddy's path:%v\nfast path:   %v", run, err, plain, fast)
		}
		if !reflect.DeepEqual(plain, fast) {
			t.Fatalf("%s: results differ\nCaddy's path:%v\nfast path:   %v\nupstream got %q and %q", run, plain, fast, plainTargets, fastTargets)
		}
		return
	}
	if len(fast.Responses) != 1 || fast.Responses[0].Status < 400 || !fast.Closed {
		t.Fatalf("%s should refuse and close (%s):%v", run, tc.stricter, fast)
	}
	if err := checkProblem(fast.Responses[0], "", tc.raw); err != nil {
		t.Fatalf("%s: %v", run, err)
	}
	if len(fastTargets) != 0 {
		t.Fatalf("%s passed a refused request on: %q", run, fastTargets)
	}
	if reflect.DeepEqual(plain, fast) {
		t.Logf("note: Caddy's path refused this too:%v", plain)
	}
}

// sameRefusals checks where fast answered with its own problem (the fast
// path's refusal of a head, docs/errors.md) that Caddy's path answered
// net/http's text/plain refusal with the same status and, where net/http
// names the error, the same text as the problem's detail; it then gives
// fast's answer plain's header and body, for the comparison of the rest.
func sameRefusals(plain, fast rawResult, raw string) error {
	for i := range fast.Responses {
		f := &fast.Responses[i]
		if !strings.Contains(f.Header, deny.ContentType) {
			if i < len(plain.Responses) && netHTTPRefusal(plain.Responses[i]) {
				return fmt.Errorf("answer %d: net/http's refusal on Caddy's path, not the fast path's problem", i)
			}
			continue
		}
		if i >= len(plain.Responses) {
			return fmt.Errorf("answer %d: only the fast path refused", i)
		}
		p := plain.Responses[i]
		// (net/http's 417 has no body, no Content-Type)
		if p.Status != f.Status || !strings.Contains(p.Header, "text/plain") && p.Body != "" {
			return fmt.Errorf("answer %d: the fast path's refusal, where Caddy's path answered %d %s", i, p.Status, p.Header)
		}
		// net/http's body: "400 Bad Request" or "400 Bad Request: <text>"
		_, text, _ := strings.Cut(p.Body, ": ")
		if err := checkProblem(*f, text, raw); err != nil {
			return fmt.Errorf("answer %d: %v", i, err)
		}
		f.Header, f.Body = p.Header, p.Body
	}
	return nil
}

// netHTTPRefusal reports whether r is what net/http's server answers a
// request it cannot read, before any handler: a 400, 431 or 501 whose
// text/plain body starts with its status, or a 417 without a body.
func netHTTPRefusal(r rawResponse) bool {
	switch r.Status {
	case 417:
		return r.Body == ""
	case 400, 431, 501:
		return strings.Contains(r.Header, "text/plain") && strings.HasPrefix(r.Body, fmt.Sprint(r.Status)+" ")
	}
	return false
}

// checkProblem checks that r is the fast path's refusal (deny.FastPathBody)
// of the request raw: its kind from its status, its detail detail (any
// when ""), its instance the path of raw's target or "" (a head not read
// that far).
func checkProblem(r rawResponse, detail, raw string) error {
	var got struct {
		Detail, Instance string
	}
	if err := json.Unmarshal([]byte(r.Body), &got); err != nil {
		return fmt.Errorf("the refusal's body %q is not JSON: %v", r.Body, err)
	}
	if detail != "" && got.Detail != detail {
		return fmt.Errorf("the refusal's detail is %q, net/http's text %q", got.Detail, detail)
	}
	line, _, _ := strings.Cut(raw, "\r\n")
	if _, target, ok := strings.Cut(line, " "); ok && got.Instance != "" {
		target, _, _ = strings.Cut(target, " ")
		if path, _, _ := strings.Cut(target, "?"); got.Instance != path {
			return fmt.Errorf("the refusal's instance is %q, the request's path %q", got.Instance, path)
		}
	}
	if want := string(deny.FastPathBody(r.Status, got.Detail, got.Instance)); r.Body != want {
		return fmt.Errorf("the refusal's body %q, want %q", r.Body, want)
	}
	if !strings.Contains(r.Header, `Cache-Control=["no-store"]`) || !strings.Contains(r.Header, `Content-Type=["`+deny.ContentType+`"]`) {
		return fmt.Errorf("the refusal's header: %s", r.Header)
	}
	return nil
}
