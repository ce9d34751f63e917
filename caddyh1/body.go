package caddyh1

import (
	"errors"
	"io"
	"net/http"
	"sync"
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
	state      chunkState
	res        *http.Response // where trailers go
	maxTrailer int
}

type chunkState uint8

const (
	chunkSize chunkState = iota // next: a chunk-size line
	chunkData                   // inside a chunk's data
	chunkEnd                    // next: the CRLF after a chunk's data
)

var errBodyClosed = errors.New("h1 transport: read on closed response body")

// errChunk is wrapped by every error about malformed chunked framing.
var errChunk = errors.New("malformed chunked response body")

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
	rd := &b.cn.rd
	n := 0
	for n < len(p) {
		switch b.state {
		case chunkSize:
			if n > 0 && !b.lineBuffered() {
				return n, nil // do not block with data in hand
			}
			line, err := rd.line(4096)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, b.fail(err)
			}
			size, err := parseChunkSize(line)
			rd.discard(len(line))
			if err != nil {
				return n, b.fail(err)
			}
			if size == 0 {
				if err := b.readTrailers(); err != nil {
					return n, b.fail(err)
				}
				b.end(io.EOF, true)
				return n, io.EOF
			}
			b.n, b.state = size, chunkData
		case chunkData:
			if n > 0 && len(rd.buffered()) == 0 {
				return n, nil
			}
			q := p[n:]
			if int64(len(q)) > b.n {
				q = q[:b.n]
			}
			k, err := rd.Read(q)
			n += k
			b.n -= int64(k)
			if b.n == 0 {
				b.state = chunkEnd
			}
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, b.fail(err)
			}
		case chunkEnd:
			if n > 0 && len(rd.buffered()) < 2 {
				return n, nil
			}
			for len(rd.buffered()) < 2 {
				if err := rd.fill(); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return n, b.fail(err)
				}
			}
			if bb := rd.buffered(); bb[0] != '\r' || bb[1] != '\n' {
				return n, b.fail(errors.Join(errChunk, errors.New("chunk data not followed by CRLF")))
			}
			rd.discard(2)
			b.state = chunkSize
		}
	}
	return n, nil
}

// lineBuffered reports whether a whole line is in the read buffer.
func (b *body) lineBuffered() bool {
	for _, c := range b.cn.rd.buffered() {
		if c == '\n' {
			return true
		}
	}
	return false
}

// parseChunkSize parses a chunk-size line: hex digits, optional chunk
// extensions (ignored, but checked for control bytes), CRLF.
func parseChunkSize(line []byte) (int64, error) {
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return 0, errors.Join(errChunk, errors.New("chunk-size line not ended by CRLF"))
	}
	line = line[:len(line)-2]
	var size int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i >= 15 {
			return 0, errors.Join(errChunk, errors.New("chunk size too large"))
		}
		size = size<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, errors.Join(errChunk, errors.New("chunk-size line without a size"))
	}
	rest := line[i:]
	// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ); the
	// whitespace before the first ";" is refused, as net/http does.
	if len(rest) > 0 && rest[0] != ';' {
		return 0, errors.Join(errChunk, errors.New("invalid bytes after the chunk size"))
	}
	for _, c := range rest {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, errors.Join(errChunk, errors.New("control byte in a chunk extension"))
		}
	}
	return size, nil
}

// readTrailers reads the trailer section after the last chunk into the
// response's Trailer, checked like header fields.
func (b *body) readTrailers() error {
	rd := &b.cn.rd
	var block []byte // the trailer fields, parsed as a head after a stand-in status line
	for {
		line, err := rd.line(b.maxTrailer)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(block)+len(line) > b.maxTrailer {
			return errors.Join(errChunk, errors.New("trailer section too large"))
		}
		last := len(line) == 2 && line[0] == '\r'
		if last && block == nil {
			rd.discard(2)
			return nil // no trailers: the common case
		}
		if block == nil {
			block = append(block, fakeStatus...)
		}
		block = append(block, line...)
		rd.discard(len(line))
		if last {
			break
		}
	}
	var h head
	if err := parseHead(block, &h); err != nil {
		return errors.Join(errChunk, err)
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
	return len(b.cn.rd.buffered())
}
