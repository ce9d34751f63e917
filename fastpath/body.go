package fastpath

import (
	"errors"
	"io"
	"net/http"
)

// reqBody is a request's body, read from the client connection: a fixed
// length or chunked. It is the connection's, reused for each request.
type reqBody struct {
	c       *conn
	chunked bool
	n       int64 // bytes left: of the body (fixed) or of the chunk (chunked)
	state   chunkState
	sawEOF  bool
	closed  bool
	err     error // sticky: the body failed (the connection cannot be reused)
	read    int64 // bytes of body delivered
}

type chunkState uint8

const (
	chunkSize chunkState = iota // next: a chunk-size line
	chunkData                   // inside a chunk's data
	chunkEnd                    // next: the CRLF after a chunk's data
)

// maxPostHandlerReadBytes is how much of a body the handler left unread is
// read (and dropped) to keep the connection, as net/http does.
const maxPostHandlerReadBytes = 256 << 10

var errChunk = errors.New("malformed chunked request body")

func (b *reqBody) reset(c *conn, h *reqHead) {
	*b = reqBody{c: c, chunked: h.chunked, n: max(h.contentLength, 0)}
	if !b.chunked && b.n == 0 {
		b.sawEOF = true
	}
}

// empty reports whether the request has no body at all.
func (b *reqBody) empty() bool { return !b.chunked && b.n == 0 && b.read == 0 }

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readBody(p)
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
		n, err = b.readChunked(p)
	} else {
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = c.rb.read(p)
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

func (b *reqBody) readChunked(p []byte) (int, error) {
	rb := &b.c.rb
	n := 0
	for n < len(p) {
		switch b.state {
		case chunkSize:
			if n > 0 && !lineBuffered(rb.buffered()) {
				return n, nil // do not block with data in hand
			}
			line, err := rb.line(4096)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				} else if err == errLineTooLong {
					err = errors.Join(errChunk, err)
				}
				return n, err
			}
			size, err := parseChunkSize(line)
			rb.discard(len(line))
			if err != nil {
				return n, err
			}
			if size == 0 {
				if err := b.readTrailers(); err != nil {
					return n, err
				}
				b.sawEOF = true
				return n, io.EOF
			}
			b.n, b.state = size, chunkData
		case chunkData:
			if n > 0 && len(rb.buffered()) == 0 {
				return n, nil
			}
			q := p[n:]
			if int64(len(q)) > b.n {
				q = q[:b.n]
			}
			k, err := rb.read(q)
			n += k
			b.n -= int64(k)
			if b.n == 0 {
				b.state = chunkEnd
			}
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, err
			}
		case chunkEnd:
			if n > 0 && len(rb.buffered()) < 2 {
				return n, nil
			}
			for len(rb.buffered()) < 2 {
				if err := rb.fill(); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return n, err
				}
			}
			if bb := rb.buffered(); bb[0] != '\r' || bb[1] != '\n' {
				return n, errors.Join(errChunk, errors.New("chunk data not followed by CRLF"))
			}
			rb.discard(2)
			b.state = chunkSize
		}
	}
	return n, nil
}

func lineBuffered(b []byte) bool {
	for _, c := range b {
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

// readTrailers reads the trailer section after the last chunk. The request
// announced no trailers (those requests are handed to Caddy), so the fields
// are checked like header fields and dropped, as net/http drops them.
func (b *reqBody) readTrailers() error {
	rb := &b.c.rb
	total := 0
	limit := b.c.l.maxHeaderBytes
	for {
		line, err := rb.line(limit)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return errors.Join(errChunk, err)
		}
		total += len(line)
		if total > limit {
			return errors.Join(errChunk, errors.New("trailer section too large"))
		}
		if len(line) == 2 && line[0] == '\r' {
			rb.discard(2)
			return nil
		}
		if err := checkFieldLine(line); err != nil {
			return errors.Join(errChunk, err)
		}
		rb.discard(len(line))
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
		if !isTokenByte(c) {
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
