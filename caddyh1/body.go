package caddyh1

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/apigate/gateway/internal/h1wire"
)

type bodyKind uint8

const (
	bodyFixed   bodyKind = iota // Content-Length
	bodyChunked                 // Transfer-Encoding: chunked
	bodyToEOF                   // neither: until the upstream closes
)

// body is a response body read from the connection. Reading it to its end
// ends the exchange (the connection goes back to the pool, or is closed);
// closing it earlier closes the connection, since what is left of the
// response cannot be told from the next one without reading it.
type body struct {
	cn   *conn // nil once the exchange is over
	kind bodyKind
	keep bool  // the connection may be kept afterwards
	n    int64 // bytes left: of the body (fixed) or of the chunk (chunked)
	err  error // sticky: returned by every Read once the body ended

	// chunked
	chunked    h1wire.Chunked
	res        *http.Response // where trailers go
	maxTrailer int
}

var errBodyClosed = errors.New("h1 transport: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	if b.cn == nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	switch b.kind {
	case bodyFixed:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err := b.cn.rd.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			b.end(io.EOF, true)
			return n, io.EOF
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			b.end(err, false)
			return n, err
		}
		return n, nil
	case bodyToEOF:
		n, err := b.cn.rd.Read(p)
		if err != nil {
			b.end(err, false)
		}
		return n, err
	}
	return b.readChunked(p)
}

func (b *body) readChunked(p []byte) (int, error) {
	n, err := b.chunked.Read(&b.cn.rd, p, b.readTrailers)
	switch err {
	case nil:
	case io.EOF:
		b.end(io.EOF, true)
	default:
		b.fail(err)
	}
	return n, err
}

// readTrailers reads the trailer section after the last chunk into the
// response's Trailer, checked like header fields.
func (b *body) readTrailers() error {
	rd := &b.cn.rd
	var block []byte // the trailer fields, parsed as a head after a stand-in status line
	for {
		line, err := rd.Line(b.maxTrailer)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(block)+len(line) > b.maxTrailer {
			return errors.Join(h1wire.ErrChunk, errors.New("trailer section too large"))
		}
		last := len(line) == 2 && line[0] == '\r'
		if last && block == nil {
			rd.Discard(2)
			return nil // no trailers: the common case
		}
		if block == nil {
			block = append(block, fakeStatus...)
		}
		block = append(block, line...)
		rd.Discard(len(line))
		if last {
			break
		}
	}
	var h head
	if err := parseHead(block, &h, nil, nil); err != nil {
		return errors.Join(h1wire.ErrChunk, err)
	}
	for k, vv := range h.header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Host", "Connection":
			continue // framing and routing fields are not trailers (RFC 9110 6.5.1)
		}
		if b.res.Trailer == nil {
			b.res.Trailer = make(http.Header)
		}
		b.res.Trailer[k] = append(b.res.Trailer[k], vv...)
	}
	return nil
}

var fakeStatus = []byte("HTTP/1.1 200 OK\r\n")

// fail ends the body with err; the connection is closed.
func (b *body) fail(err error) error {
	b.end(err, false)
	return err
}

// end ends the exchange; the connection is kept when ok and allowed.
func (b *body) end(err error, ok bool) {
	cn := b.cn
	b.cn, b.err = nil, err
	cn.done(ok && b.keep)
}

// Close ends the body; a connection whose response was not read to its end
// is closed, not kept.
func (b *body) Close() error {
	if b.cn != nil {
		b.end(errBodyClosed, false)
	} else if b.err == io.EOF {
		b.err = errBodyClosed
	}
	return nil
}

// bufPool pools byte slices of one size.
type bufPool struct {
	p    sync.Pool
	size int
}

func newBufPool(size int) *bufPool {
	bp := &bufPool{size: size}
	bp.p.New = func() any { b := make([]byte, size); return &b }
	return bp
}

func (bp *bufPool) get() *[]byte  { return bp.p.Get().(*[]byte) }
func (bp *bufPool) put(b *[]byte) { bp.p.Put(b) }

// Buffered reports how many bytes of the body were read from the upstream
// with what came before and wait in the buffer: a reader that copies the
// body (the fast path) decides from it whether the first read can block.
func (b *body) Buffered() int {
	if b.cn == nil {
		return 0
	}
	return len(b.cn.rd.Buffered())
}
