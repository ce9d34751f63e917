package fastpath

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2TestConn is the socket of a writer test: what the connection writes.
type h2TestConn struct {
	net.Conn // (nil: only the methods below are used)
	mu       sync.Mutex
	buf      bytes.Buffer
}

func (c *h2TestConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *h2TestConn) SetWriteDeadline(time.Time) error { return nil }

// newWriterTestStream is a stream of a connection that writes into a
// buffer, its request a GET, its windows open.
func newWriterTestStream() (*h2stream, *h2TestConn) {
	nc := &h2TestConn{}
	sc := &h2conn{
		l: &listener{}, nc: nc, streams: map[uint32]*h2stream{},
		sendWin: 1 << 20, peerInitWin: 1 << 20, peerMaxFrame: 16384, stallDL: time.Second,
	}
	sc.cond.L = &sc.mu
	sc.bw = bufio.NewWriterSize(h2NetWriter{sc}, h2FrameBufferSize)
	sc.fr = http2.NewFramer(sc.bw, nil)
	sc.enc.init()
	s := h2streamPool.Get().(*h2stream)
	s.begin(sc, 1)
	s.sendWin = 1 << 20
	s.st.head = reqHead{h2: true, method: http.MethodGet, proto: "HTTP/2.0"}
	s.w.start(&s.st.head)
	return s, nc
}

// headerBlocks decodes the HEADERS frames written: each block's fields.
func headerBlocks(t *testing.T, b []byte) []map[string]string {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var blocks []map[string]string
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return blocks
		}
		if err != nil {
			t.Fatal(err)
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			m := map[string]string{}
			for _, hf := range mh.Fields {
				m[hf.Name] = hf.Value
			}
			blocks = append(blocks, m)
		}
	}
}

// TestH2WriterHeaderSnapshot: the HEADERS carry the header as it was at
// WriteHeader, as Go's HTTP/2 writer sends it, whether or not the writer
// copied it (it copies only when the header could still change: a
// handler holds the map, or asks for it after WriteHeader); the fields
// the writer sends itself (Content-Length) or drops (Connection) stay in
// the handler's map, which the access log reads.
func TestH2WriterHeaderSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(w *h2Writer)
		want    []map[string]string // the HEADERS blocks' fields but date
		after   map[string]string   // in the handler's map once done
	}{
		{
			name: "changed through a held map after WriteHeader",
			handler: func(w *h2Writer) {
				h := w.Header()
				h.Set("X-A", "1")
				w.WriteHeader(200)
				h.Set("X-B", "2")
				w.Write([]byte("hi"))
			},
			want: []map[string]string{{":status": "200", "x-a": "1", "content-type": "text/plain; charset=utf-8", "content-length": "2"}},
		},
		{
			name: "Header first called after WriteHeader",
			handler: func(w *h2Writer) {
				w.handlerHdr().Set("X-A", "1") // (as the plan sets Server)
				w.WriteHeader(201)
				w.Header().Set("X-C", "3")
			},
			want: []map[string]string{{":status": "201", "x-a": "1", "content-length": "0"}},
		},
		{
			name: "stable: Content-Length sent, Connection dropped",
			handler: func(w *h2Writer) {
				h := w.Header()
				h.Set("Content-Length", "2")
				h.Set("Connection", "keep-alive")
				h.Set("Content-Type", "application/json")
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("{}"))
			},
			want:  []map[string]string{{":status": "200", "content-type": "application/json", "content-length": "2"}},
			after: map[string]string{"Content-Length": "2", "Connection": "keep-alive"},
		},
		{
			name: "stable: a Trailer:-prefixed field is a trailer",
			handler: func(w *h2Writer) {
				h := w.Header()
				h.Set("X-A", "1")
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("hi"))
				h.Set(http.TrailerPrefix+"X-T", "t")
			},
			want: []map[string]string{
				{":status": "200", "x-a": "1", "content-type": "text/plain; charset=utf-8", "content-length": "2"},
				{"x-t": "t"},
			},
		},
		{
			name: "taken: the list of the map's fields is what is sent",
			handler: func(w *h2Writer) {
				// (as takeHeader gives a map and its list; the map's
				// X-Map is not in the list, which stands for it)
				*w.heldHeader() = http.Header{"X-Map": {"m"}}
				w.gotHeader(true, []namedValues{{"X-Up", []string{"1"}}, {"Content-Length", []string{"2"}}, {"Connection", []string{"keep-alive"}}}, false)
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("ok"))
			},
			want: []map[string]string{{":status": "200", "x-up": "1", "content-type": "text/plain; charset=utf-8", "content-length": "2"}},
		},
		{
			name: "taken, then changed through Header: the map is sent",
			handler: func(w *h2Writer) {
				*w.heldHeader() = http.Header{"X-Up": {"1"}}
				w.gotHeader(true, []namedValues{{"X-Up", []string{"1"}}}, false)
				w.Header().Set("X-Late", "2")
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("ok"))
			},
			want: []map[string]string{{":status": "200", "x-up": "1", "x-late": "2", "content-type": "text/plain; charset=utf-8", "content-length": "2"}},
		},
		{
			name: "taken empty: sent from the list, the map filled when read after",
			handler: func(w *h2Writer) {
				// (the transport's LazyHeader: the map comes empty)
				*w.heldHeader() = http.Header{}
				w.gotHeader(true, []namedValues{{"X-Up", []string{"1"}}, {"Content-Length", []string{"2"}}}, true)
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("ok"))
				w.handlerHdr() // (as the access log reads it)
			},
			want:  []map[string]string{{":status": "200", "x-up": "1", "content-type": "text/plain; charset=utf-8", "content-length": "2"}},
			after: map[string]string{"X-Up": "1", "Content-Length": "2"},
		},
		{
			name: "taken empty, then changed through Header: filled first",
			handler: func(w *h2Writer) {
				*w.heldHeader() = http.Header{}
				w.gotHeader(true, []namedValues{{"X-Up", []string{"1"}}}, true)
				w.Header().Set("X-Late", "2")
				w.stableHeader()
				w.WriteHeader(200)
				w.Write([]byte("ok"))
			},
			want: []map[string]string{{":status": "200", "x-up": "1", "x-late": "2", "content-type": "text/plain; charset=utf-8", "content-length": "2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, nc := newWriterTestStream()
			tc.handler(&s.w)
			s.w.handlerDone()
			got := headerBlocks(t, nc.buf.Bytes())
			for _, b := range got {
				delete(b, "date")
			}
			if len(got) != len(tc.want) {
				t.Fatalf("HEADERS blocks: %v, want %v", got, tc.want)
			}
			for i := range got {
				if !mapsEqual(got[i], tc.want[i]) {
					t.Errorf("block %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
			for k, v := range tc.after {
				if got := s.w.handlerHeader.Get(k); got != v {
					t.Errorf("handler's %s after: %q, want %q", k, got, v)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	ka, kb := make([]string, 0, len(a)), make([]string, 0, len(b))
	for k := range a {
		ka = append(ka, k)
	}
	for k := range b {
		kb = append(kb, k)
	}
	slices.Sort(ka)
	slices.Sort(kb)
	if !slices.Equal(ka, kb) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
