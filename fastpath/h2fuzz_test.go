package fastpath

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzH2Frames feeds HTTP/2 frame sequences (the bytes after the client
// preface) to the engine over h2c, on a site that answers by itself and
// one that proxies to an upstream that reads the body. For any input the
// engine must not panic (its recovered panics are logged: the log must not
// name one); once the client has sent the input and closed its side, the
// engine must close the connection within h2FuzzWait; and once it has, no
// connection of the listener and no goroutine of the request (a stream's
// worker, a handler, an upstream exchange) may be left: the goroutines
// return to their count before the input, idle workers aside.
//
// The seeds are valid and hostile sequences built with x/net's Framer
// and hpack. Each fuzz worker runs its own Caddy (admin off, a port of
// its own), so `go test -fuzz FuzzH2Frames` runs with any -parallel.
func FuzzH2Frames(f *testing.F) {
	for _, seed := range h2FuzzSeeds() {
		f.Add(seed)
	}
	srv := startH2FuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		srv.exchange(t, data)
	})
}

const h2FuzzWait = 10 * time.Second

type h2FuzzServer struct {
	addr    string
	ln      *listener
	logPath string
	logOff  int64
}

// startH2FuzzServer loads a Caddy config of one fast-path server on a port
// of its own, h2c allowed, whose log goes to a file of the test's.
func startH2FuzzServer(f *testing.F) *h2FuzzServer {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// the body's length and hash; each exchange on a connection of
		// its own, so that no pooled connection outlives an input
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		w.Header().Set("Connection", "close")
		fmt.Fprintf(w, "%d %s", n, hex.EncodeToString(h.Sum(nil)))
	})}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go up.Serve(upLn)
	f.Cleanup(func() { up.Close() })

	logPath := filepath.Join(f.TempDir(), "caddy.log")
	cf := fmt.Sprintf(`{
	admin off
	grace_period 1ms
	log {
		output file %s {
			roll_disabled
		}
		level ERROR
	}
	servers :20499 {
		name fuzz
		listener_wrappers {
			apigate
		}
		protocols h1 h2c
	}
}
http://:20499 {
	route /up* {
		reverse_proxy %s {
			transport h1
		}
	}
	route /big {
		respond "{http.request.uri.query}" 200
	}
	respond "ok" 200
}
`, logPath, upLn.Addr())
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		f.Fatal(err)
	}
	// a port of its own (fuzz workers run at once)
	cfg = bytes.Replace(cfg, []byte(`":20499"`), []byte(`"127.0.0.1:0"`), 1)
	if err := caddy.Load(cfg, true); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { caddy.Load([]byte(`{"admin":{"disabled":true}}`), true) })
	requireFastF(f, "fuzz")
	app, err := caddy.ActiveContext().App("http")
	if err != nil {
		f.Fatal(err)
	}
	lns := app.(*caddyhttp.App).Servers["fuzz"].Listeners()
	if len(lns) != 1 {
		f.Fatalf("the fuzz server has %d listeners", len(lns))
	}
	ln, ok := fastListener(lns[0])
	if !ok {
		f.Fatalf("the fuzz server's listener is a %T, not the fast path's", lns[0])
	}
	s := &h2FuzzServer{addr: ln.Addr().String(), ln: ln, logPath: logPath}
	// one full exchange of each kind first, so that what starts once
	// (pools, timers) is running before any goroutines are counted
	var warm bytes.Buffer
	fr := http2.NewFramer(&warm, nil)
	fr.WriteSettings()
	enc, hb := h2FuzzEncoder()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb(enc, "POST", "/up"), EndHeaders: true})
	fr.WriteData(3, true, []byte("warm"))
	answers := s.run(f, warm.Bytes(), 3)
	// (the setup serves: both streams answered, the upstream read the body)
	rd := http2.NewFramer(nil, bytes.NewReader(answers))
	rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	bodies := map[uint32]string{}
	for {
		fr, err := rd.ReadFrame()
		if err != nil {
			break
		}
		if d, ok := fr.(*http2.DataFrame); ok {
			bodies[d.StreamID] += string(d.Data())
		}
	}
	sum := sha256.Sum256([]byte("warm"))
	if bodies[1] != "ok" || bodies[3] != "4 "+hex.EncodeToString(sum[:]) {
		f.Fatalf("the fuzz server's warm-up answers: %v", bodies)
	}
	return s
}

// fastListener finds the fast path's listener in ln, under the wrappers
// Caddy puts around it (its h2c listener embeds the one it wraps).
func fastListener(ln net.Listener) (*listener, bool) {
	for {
		if l, ok := ln.(*listener); ok {
			return l, true
		}
		v := reflect.ValueOf(ln)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return nil, false
		}
		inner := v.Elem().FieldByName("Listener")
		if !inner.IsValid() || inner.IsNil() {
			return nil, false
		}
		ln = inner.Interface().(net.Listener)
	}
}

func requireFastF(f *testing.F, server string) {
	for _, s := range Status() {
		if s.Server == server {
			if !s.On {
				f.Fatalf("the fast path is off for server %q: %s", server, s.Reason)
			}
			return
		}
	}
	f.Fatalf("no fast path status for server %q", server)
}

// liveGoroutines: the process's goroutines but the pool's idle HTTP/2
// workers (which wait up to workerIdle for the next stream).
func liveGoroutines() int {
	h2Workers.mu.Lock()
	idle := len(h2Workers.idle)
	h2Workers.mu.Unlock()
	return runtime.NumGoroutine() - idle
}

// exchange sends data after the preface and checks the engine's end of it.
func (s *h2FuzzServer) exchange(t *testing.T, data []byte) {
	t.Helper()
	before := liveGoroutines()
	s.run(t, data)
	// the connection is closed: the listener forgets it, and what served
	// it returns
	deadline := time.Now().Add(h2FuzzWait)
	for {
		s.ln.mu.Lock()
		conns := len(s.ln.conns)
		s.ln.mu.Unlock()
		live := liveGoroutines()
		if conns == 0 && live <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%v after the connection closed: %d connections left on the listener, %d goroutines where %d ran before (idle workers aside)\ninput %x\n%s",
				h2FuzzWait, conns, live, before, data, buf)
		}
		time.Sleep(time.Millisecond)
	}
	s.checkLog(t, data)
}

// run writes the preface and data; then, if data ends at a frame's end, a
// PING, and waits for its ACK (the server has read every frame) or the
// close; then, if untilEnd, the end of stream untilEnd's answer; then it
// closes the client's side and reads what the server answers until it
// closes. Each wait is h2FuzzWait at most. It returns what the server
// sent.
func (s *h2FuzzServer) run(t testing.TB, data []byte, untilEnd ...uint32) []byte {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	marker := [8]byte{'f', 'u', 'z', 'z', '-', 'e', 'n', 'd'}
	acked, ended, read := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var answers bytes.Buffer
	go func() {
		// read all the while (a server that cannot write its answers may
		// stop reading), frame by frame while the frames parse
		fr := http2.NewFramer(nil, io.TeeReader(c, &answers))
		fr.ReadMetaHeaders = hpack.NewDecoder(64<<10, nil)
		fr.SetMaxReadFrameSize(1<<24 - 1)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) && err != io.EOF && err != io.ErrUnexpectedEOF {
					_, err = io.Copy(&answers, c) // (what the test cannot parse)
				}
				read <- err
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == marker {
				close(acked)
			}
			if len(untilEnd) > 0 && f.Header().StreamID == untilEnd[0] && f.Header().Flags.Has(http2.FlagDataEndStream) {
				if _, ok := f.(*http2.DataFrame); ok {
					close(ended)
				}
			}
		}
	}()
	c.SetDeadline(time.Now().Add(h2FuzzWait))
	in := append([]byte(http2.ClientPreface), data...)
	if frameAligned(data) {
		in = append(in, 0, 0, 8, byte(http2.FrameType(0x6)), 0, 0, 0, 0, 0)
		in = append(in, marker[:]...)
	}
	var closed error
	wait := func(ch chan struct{}, what string) {
		if closed != nil {
			return
		}
		select {
		case <-ch:
		case closed = <-read:
		case <-time.After(h2FuzzWait):
			t.Fatalf("the server neither sent %s nor closed within %v (input %x)", what, h2FuzzWait, data)
		}
	}
	if _, err := c.Write(in); err != nil {
		if isTimeout(err) {
			t.Fatalf("the server read none of %d bytes within %v (input %x)", len(data), h2FuzzWait, data)
		}
		closed = <-read // (the server closed first)
	}
	if frameAligned(data) {
		wait(acked, "the PING's ACK")
	}
	if len(untilEnd) > 0 {
		wait(ended, fmt.Sprintf("stream %d's answer", untilEnd[0]))
	}
	if closed == nil {
		c.SetDeadline(time.Now().Add(h2FuzzWait))
		c.(*net.TCPConn).CloseWrite()
		closed = <-read
	}
	if isTimeout(closed) {
		t.Fatalf("the server did not close the connection within %v of the client's end (input %x)", h2FuzzWait, data)
	} else if closed != nil && closed != io.EOF && closed != io.ErrUnexpectedEOF && !strings.Contains(closed.Error(), "reset") {
		t.Fatalf("reading the answers: %v", closed)
	}
	return answers.Bytes()
}

// frameAligned reports whether data ends where a frame does (by the
// frames' length fields).
func frameAligned(data []byte) bool {
	i := 0
	for i+9 <= len(data) {
		i += 9 + (int(data[i])<<16 | int(data[i+1])<<8 | int(data[i+2]))
	}
	return i == len(data)
}

// checkLog fails on a panic the engine recovered from (logged at ERROR).
func (s *h2FuzzServer) checkLog(t *testing.T, data []byte) {
	t.Helper()
	fh, err := os.Open(s.logPath)
	if err != nil {
		if os.IsNotExist(err) {
			return
		}
		t.Fatal(err)
	}
	defer fh.Close()
	fh.Seek(s.logOff, io.SeekStart)
	b, _ := io.ReadAll(fh)
	s.logOff += int64(len(b))
	if bytes.Contains(b, []byte("panic")) {
		t.Fatalf("the engine panicked (input %x):\n%s", data, b)
	}
}

// h2FuzzEncoder returns an HPACK encoder and a function that encodes a
// request's header block with it.
func h2FuzzEncoder() (*hpack.Encoder, func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	return enc, func(enc *hpack.Encoder, method, path string, extra ...hpack.HeaderField) []byte {
		buf.Reset()
		for _, hf := range append([]hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "127.0.0.1"}, {Name: ":path", Value: path}}, extra...) {
			enc.WriteField(hf)
		}
		return bytes.Clone(buf.Bytes())
	}
}

// h2FuzzSeeds: frame sequences, valid and hostile, as a client sends them
// after its preface.
func h2FuzzSeeds() [][]byte {
	type seq func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte))
	hf := func(name, value string) hpack.HeaderField { return hpack.HeaderField{Name: name, Value: value} }
	seqs := []seq{
		// valid
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
			fr.WriteSettingsAck()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "POST", "/up", hf("content-length", "10")), EndHeaders: true})
			fr.WriteData(1, false, []byte("hello"))
			fr.WriteData(1, true, []byte("world"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb(enc, "GET", "/big?"+strings.Repeat("q", 100)), EndStream: true, EndHeaders: true})
			fr.WriteWindowUpdate(0, 1<<20)
			fr.WriteWindowUpdate(3, 1<<20)
			fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a header block in three pieces, with a priority; trailers
			fr.WriteSettings()
			b := hb(enc, "POST", "/up", hf("x-a", strings.Repeat("a", 50)), hf("te", "trailers"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:10], EndHeaders: false,
				Priority: http2.PriorityParam{StreamDep: 0, Weight: 15}})
			fr.WriteContinuation(1, false, b[10:20])
			fr.WriteContinuation(1, true, b[20:])
			fr.WriteData(1, false, []byte("body"))
			var tb bytes.Buffer
			hpack.NewEncoder(&tb).WriteField(hf("x-trailer", "1"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: tb.Bytes(), EndStream: true, EndHeaders: true})
			fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 200, Exclusive: true})
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// streams reset by the client, one with its body half sent
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "POST", "/up"), EndHeaders: true})
			fr.WriteData(1, false, bytes.Repeat([]byte("d"), 16384))
			fr.WriteRSTStream(1, http2.ErrCodeCancel)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
			fr.WriteRSTStream(3, http2.ErrCodeCancel)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: hb(enc, "GET", "/up"), EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a zero window: the answer waits for a WINDOW_UPDATE that
			// comes late
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "GET", "/big?"+strings.Repeat("z", 500)), EndStream: true, EndHeaders: true})
			fr.WriteWindowUpdate(1, 100)
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a body the client never ends before it leaves
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "POST", "/up"), EndHeaders: true})
			fr.WriteData(1, false, []byte("never ends"))
		},
		// hostile
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// not SETTINGS first
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// DATA on stream 0, HEADERS on an even stream, a CONTINUATION
			// without HEADERS
			fr.WriteSettings()
			fr.WriteData(0, false, []byte("x"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
			fr.WriteContinuation(7, true, []byte{0x82})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a HEADERS interrupted by another stream's frame
			fr.WriteSettings()
			b := hb(enc, "GET", "/")
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:3], EndHeaders: false})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b, EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// windows: an increment of 0, an overflow of the connection's
			// and of a stream's window
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "GET", "/big?x"), EndStream: true, EndHeaders: true})
			fr.WriteWindowUpdate(1, 0)
			fr.WriteWindowUpdate(1, 1<<31-1)
			fr.WriteWindowUpdate(1, 1<<31-1)
			fr.WriteWindowUpdate(0, 1<<31-1)
			fr.WriteWindowUpdate(0, 1<<31-1)
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// settings out of range; a SETTINGS ACK with a payload; a
			// PING of the wrong length
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 100})
			raw([]byte{0, 0, 6, 0x4, 0x1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1})
			raw([]byte{0, 0, 4, 0x6, 0x0, 0, 0, 0, 0, 1, 2, 3, 4})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a frame longer than SETTINGS_MAX_FRAME_SIZE; an unknown type
			fr.WriteSettings()
			raw([]byte{0, 0x01, 0, 0xfa, 0, 0, 0, 0, 1})
			raw([]byte{0, 0x40, 1, 0x0, 0x0, 0, 0, 0, 1})
			raw(bytes.Repeat([]byte{'x'}, 100))
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// malformed requests: no :path, an upper-case name, a
			// connection-specific field, a body longer than its
			// content-length, a pseudo-field after a regular one
			fr.WriteSettings()
			var b bytes.Buffer
			e := hpack.NewEncoder(&b)
			e.WriteField(hf(":method", "GET"))
			e.WriteField(hf(":scheme", "http"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b.Bytes(), EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb(enc, "GET", "/", hf("X-Upper", "1")), EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: hb(enc, "GET", "/", hf("connection", "close")), EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: hb(enc, "POST", "/up", hf("content-length", "2")), EndHeaders: true})
			fr.WriteData(7, true, []byte("too long"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: hb(enc, "GET", "/", hf(":path", "/again")), EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// HPACK: an index out of range, a table size update over the
			// setting, a truncated string
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82, 0x86, 0xff, 0x7f}, EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x3f, 0xe1, 0xff, 0x03, 0x82}, EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte{0x40, 0x7f, 0xff, 'a'}, EndStream: true, EndHeaders: true})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// frames on closed and idle streams: DATA after END_STREAM,
			// RST_STREAM on an idle stream, a lower stream id after a
			// higher one, a PRIORITY on itself, a WINDOW_UPDATE on a
			// half-closed stream
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
			fr.WriteWindowUpdate(5, 10)
			fr.WriteData(5, true, []byte("late"))
			fr.WriteRSTStream(9, http2.ErrCodeCancel)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb(enc, "GET", "/"), EndStream: true, EndHeaders: true})
			fr.WritePriority(11, http2.PriorityParam{StreamDep: 11})
			fr.WritePing(true, [8]byte{})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// padding: valid, and longer than the frame
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "POST", "/up"), EndHeaders: true, PadLength: 20})
			fr.WriteDataPadded(1, false, []byte("padded"), make([]byte, 30))
			raw([]byte{0, 0, 2, 0x0, 0x9, 0, 0, 0, 1, 200, 'x'})
		},
		func(fr *http2.Framer, enc *hpack.Encoder, hb func(*hpack.Encoder, string, string, ...hpack.HeaderField) []byte, raw func([]byte)) {
			// a body over the default window (65535), sent before the
			// server's SETTINGS could be read
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb(enc, "POST", "/up"), EndHeaders: true})
			for range 5 {
				fr.WriteData(1, false, make([]byte, 16384))
			}
			fr.WriteData(1, true, nil)
		},
	}
	var out [][]byte
	for _, s := range seqs {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		fr.AllowIllegalWrites = true
		enc, hb := h2FuzzEncoder()
		s(fr, enc, hb, func(p []byte) { b.Write(p) })
		out = append(out, bytes.Clone(b.Bytes()))
	}
	return out
}
