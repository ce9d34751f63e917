package deny

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// TestWriteHTTP1Problem reads the fast path's answer back with net/http's
// reader: a valid HTTP/1.1 response whose body is the problem of the
// status's kind.
func TestWriteHTTP1Problem(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{{400, "malformed_request"}, {431, "header_fields_too_large"}, {501, "unsupported_transfer_coding"}, {417, "expectation_failed"}} {
		var buf bytes.Buffer
		if err := WriteHTTP1Problem(&buf, tc.status, "a detail <x>", "/a/b"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(&buf), nil)
		if err != nil {
			t.Fatalf("%d: %v\n%s", tc.status, err, buf.String())
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != ContentType || !resp.Close {
			t.Errorf("%d: status %d, Content-Type %q, close %v", tc.status, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close)
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%d: body %q: %v", tc.status, body, err)
		}
		k := KindOf(tc.code, tc.status)
		if p["type"] != k.Type() || p["title"] != k.Title || p["status"] != float64(tc.status) ||
			p["detail"] != "a detail <x>" || p["instance"] != "/a/b" || p["error"] != tc.code {
			t.Errorf("%d: body %s", tc.status, body)
		}
		if k.Status != tc.status {
			t.Errorf("%s: kind's status %d, want %d (not in Kinds?)", tc.code, k.Status, tc.status)
		}
	}
}

// TestSetFastPathProblem: the headers match the body returned.
func TestSetFastPathProblem(t *testing.T) {
	h := http.Header{}
	body := SetFastPathProblem(h, 431, "request head too large", "")
	if h.Get("Content-Type") != ContentType || h.Get("Content-Length") != strconv.Itoa(len(body)) || h.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v for body %q", h, body)
	}
	if !bytes.Contains(body, []byte(`"error":"header_fields_too_large"`)) {
		t.Errorf("body %s", body)
	}
}
