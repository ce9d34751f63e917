package caddypathguard

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/pathtest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestTraversalCorpusH2 sends the traversal corpus's origin-form targets
// (those starting with "/", what :path holds, RFC 9113 8.3.1) as HTTP/2
// :path over h2c (a raw client: the target goes as it is, where Go's
// client would refuse some): the HTTP/2 engine builds the request from
// :path itself. Caddy's path and the fast path must answer alike and pass
// the same target upstream, and with path_guard no target may reach the
// upstream in a form a backend resolves to /admin.
func TestTraversalCorpusH2(t *testing.T) {
	pathtest.RunH2(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		testTraversalCorpusH2(t, p, rec, func(target string) bool { return strings.HasPrefix(target, "/") })
	})
}

func testTraversalCorpusH2(t *testing.T, p pathtest.Path, rec *pathtest.Recorder, send func(target string) bool) {
	freePorts(t)
	up := newEcho(t)
	for _, mode := range []string{"off", "reject", "normalize"} {
		t.Run(mode, func(t *testing.T) {
			guard := "path_guard " + mode
			if mode == "off" {
				guard = ""
			}
			p.Load(t, ports.admin, site(up.srv.URL, filepath.Join(t.TempDir(), "audit.jsonl"), guard, ""), "gw")
			var bypasses []string
			for i, target := range corpus {
				if !send(target) {
					continue
				}
				id := fmt.Sprintf("%s-h2-%s-%d", p.Name, mode, i)
				answer := h2Get(t, ports.site, target, id)
				got, reached := up.received(id)
				rec.Add(p, mode+" "+target, map[string]any{
					"response": answer,
					"upstream": got,
				})
				if reached && readsAsAdmin(got) != "" {
					bypasses = append(bypasses, fmt.Sprintf("%q reached the upstream as %q", target, got))
				}
			}
			if mode != "off" && len(bypasses) > 0 {
				t.Errorf("path_guard %s over HTTP/2: %d targets reached the upstream in a form a backend resolves to /admin:\n%s",
					mode, len(bypasses), strings.Join(bypasses, "\n"))
			}
		})
	}
}

// h2Answer is what a client sees of one HTTP/2 request: the response, or
// the stream's reset or the connection's GOAWAY with its code.
type h2Answer struct {
	Response pathtest.Response `json:"response"`
	Reset    string            `json:"reset,omitempty"`
}

// h2Get sends GET with :path target (and X-Case: id) on a connection of
// its own and reads the answer.
func h2Get(t *testing.T, port int, target, id string) h2Answer {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: target}, {Name: "x-case", Value: id}} {
		enc.WriteField(f)
	}
	c.Write([]byte(http2.ClientPreface))
	fr.WriteSettings()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	var out h2Answer
	status, header := 0, http.Header{}
	var body strings.Builder
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf(":path %q: %v", target, err)
		}
		end := false
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if s := f.PseudoValue("status"); s != "" {
				fmt.Sscan(s, &status)
			}
			for _, hf := range f.RegularFields() {
				header.Add(http.CanonicalHeaderKey(hf.Name), hf.Value)
			}
			end = f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID == 1 {
				body.Write(f.Data())
				end = f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			out.Reset = "RST_STREAM " + f.ErrCode.String()
			end = f.StreamID == 1
		case *http2.GoAwayFrame:
			out.Reset = "GOAWAY " + f.ErrCode.String()
			end = true
		}
		if end {
			break
		}
	}
	if status != 0 {
		out.Response = pathtest.Resp(status, header, body.String(), id, "<id>")
	}
	return out
}
