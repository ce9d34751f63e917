package caddyh1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestParseHead(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		status  int
		text    string
		header  http.Header
		trailer http.Header
		length  int64
		chunked bool
		close   bool
		minor   int
	}{
		{name: "fixed", head: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n",
			status: 200, text: "200 OK", length: 5, minor: 1,
			header: http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"5"}}},
		{name: "chunked, announced trailers", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nTrailer: x-sum, X-Other\r\n\r\n",
			status: 200, text: "200 OK", length: -1, chunked: true, minor: 1,
			header: http.Header{}, trailer: http.Header{"X-Sum": nil, "X-Other": nil}},
		{name: "lower-case names are canonicalized", head: "HTTP/1.1 404 Not Found\r\ncontent-type: a\r\nx-custom-thing: b\r\n\r\n",
			status: 404, text: "404 Not Found", length: -1, minor: 1,
			header: http.Header{"Content-Type": {"a"}, "X-Custom-Thing": {"b"}}},
		{name: "repeated fields keep their order", head: "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nVary: x\r\nSet-Cookie: b=2\r\n\r\n",
			status: 200, text: "200 OK", length: -1, minor: 1,
			header: http.Header{"Set-Cookie": {"a=1", "b=2"}, "Vary": {"x"}}},
		{name: "OWS trimmed, empty value", head: "HTTP/1.1 200 OK\r\nX-A: \t v \t\r\nX-B:\r\n\r\n",
			status: 200, text: "200 OK", length: -1, minor: 1,
			header: http.Header{"X-A": {"v"}, "X-B": {""}}},
		{name: "custom reason", head: "HTTP/1.1 200 Fine Thanks\r\n\r\n",
			status: 200, text: "200 Fine Thanks", length: -1, minor: 1},
		{name: "no reason", head: "HTTP/1.1 418\r\n\r\n", status: 418, text: "418", length: -1, minor: 1},
		{name: "empty reason", head: "HTTP/1.1 200 \r\n\r\n", status: 200, text: "200 ", length: -1, minor: 1},
		{name: "connection close", head: "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n",
			status: 200, text: "200 OK", length: 0, close: true, minor: 1,
			header: http.Header{"Connection": {"keep-alive, Close"}, "Content-Length": {"0"}}},
		{name: "HTTP/1.0 closes by default", head: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
			status: 200, text: "200 OK", length: 0, close: true, minor: 0,
			header: http.Header{"Content-Length": {"0"}}},
		{name: "HTTP/1.0 keep-alive", head: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
			status: 200, text: "200 OK", length: 0, minor: 0,
			header: http.Header{"Connection": {"keep-alive"}, "Content-Length": {"0"}}},
		{name: "identical Content-Length values", head: "HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n",
			status: 200, text: "200 OK", length: 7, minor: 1,
			header: http.Header{"Content-Length": {"7, 7", "7"}}},
		{name: "obs-text in a value", head: "HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\n\r\n",
			status: 200, text: "200 OK", length: -1, minor: 1, header: http.Header{"X-A": {"caf\xc3\xa9"}}},
		{name: "1xx", head: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
			status: 103, text: "103 Early Hints", length: -1, minor: 1,
			header: http.Header{"Link": {"</a.css>; rel=preload"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h head
			if err := parseBoth(t, []byte(tc.head), &h); err != nil {
				t.Fatalf("parseHead: %v", err)
			}
			if h.status != tc.status || h.statusText != tc.text || h.contentLength != tc.length ||
				h.chunked != tc.chunked || h.close != tc.close || h.minor != tc.minor {
				t.Errorf("got status %d %q length %d chunked %v close %v minor %d",
					h.status, h.statusText, h.contentLength, h.chunked, h.close, h.minor)
			}
			if tc.header == nil {
				tc.header = http.Header(nil)
			}
			if len(h.header) != 0 || len(tc.header) != 0 {
				if !reflect.DeepEqual(h.header, tc.header) {
					t.Errorf("header %v, want %v", h.header, tc.header)
				}
			}
			if !reflect.DeepEqual(h.trailer, tc.trailer) {
				t.Errorf("trailer %v, want %v", h.trailer, tc.trailer)
			}
		})
	}
}

// TestParseHeadRefuses: every framing a lenient parser could read in two
// ways, and every malformed head, is an error, never a response.
func TestParseHeadRefuses(t *testing.T) {
	tests := []struct{ name, head, want string }{
		{"bare LF ends a line", "HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n", "bare LF"},
		{"bare LF in a field", "HTTP/1.1 200 OK\r\nX-A: a\nb\r\n\r\n", "bare LF"},
		{"bare CR", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n", "bare CR"},
		{"NUL in a value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", "control byte"},
		{"DEL in a value", "HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\n\r\n", "control byte"},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n  b\r\n\r\n", "obs-fold"},
		{"tab obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n\tb\r\n\r\n", "obs-fold"},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", "field name"},
		{"no colon", "HTTP/1.1 200 OK\r\nX-A\r\n\r\n", "colon"},
		{"empty name", "HTTP/1.1 200 OK\r\n: v\r\n\r\n", "without a name"},
		{"non-token name", "HTTP/1.1 200 OK\r\nX(A): v\r\n\r\n", "field name"},
		{"Content-Length with Transfer-Encoding", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both"},
		{"Transfer-Encoding with Content-Length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", "both"},
		{"differing Content-Length fields", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "differing"},
		{"differing Content-Length list", "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "differing"},
		{"signed Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", "bad Content-Length"},
		{"hex Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n", "bad Content-Length"},
		{"empty Content-Length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "Content-Length"},
		{"huge Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", "bad Content-Length"},
		{"gzip transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported Transfer-Encoding"},
		{"identity transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n", "unsupported Transfer-Encoding"},
		{"two Transfer-Encoding fields", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "more than one"},
		{"Transfer-Encoding in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"},
		{"HTTP/2 status line", "HTTP/2 200 OK\r\n\r\n", "status line"},
		{"lower-case version", "http/1.1 200 OK\r\n\r\n", "status line"},
		{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", "status"},
		{"status below 100", "HTTP/1.1 099 Hm\r\n\r\n", "status code"},
		{"status 600", "HTTP/1.1 600 Hm\r\n\r\n", "status code"},
		{"letters in status", "HTTP/1.1 2x0 OK\r\n\r\n", "status code"},
		{"no space after code", "HTTP/1.1 200OK\r\n\r\n", "status line"},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", "status line"},
		{"empty status line", "\r\n\r\n", "status line"},
		{"forbidden trailer name", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n", "not allowed"},
		{"bad trailer name", "HTTP/1.1 200 OK\r\nTrailer: a b\r\n\r\n", "trailer name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h head
			err := parseBoth(t, []byte(tc.head), &h)
			if err == nil {
				t.Fatalf("parsed; want an error containing %q", tc.want)
			}
			if !errors.Is(err, errHead) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q; want errHead containing %q", err, tc.want)
			}
		})
	}
}

func TestFindHeadEnd(t *testing.T) {
	b := []byte("HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody")
	if got := findHeadEnd(b, 0); got != len(b)-4 {
		t.Fatalf("findHeadEnd = %d, want %d", got, len(b)-4)
	}
	// resuming from every split point finds the same end
	for i := 0; i <= len(b); i++ {
		if end := findHeadEnd(b[:i], 0); end >= 0 {
			continue
		}
		if got := findHeadEnd(b, i); got != len(b)-4 {
			t.Fatalf("from %d: %d", i, got)
		}
	}
	if findHeadEnd([]byte("HTTP/1.1 200 OK\r\n\r"), 0) != -1 {
		t.Fatal("found an end in an incomplete head")
	}
}

func TestParseHeadAllocations(t *testing.T) {
	b := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 18:00:00 GMT\r\n" +
		"Content-Type: application/json\r\nContent-Length: 72\r\nConnection: keep-alive\r\n\r\n")
	var h head
	allocs := testing.AllocsPerRun(100, func() {
		if err := parseHead(b, &h, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
	// the head's string, the header map and its values' backing array
	if allocs > 4 {
		t.Fatalf("parseHead allocates %v times per head, want at most 4", allocs)
	}
}

func BenchmarkParseHead(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 18:00:00 GMT\r\n" +
		"Content-Type: application/json\r\nContent-Length: 72\r\nConnection: keep-alive\r\n\r\n")
	b.ReportAllocs()
	var h head
	for b.Loop() {
		if err := parseHead(raw, &h, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseHead checks the parser against net/http's (which is lenient
// where this one is strict): a head this parser accepts, net/http accepts
// too, with the same status, length and fields; and whatever the input, the
// parser neither panics nor returns a field with a byte that could split it.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-A\r\n\r\n",
		"HTTP/1.0 304 Not Modified\r\nETag: \"x\"\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\nX: y\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := findHeadEnd(b, 0)
		if end < 0 {
			return
		}
		b = b[:end]
		var h head
		if err := parseBoth(t, b, &h); err != nil {
			return
		}
		if h.status < 100 || h.status > 599 {
			t.Fatalf("status %d", h.status)
		}
		for k, vv := range h.header {
			if k == "" || k != http.CanonicalHeaderKey(k) {
				t.Fatalf("field name %q", k)
			}
			for _, v := range vv {
				if strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("field %q value %q", k, v)
				}
			}
		}
		if h.chunked && h.contentLength != -1 {
			t.Fatal("chunked with a length")
		}
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("accepted a head net/http refuses (%v): %q", err, b)
		}
		if res.StatusCode != h.status {
			t.Fatalf("status %d, net/http %d", h.status, res.StatusCode)
		}
		if !h.chunked && res.ContentLength != h.contentLength && h.bodyAllowed("GET") {
			t.Fatalf("length %d, net/http %d", h.contentLength, res.ContentLength)
		}
		for k, vv := range h.header {
			if k == "Transfer-Encoding" {
				continue
			}
			if got := res.Header[k]; !reflect.DeepEqual(got, vv) && k != "Content-Length" {
				t.Fatalf("field %q: %q, net/http %q", k, vv, got)
			}
		}
	})
}

// parseBoth parses a whole head, b, as the transport does (a headScan
// fed b in one piece and byte by byte, which must find the end findHeadEnd
// finds, and parseHead reading its lines) and with parseHead's own check
// and line search (no scan), and fails t where the two differ; it returns
// the first's error, its head in h.
func parseBoth(t testing.TB, b []byte, h *head) error {
	t.Helper()
	want := findHeadEnd(b, 0)
	var hs headScan
	if got := hs.scan(b); got != want {
		t.Fatalf("headScan in one piece: end %d, findHeadEnd %d (%q)", got, want, b)
	}
	var split headScan
	got := -1
	for i := 0; i <= len(b) && got < 0; i++ {
		got = split.scan(b[:i])
	}
	if got != want || !reflect.DeepEqual(split.ends, hs.ends) || split.fault != hs.fault {
		t.Fatalf("headScan byte by byte: end %d ends %v fault %v, in one piece %d %v %v (%q)", got, split.ends, split.fault, want, hs.ends, hs.fault, b)
	}
	if want < 0 {
		return parseHead(b, h, nil, nil) // (not a whole head: the tests' own error cases)
	}
	var plain head
	errPlain := parseHead(b[:want], &plain, nil, nil)
	err := parseHead(b[:want], h, nil, &hs)
	if fmt.Sprint(err) != fmt.Sprint(errPlain) || err == nil && !reflect.DeepEqual(*h, plain) {
		t.Fatalf("parseHead with the scan: %+v, %v; without: %+v, %v (%q)", *h, err, plain, errPlain, b)
	}
	return err
}

// TestParseHeadReuse: a head parsed with a Reuse whose previous head had
// other names, the same names, names that are prefixes of these or these
// in another case, gives what a parse of it alone gives (parseHead takes a
// name from the previous head only where the line holds it, byte for
// byte, before its colon). With LazyHeader, the map stays empty for a head
// of at most maxNames names until FillHeader, which makes it the same; a
// head with more names fills it as it is parsed.
func TestParseHeadReuse(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprint("lazy=", lazy), func(t *testing.T) { testParseHeadReuse(t, lazy) })
	}
}

func testParseHeadReuse(t *testing.T, lazy bool) {
	heads := []string{
		"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 18:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 18:00:01 GMT\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nServer-Timing: x\r\nDate2: y\r\nContent-Type-Options: z\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nserver: a\r\nDATE: b\r\ncontent-type: c\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nServer: nginx\r\nServer: again\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nServer:nginx\r\nDate:\r\nContent-Type : x\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\nX-B: 2\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\nX-F: 6\r\nX-G: 7\r\nX-H: 8\r\nX-I: 9\r\nX-J: 10\r\n" +
			"X-K: 11\r\nX-L: 12\r\nX-M: 13\r\nX-N: 14\r\nX-O: 15\r\nX-P: 16\r\nX-Q: 17\r\nX-R: 18\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nSet-Cookie: a\r\nTransfer-Encoding: chunked\r\nSet-Cookie: b\r\nServer: nginx\r\nSet-Cookie: c\r\n\r\n",
		"HTTP/1.0 200 OK\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nServer: nginx\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
	}
	for i, a := range heads {
		for j, b := range heads {
			ru := Reuse{LazyHeader: lazy}
			var h, alone head
			errA := parseHead([]byte(a), &h, &ru, nil)
			err := parseHead([]byte(b), &h, &ru, nil)
			errAlone := parseHead([]byte(b), &alone, nil, nil)
			if fmt.Sprint(err) != fmt.Sprint(errAlone) {
				t.Fatalf("head %d after %d (%v): %v, alone %v", j, i, errA, err, errAlone)
			}
			ru.res.Header = h.header
			if lazy && err == nil {
				few := ru.nnames >= 0
				if ru.HeaderPending(&ru.res) != few || few && len(h.header) != 0 {
					t.Errorf("head %d after %d: pending %v with the map %v, want the map empty for a head of at most %d names", j, i, ru.HeaderPending(&ru.res), h.header, maxNames)
				}
				if ru.FillHeader(&ru.res) != few || ru.HeaderPending(&ru.res) {
					t.Errorf("head %d after %d: FillHeader filled %v, pending after %v", j, i, !few, ru.HeaderPending(&ru.res))
				}
			}
			if err == nil && h.close != alone.close {
				t.Errorf("head %d after %d: close %v, alone %v", j, i, h.close, alone.close)
			}
			if err == nil && !reflect.DeepEqual(h.header, alone.header) {
				t.Errorf("head %d after %d: %v, alone %v", j, i, h.header, alone.header)
			}
			// NameValues lists the map: each name's values as the map
			// has them (nil when not in it), every key of the map named
			if names, values, ok := ru.NameValues(&ru.res); err == nil && ok {
				listed := http.Header{}
				for n, k := range names {
					if values[n] != nil {
						listed[k] = values[n]
					}
				}
				if !reflect.DeepEqual(listed, h.header) {
					t.Errorf("head %d after %d: NameValues %v, the map %v", j, i, listed, h.header)
				}
			}
		}
	}
}
