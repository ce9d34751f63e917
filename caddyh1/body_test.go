package caddyh1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"reflect"
	"strings"
	"testing"
	"time"
)

// pipeConn is a net.Conn that reads a fixed byte string and discards writes.
type pipeConn struct {
	r      io.Reader
	closed bool
}

func (c *pipeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *pipeConn) Close() error                     { c.closed = true; return nil }
func (c *pipeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *pipeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *pipeConn) SetDeadline(time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }

// testBody returns a body of kind reading data, on a connection of a pool
// of its own, and that connection.
func testBody(data []byte, kind bodyKind, n int64, bufSize int) (*body, *conn, *hostPool) {
	c := &Client{opts: Options{MaxIdleConnsPerHost: 4, ReadBufferSize: bufSize, WriteBufferSize: bufSize, MaxResponseHeaderSize: 1 << 16}}
	p := &hostPool{c: c, network: "tcp", addr: "test", open: 1}
	nc := &pipeConn{r: iotestOneByte(bytes.NewReader(data), bufSize)}
	cn := newConn(p, nc)
	res := &http.Response{}
	return &body{cn: cn, kind: kind, n: n, keep: true, res: res, maxTrailer: 1 << 16}, cn, p
}

// iotestOneByte returns r, or (for bufSize 0) a reader that reads one byte
// at a time, to exercise every split of the input.
func iotestOneByte(r io.Reader, bufSize int) io.Reader {
	if bufSize > 0 {
		return r
	}
	return oneByteReader{r}
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestChunkedBody(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		trailer http.Header
		err     string
		kept    bool // the connection goes back to the pool
	}{
		{name: "chunks", in: "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", want: "hello world", kept: true},
		{name: "hex sizes and extensions", in: "A;name=val\r\n0123456789\r\nb;x\r\nabcdefghijk\r\n0\r\n\r\n", want: "0123456789abcdefghijk", kept: true},
		{name: "trailers", in: "3\r\nabc\r\n0\r\nX-Sum: 42\r\nx-other: a\r\nX-Sum: 43\r\n\r\n", want: "abc",
			trailer: http.Header{"X-Sum": {"42", "43"}, "X-Other": {"a"}}, kept: true},
		{name: "framing fields in trailers are dropped", in: "0\r\nContent-Length: 5\r\nX-A: b\r\n\r\n", want: "",
			trailer: http.Header{"X-A": {"b"}}, kept: true},
		{name: "bytes after the body: not kept", in: "0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", want: "", kept: false},
		{name: "size with a sign", in: "+5\r\nhello\r\n0\r\n\r\n", err: "without a size"},
		{name: "size with 0x", in: "0x5\r\nhello\r\n0\r\n\r\n", err: "invalid bytes after"},
		{name: "negative size", in: "-1\r\nhello\r\n0\r\n\r\n", err: "without a size"},
		{name: "overflowing size", in: "10000000000000000\r\n", err: "too large"},
		{name: "space inside the size", in: "1 0\r\n", err: "invalid bytes after"},
		{name: "space before an extension", in: "5 ;x\r\nhello\r\n0\r\n\r\n", err: "invalid bytes after"},
		{name: "bare LF after the size", in: "5\nhello\r\n0\r\n\r\n", err: "CRLF"},
		{name: "data longer than its size", in: "3\r\nhello\r\n0\r\n\r\n", err: "not followed by CRLF"},
		{name: "bare LF after data", in: "5\r\nhello\n0\r\n\r\n", err: "not followed by CRLF"},
		{name: "control byte in an extension", in: "5;a\x00\r\nhello\r\n0\r\n\r\n", err: "control byte"},
		{name: "obs-fold in trailers", in: "0\r\nX-A: a\r\n b\r\n\r\n", err: "obs-fold"},
		{name: "bare LF in trailers", in: "0\r\nX-A: a\n\r\n", err: "bare LF"},
		{name: "cut in the data", in: "5\r\nhel", err: "unexpected EOF"},
		{name: "cut before the last chunk", in: "5\r\nhello\r\n", err: "EOF"},
		{name: "cut in the trailers", in: "0\r\nX-A: b\r\n", err: "EOF"},
	}
	for _, tc := range tests {
		for _, bufSize := range []int{0, 7, 4096} {
			t.Run(tc.name, func(t *testing.T) {
				size := bufSize
				if size == 0 {
					size = 16 // rbuf's size; the reader underneath gives one byte per read
				}
				b, cn, p := testBody([]byte(tc.in), bodyChunked, 0, size)
				if bufSize == 0 {
					cn.rd.Rd = oneByteReader{strings.NewReader(tc.in)}
				}
				got, err := io.ReadAll(b)
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("buffer %d: error %v, want one containing %q", bufSize, err, tc.err)
					}
					if len(p.idle) != 0 {
						t.Fatal("a connection with a broken body went back to the pool")
					}
					return
				}
				if err != nil {
					t.Fatalf("buffer %d: %v", bufSize, err)
				}
				if string(got) != tc.want {
					t.Fatalf("buffer %d: body %q, want %q", bufSize, got, tc.want)
				}
				if !reflect.DeepEqual(b.res.Trailer, tc.trailer) {
					t.Fatalf("trailer %v, want %v", b.res.Trailer, tc.trailer)
				}
				if bufSize == 0 && !tc.kept {
					return // the bytes after the body are not read yet: the pool's liveness check finds them
				}
				if kept := len(p.idle) == 1; kept != tc.kept {
					t.Fatalf("kept %v, want %v", kept, tc.kept)
				}
			})
		}
	}
}

func TestFixedBody(t *testing.T) {
	b, _, p := testBody([]byte("hello world, and more"), bodyFixed, 11, 4096)
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("%q, %v", got, err)
	}
	// bytes after the declared length stay in the buffer: not kept
	if len(p.idle) != 0 {
		t.Fatal("kept a connection with bytes after the body")
	}

	b, _, p = testBody([]byte("hello"), bodyFixed, 5, 4096)
	if got, err := io.ReadAll(b); err != nil || string(got) != "hello" || len(p.idle) != 1 {
		t.Fatalf("%q, %v, idle %d", got, err, len(p.idle))
	}

	b, _, p = testBody([]byte("hel"), bodyFixed, 5, 4096)
	if _, err := io.ReadAll(b); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v", err)
	}
	if p.open != 0 {
		t.Fatal("short body: connection not closed")
	}
}

func TestBodyCloseEarly(t *testing.T) {
	b, cn, p := testBody([]byte("5\r\nhello\r\n0\r\n\r\n"), bodyChunked, 0, 4096)
	buf := make([]byte, 2)
	if _, err := b.Read(buf); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if len(p.idle) != 0 || p.open != 0 || !cn.nc.(*pipeConn).closed {
		t.Fatal("a half-read response's connection was not closed")
	}
	if _, err := b.Read(buf); err != errBodyClosed {
		t.Fatalf("read after close: %v", err)
	}
}

// FuzzChunkedBody checks the chunked reader against net/http's: whatever
// this reader accepts, net/http's reads to the same bytes.
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"a;x=y\r\n0123456789\r\n0\r\nX-A: b\r\n\r\n",
		"0\r\n\r\n",
		"1\r\na\r\n1\r\nb\r\n0\r\nT: v\r\nU: w\r\n\r\n",
		"5\nhello\n0\n\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, bufSize uint8) {
		size := int(bufSize)%64 + 4
		b, _, _ := testBody(in, bodyChunked, 0, size)
		got, err := io.ReadAll(b)
		if err != nil {
			return
		}
		want, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in)))
		if err != nil {
			t.Fatalf("accepted a body net/http refuses (%v): %q", err, in)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %q, net/http %q", got, want)
		}
	})
}
