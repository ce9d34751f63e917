package fastpath

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzParseRequest checks the request parser against net/http's: whatever
// the fast path accepts (not refused, not handed off), net/http accepts
// too and reads the same way: method, target, path, query, Host, framing,
// whether to close, and every field. The fast path may refuse more (it is
// stricter), never read a request differently.
func FuzzParseRequest(f *testing.F) {
	for _, tc := range framingCases {
		f.Add([]byte(tc.raw))
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("POST /x?y=1 HTTP/1.1\r\nHost: a:80\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"))
	// more distinct names than fillHeader keeps in mind, repeated before
	// and after that many
	var many strings.Builder
	many.WriteString("GET / HTTP/1.1\r\nHost: a\r\n")
	for i := range 20 {
		fmt.Fprintf(&many, "X-F%02d: %d\r\n", i, i)
	}
	many.WriteString("X-F00: again\r\nX-F16: again\r\nX-F19: again\r\nPragma: no-cache\r\n\r\n")
	f.Add([]byte(many.String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		end, bad := findHeadEnd(data, 0)
		if bad != nil || end < 0 {
			return
		}
		b := data[:end]
		// parsed after another head in the same state, as on a kept-alive
		// connection: its names are candidates for this head's (fieldLine's
		// prev), which must change nothing
		var h reqHead
		if warm := parseRequest([]byte(warmHead), &h); warm != nil {
			t.Fatal(warm)
		}
		bad = parseRequest(b, &h)
		var alone reqHead
		if badAlone := parseRequest(b, &alone); fmt.Sprint(bad) != fmt.Sprint(badAlone) ||
			bad == nil && !sameHead(h, alone) {
			t.Fatalf("after another head: %+v, %v; alone: %+v, %v\n%q", h, bad, alone, badAlone, b)
		}
		if bad != nil && bad.reason == "malformed HTTP version" {
			// refused, not handed to Caddy's server: net/http refuses it too
			if _, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data))); err == nil {
				t.Fatalf("the fast path refuses a version net/http reads:\n%q", b)
			}
		}
		if bad != nil || h.handoff != "" || h.delegate != "" {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			t.Fatalf("the fast path accepts what net/http refuses (%v):\n%q", err, b)
		}
		if req.Method != h.method || req.RequestURI != h.target || req.URL.Path != h.path ||
			req.URL.RawPath != h.rawPath || req.URL.RawQuery != h.rawQuery {
			t.Fatalf("request line read differently: net/http %s %q path %q raw %q query %q, fast path %s %q path %q raw %q query %q\n%q",
				req.Method, req.RequestURI, req.URL.Path, req.URL.RawPath, req.URL.RawQuery,
				h.method, h.target, h.path, h.rawPath, h.rawQuery, b)
		}
		if req.Host != h.host {
			t.Fatalf("Host: net/http %q, fast path %q\n%q", req.Host, h.host, b)
		}
		chunked := len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"
		cl := req.ContentLength
		if chunked != h.chunked || (!chunked && max(h.contentLength, 0) != cl) {
			t.Fatalf("framing: net/http chunked %v length %d, fast path chunked %v length %d\n%q",
				chunked, cl, h.chunked, h.contentLength, b)
		}
		if req.Close != h.close {
			t.Fatalf("close: net/http %v, fast path %v\n%q", req.Close, h.close, b)
		}
		got := http.Header{} // (the map the plan's handlers see, as begin fills it)
		h.fillHeader(got, nil, false)
		want := req.Header
		if chunked {
			delete(got, "Content-Length")
		}
		if len(got) != len(want) {
			t.Fatalf("fields: net/http %v, fast path %v\n%q", want, got, b)
		}
		for k, vv := range want {
			if strings.Join(vv, "\x00") != strings.Join(got[k], "\x00") {
				t.Fatalf("field %s: net/http %q, fast path %q\n%q", k, vv, got[k], b)
			}
		}
	})
}

// findHeadEndBytewise is findHeadEnd as it was, a byte at a time: the
// reference of FuzzFindHeadEnd.
func findHeadEndBytewise(b []byte, from int) (int, *badRequest) {
	for i := from; i < len(b); i++ {
		switch b[i] {
		case '\n':
			if i == 0 || b[i-1] != '\r' {
				return -1, errBareLF
			}
			if i >= 3 && b[i-2] == '\n' && b[i-3] == '\r' {
				return i + 1, nil
			}
		case '\r':
			if i+1 < len(b) && b[i+1] != '\n' {
				return -1, errBareCR
			}
		}
	}
	return -1, nil
}

// FuzzFindHeadEnd: the line-at-a-time scan finds the same end and the
// same fault as the byte loop, from every resume point.
func FuzzFindHeadEnd(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
		"GET /\n", "\r", "\r\n\r", "a\r\n\r\nb", "\n", "GET / HTTP/1.1\r\nA: b\r\n\r\r\n"} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, from int) {
		if from < 0 || from > len(b) {
			return
		}
		end, bad := findHeadEnd(b, from)
		wend, wbad := findHeadEndBytewise(b, from)
		if end != wend || bad != wbad {
			t.Fatalf("findHeadEnd(%q, %d) = %d %v, byte by byte %d %v", b, from, end, bad, wend, wbad)
		}
	})
}

// warmHead is the head FuzzParseRequest parses before each input, in the
// same state.
const warmHead = "POST /w HTTP/1.1\r\nHost: a\r\nUser-Agent: u\r\nAccept: */*\r\nContent-Length: 0\r\nX-A: 1\r\nConnection: keep-alive\r\nCookie: c=1\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n"

// sameHead compares two parsed heads (an empty field list and none alike).
func sameHead(a, b reqHead) bool {
	if !slices.Equal(a.fields, b.fields) {
		return false
	}
	a.fields, b.fields = nil, nil
	return reflect.DeepEqual(a, b)
}
