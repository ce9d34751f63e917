package fastpath

import (
	"errors"
	"io"
	"net/http"

	"github.com/apigate/gateway/internal/h1wire"
)

// reqBody is a request's body, read from the client connection: a fixed
// length or chunked. It is the connection's, reused for each request.
type reqBody struct {
	c       *conn
	chunked bool
	n       int64 // bytes left of a fixed-length body
	dec     h1wire.Chunked
	sawEOF  bool
	closed  bool
	err     error // sticky: the body failed (the connection cannot be reused)
	read    int64 // bytes of body delivered
	// handlerRead is what the handlers read (Caddy's access log counts
	// the reads through the request's body, not the server's drain)
	handlerRead int64
}

// maxPostHandlerReadBytes is how much of a body the handler left unread is
// read (and dropped) to keep the connection, as net/http does.
const maxPostHandlerReadBytes = 256 << 10

func (b *reqBody) reset(c *conn, h *reqHead) {
	*b = reqBody{c: c, chunked: h.chunked, n: max(h.contentLength, 0)}
	if !b.chunked && b.n == 0 {
		b.sawEOF = true
	}
}

// unread reports whether the client may still be sending the body: it
// has one, the connection has not read its end, and reading it did not
// fail (net/http's requestBodyLimitHit or closedRequestBodyEarly).
func (b *reqBody) unread() bool { return !b.empty() && !b.sawEOF && b.err == nil }

// empty reports whether the request has no body at all.
func (b *reqBody) empty() bool { return !b.chunked && b.n == 0 && b.read == 0 }

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.readBody(p)
	b.handlerRead += int64(n)
	return n, err
}

func (b *reqBody) readBody(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.sawEOF {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	c := b.c
	c.w.bodyRead() // 100 Continue, when the client waits for it
	c.bodyReadDeadline()
	var n int
	var err error
	if b.chunked {
		n, err = b.dec.Read(&c.rb, p, b.readTrailers)
		if err == io.EOF {
			b.sawEOF = true
		}
	} else {
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = c.rb.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			b.sawEOF = true
			err = io.EOF
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	b.read += int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// readTrailers reads the trailer section after the last chunk. The request
// announced no trailers (those requests are handed to Caddy), so the fields
// are checked like header fields and dropped, as net/http drops them.
func (b *reqBody) readTrailers() error {
	rb := &b.c.rb
	total := 0
	limit := b.c.l.maxHeaderBytes
	for {
		line, err := rb.Line(limit)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return errors.Join(h1wire.ErrChunk, err)
		}
		total += len(line)
		if total > limit {
			return errors.Join(h1wire.ErrChunk, errors.New("trailer section too large"))
		}
		if len(line) == 2 && line[0] == '\r' {
			rb.Discard(2)
			return nil
		}
		if err := checkFieldLine(line); err != nil {
			return errors.Join(h1wire.ErrChunk, err)
		}
		rb.Discard(len(line))
	}
}

// checkFieldLine checks one field line, CRLF included.
func checkFieldLine(line []byte) error {
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return errors.New("trailer line not ended by CRLF")
	}
	line = line[:len(line)-2]
	colon := -1
	for i, c := range line {
		if c == ':' {
			colon = i
			break
		}
		if !h1wire.IsTokenByte(c) {
			return errors.New("invalid trailer name")
		}
	}
	if colon <= 0 {
		return errors.New("invalid trailer name")
	}
	for _, c := range line[colon+1:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return errors.New("control byte in a trailer value")
		}
	}
	return nil
}

// Close ends the handler's use of the body; what is left is read (up to a
// limit) or the connection closed when the response is done.
func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// drain reads what the handler left of the body, up to
// maxPostHandlerReadBytes; it reports whether the connection can be kept.
func (b *reqBody) drain() bool {
	if b.err != nil {
		return false
	}
	if b.sawEOF {
		return true
	}
	var buf [4096]byte
	var total int
	for total <= maxPostHandlerReadBytes {
		n, err := b.readBody(buf[:])
		total += n
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}
