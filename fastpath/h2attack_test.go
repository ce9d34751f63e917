package fastpath

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/deny"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 attacks with CVEs, sent as real client frames (x/net's
// Framer) over a real connection to the fast path (h2c; the engine is the
// same over TLS): each is refused with Go's server's bounds or tighter.

func init() {
	caddy.RegisterModule(staller{})
	httpcaddyfile.RegisterHandlerDirective("test_stall", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		return staller{}, nil
	})
}

// staller is a handler (this test binary's only) that holds its request
// until stallRelease is closed, ignoring the client's going away: the
// handler a Rapid Reset makes pile up. It counts how many run at once.
type staller struct{}

var (
	stallMu      sync.Mutex
	stallRelease = make(chan struct{})
	stallNow     atomic.Int64
	stallMax     atomic.Int64
)

func (staller) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.test_stall", New: func() caddy.Module { return new(staller) }}
}

func (staller) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	n := stallNow.Add(1)
	defer stallNow.Add(-1)
	for {
		m := stallMax.Load()
		if n <= m || stallMax.CompareAndSwap(m, n) {
			break
		}
	}
	stallMu.Lock()
	ch := stallRelease
	stallMu.Unlock()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
	}
	w.Write([]byte("released"))
	return nil
}

func resetStall() {
	stallMu.Lock()
	stallRelease = make(chan struct{})
	stallMu.Unlock()
	stallMax.Store(0)
}

func releaseStall() {
	stallMu.Lock()
	select {
	case <-stallRelease:
	default:
		close(stallRelease)
	}
	stallMu.Unlock()
}

const attackSite = `	route /stall {
		test_stall
	}
	route /big {
		respond "{http.request.uri.query}" 200
	}
	respond "ok" 200`

func loadAttackServer(t *testing.T, serverOpts string) {
	t.Helper()
	loadTwinOpts(t, twinOpts{globals: "\torder test_stall first", serverOpts: "\t\tprotocols h1 h2c\n" + serverOpts}, attackSite)
}

// h2peer is a raw HTTP/2 client: the frames it sends are whatever the
// test writes.
type h2peer struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialH2(t *testing.T, port int, settings ...http2.Setting) *h2peer {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &h2peer{t: t, c: c}
	p.fr = http2.NewFramer(c, c)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.buf)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return p
}

// block encodes a request's header block.
func (p *h2peer) block(path string, extra ...hpack.HeaderField) []byte {
	p.buf.Reset()
	for _, f := range append([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: path}}, extra...) {
		p.enc.WriteField(f)
	}
	return bytes.Clone(p.buf.Bytes())
}

func (p *h2peer) get(id uint32, path string, extra ...hpack.HeaderField) error {
	return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block(path, extra...), EndStream: true, EndHeaders: true})
}

// readUntil reads frames until match says done, the connection ends, or
// the deadline; it returns the frames read (summaries) and whether match
// said done.
func (p *h2peer) readUntil(d time.Duration, match func(http2.Frame) bool) ([]string, bool) {
	p.c.SetReadDeadline(time.Now().Add(d))
	defer p.c.SetReadDeadline(time.Time{})
	var seen []string
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			seen = append(seen, "error: "+err.Error())
			return seen, false
		}
		seen = append(seen, summarize(f))
		if match(f) {
			return seen, true
		}
	}
}

func summarize(f http2.Frame) string {
	switch f := f.(type) {
	case *http2.GoAwayFrame:
		return "GOAWAY " + f.ErrCode.String()
	case *http2.RSTStreamFrame:
		return fmt.Sprintf("RST_STREAM %d %s", f.StreamID, f.ErrCode)
	case *http2.MetaHeadersFrame:
		return fmt.Sprintf("HEADERS %d %s", f.StreamID, f.PseudoValue("status"))
	}
	return fmt.Sprintf("%s %d", f.Header().Type, f.Header().StreamID)
}

// anyGoAway matches a GOAWAY whatever its code: a test that expects one
// code stops at the first GOAWAY and names the code it got.
func anyGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

// wantLast fails unless the last frame of seen (readUntil's) is want, one
// of summarize's lines: the code docs/fastpath.md promises.
func wantLast(t *testing.T, seen []string, want, what string) {
	t.Helper()
	if len(seen) == 0 || seen[len(seen)-1] != want {
		t.Fatalf("%s: want %s (docs/fastpath.md), got frames %v", what, want, tail(seen, 5))
	}
}

// heapInUse is the process's heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestH2RapidReset (CVE-2023-44487): a client that opens streams and
// resets each at once cannot make the server run more handlers than
// SETTINGS_MAX_CONCURRENT_STREAMS (a reset stream's handler counts until
// it returns, as in Go's server); once it has more than 4 times that
// many waiting, the connection ends with GOAWAY ENHANCE_YOUR_CALM.
func TestH2RapidReset(t *testing.T) {
	loadAttackServer(t, "")
	resetStall()
	defer releaseStall()
	p := dialH2(t, fastPort)
	block := p.block("/stall")
	var sendErr error
	go func() {
		for i := uint32(0); i < 4000; i++ {
			id := 1 + 2*i
			if sendErr = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); sendErr != nil {
				return
			}
			if sendErr = p.fr.WriteRSTStream(id, http2.ErrCodeCancel); sendErr != nil {
				return
			}
		}
	}()
	seen, ok := p.readUntil(20*time.Second, anyGoAway)
	if !ok {
		t.Fatalf("no GOAWAY after 4000 reset streams (last frames: %v)", tail(seen, 5))
	}
	wantLast(t, seen, "GOAWAY ENHANCE_YOUR_CALM", "4000 reset streams")
	if m := stallMax.Load(); m > h2MaxStreams {
		t.Fatalf("%d handlers ran at once, more than SETTINGS_MAX_CONCURRENT_STREAMS (%d)", m, h2MaxStreams)
	}
	releaseStall()
	// the server still serves others
	q := dialH2(t, fastPort)
	q.get(1, "/")
	if seen, ok := q.readUntil(5*time.Second, func(f http2.Frame) bool {
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
	}); !ok {
		t.Fatalf("a new connection is not served after the attack: %v", seen)
	}
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestH2ContinuationFlood (CVE-2024-27316 class): HEADERS without
// END_HEADERS followed by CONTINUATION frames without end: the server
// stops reading and closes with GOAWAY PROTOCOL_ERROR once the header
// block is over the limit (max_header_size), without buffering what comes
// after.
func TestH2ContinuationFlood(t *testing.T) {
	loadAttackServer(t, "")
	p := dialH2(t, fastPort)
	before := heapInUse()
	frag := p.block("/", hpack.HeaderField{Name: "x-a", Value: strings.Repeat("a", 8000)})
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: frag, EndHeaders: false})
		// each frame: whole fields "x-b: bbb...", literal without
		// indexing (a valid header block that never ends)
		field := append([]byte{0x00, 0x03, 'x', '-', 'b', 100}, bytes.Repeat([]byte{'b'}, 100)...)
		chunk := bytes.Repeat(field, 40)
		for err == nil && sent.Load() < 64<<20 {
			err = p.fr.WriteContinuation(1, false, chunk)
			sent.Add(int64(len(chunk) + 9))
		}
		done <- err
	}()
	seen, ok := p.readUntil(20*time.Second, anyGoAway)
	if !ok {
		t.Fatalf("no GOAWAY for an endless header block (frames: %v)", tail(seen, 5))
	}
	wantLast(t, seen, "GOAWAY PROTOCOL_ERROR", "an endless header block")
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the server read all %d bytes of the flood", sent.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the connection is still open after %d bytes of CONTINUATION", sent.Load())
	}
	if grew := int64(heapInUse()) - int64(before); grew > 16<<20 {
		t.Errorf("the heap grew by %d MB during the flood", grew>>20)
	}
	t.Logf("closed after the client sent %d KB (frames: %v)", sent.Load()>>10, tail(seen, 2))
}

// TestH2HPACKBomb: a header list that decompresses far beyond its wire
// size (one large field in the dynamic table, referenced over and over)
// is cut at MAX_HEADER_LIST_SIZE and answered 431 as Go's server does;
// a dynamic table size update over SETTINGS_HEADER_TABLE_SIZE and a
// string over the decoder's limit are COMPRESSION_ERRORs.
func TestH2HPACKBomb(t *testing.T) {
	loadAttackServer(t, "")
	t.Run("indexed references", func(t *testing.T) {
		p := dialH2(t, fastPort)
		before := heapInUse()
		// a 4000-byte field into the dynamic table, then 4000 references
		// to it (index 62): 16 MB decoded from 8 KB on the wire
		p.buf.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: "/"}, {Name: "x-bomb", Value: strings.Repeat("b", 4000)}} {
			p.enc.WriteField(f)
		}
		block := bytes.Clone(p.buf.Bytes())
		for range 4000 {
			block = append(block, 0x80|62) // indexed field 62: the newest dynamic entry
		}
		n := min(len(block), 16000)
		err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:n], EndStream: true, EndHeaders: n == len(block)})
		for rest := block[n:]; len(rest) > 0 && err == nil; {
			m := min(len(rest), 16000)
			err = p.fr.WriteContinuation(1, m == len(rest), rest[:m])
			rest = rest[m:]
		}
		ctype := "(no 431)"
		seen, ok := p.readUntil(10*time.Second, func(f http2.Frame) bool {
			h, isH := f.(*http2.MetaHeadersFrame)
			_, isG := f.(*http2.GoAwayFrame)
			if isH && h.PseudoValue("status") == "431" {
				for _, hf := range h.RegularFields() {
					if hf.Name == "content-type" {
						ctype = hf.Value
					}
				}
				return true
			}
			return isG
		})
		if !ok {
			t.Fatalf("an HPACK bomb was not refused (frames: %v)", tail(seen, 5))
		}
		wantLast(t, seen, "HEADERS 1 431", "a header list cut at MAX_HEADER_LIST_SIZE")
		// the fast path's own refusal is its problem (docs/errors.md)
		if ctype != deny.ContentType {
			t.Errorf("the 431's Content-Type is %q, want %q", ctype, deny.ContentType)
		}
		if grew := int64(heapInUse()) - int64(before); grew > 8<<20 {
			t.Errorf("the heap grew by %d MB decoding it", grew>>20)
		}
		t.Logf("answered: %v", tail(seen, 1))
	})
	t.Run("table size update over the setting", func(t *testing.T) {
		p := dialH2(t, fastPort)
		p.buf.Reset()
		p.enc.SetMaxDynamicTableSizeLimit(1 << 20)
		p.enc.SetMaxDynamicTableSize(1 << 20) // emits a size update of 1 MB: over our 4096
		block := p.block("/")
		p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
		seen, ok := p.readUntil(10*time.Second, anyGoAway)
		if !ok {
			t.Fatalf("no GOAWAY for a table size update over the setting (frames: %v)", tail(seen, 5))
		}
		wantLast(t, seen, "GOAWAY COMPRESSION_ERROR", "a table size update over the setting")
	})
	t.Run("string over the limit", func(t *testing.T) {
		p := dialH2(t, fastPort)
		// one 200 KB literal value, over MAX_HEADER_LIST_SIZE (the decoder's
		// longest string): never decoded whole
		p.buf.Reset()
		block := p.block("/", hpack.HeaderField{Name: "x-long", Value: strings.Repeat("l", 200<<10)})
		err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:16000], EndStream: true, EndHeaders: false})
		for rest := block[16000:]; len(rest) > 0 && err == nil; {
			m := min(len(rest), 16000)
			err = p.fr.WriteContinuation(1, m == len(rest), rest[:m])
			rest = rest[m:]
		}
		seen, ok := p.readUntil(10*time.Second, anyGoAway)
		if !ok {
			t.Fatalf("no GOAWAY for a 200 KB string (frames: %v)", tail(seen, 5))
		}
		wantLast(t, seen, "GOAWAY COMPRESSION_ERROR", "a string longer than the list size")
	})
}

// TestH2ControlFlood: SETTINGS and PING frames sent without reading the
// answers: the server never queues more than its connection buffer of
// answers (it stops reading while it cannot write them, where Go's server
// queues up to 10000), and a peer that does not read is cut after the
// write timeout. Memory stays bounded throughout.
func TestH2ControlFlood(t *testing.T) {
	loadAttackServer(t, "\t\ttimeouts {\n\t\t\twrite 1s\n\t\t}")
	for _, kind := range []string{"PING", "SETTINGS"} {
		t.Run(kind, func(t *testing.T) {
			p := dialH2(t, fastPort)
			before := heapInUse()
			var sent atomic.Int64
			done := make(chan error, 1)
			go func() {
				var err error
				for err == nil && sent.Load() < 5_000_000 {
					if kind == "PING" {
						err = p.fr.WritePing(false, [8]byte{1, 2, 3})
					} else {
						err = p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
					}
					sent.Add(1)
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("the server took %d %s frames from a client that reads none of the answers", sent.Load(), kind)
				}
			case <-time.After(3 * time.Minute):
				// (the bound is the frame count above: the server closes once
				// the socket buffers hold its unread answers, about 800k
				// frames here, in 4 s on a quiet machine; at load average
				// 45 a run sent 336k in 30 s and failed a 30 s limit)
				t.Fatalf("the connection is still open after %d %s frames unanswered", sent.Load(), kind)
			}
			if grew := int64(heapInUse()) - int64(before); grew > 8<<20 {
				t.Errorf("the heap grew by %d MB during the flood", grew>>20)
			}
			t.Logf("closed after %d %s frames", sent.Load(), kind)
		})
	}
}

// TestH2ZeroWindow: a client that never opens its window (initial window
// 0, no WINDOW_UPDATE) holds the response's worker for at most the write
// timeout: the stream is reset (RST_STREAM CANCEL), the connection goes on
// serving.
func TestH2ZeroWindow(t *testing.T) {
	loadAttackServer(t, "\t\ttimeouts {\n\t\t\twrite 1s\n\t\t}")
	p := dialH2(t, fastPort, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	start := time.Now()
	if err := p.get(1, "/big?"+strings.Repeat("z", 1000)); err != nil {
		t.Fatal(err)
	}
	seen, ok := p.readUntil(10*time.Second, func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == 1
	})
	if !ok {
		t.Fatalf("a stream whose window never opens was not reset (frames: %v)", tail(seen, 5))
	}
	wantLast(t, seen, "RST_STREAM 1 CANCEL", "a stream whose window never opens")
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("reset after %v, before the write timeout", d)
	}
	// the connection still serves: a PING is answered
	p.fr.WritePing(false, [8]byte{9})
	if seen, ok := p.readUntil(5*time.Second, func(f http2.Frame) bool { pf, ok := f.(*http2.PingFrame); return ok && pf.IsAck() }); !ok {
		t.Fatalf("the connection is dead after the reset: %v", seen)
	}
}
