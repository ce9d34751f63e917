package h1wire

import (
	"errors"
	"io"
)

// ErrChunk is wrapped by every error about malformed chunked framing.
var ErrChunk = errors.New("malformed chunked body")

// Chunked decodes a chunked body (RFC 9112 7.1) from an Rbuf: chunk-size
// lines ended by CRLF (extensions checked for control bytes and ignored),
// data followed by CRLF, a last chunk, then the trailer section, which the
// caller reads.
type Chunked struct {
	state chunkState
	n     int64 // bytes left of the chunk
}

type chunkState uint8

const (
	chunkSize chunkState = iota // next: a chunk-size line
	chunkData                   // inside a chunk's data
	chunkEnd                    // next: the CRLF after a chunk's data
)

// Read decodes into p. At the last chunk it calls trailers, which reads
// the trailer section from rb, and returns io.EOF. An upstream or client
// that stops early gives io.ErrUnexpectedEOF. It returns what it has
// rather than block for a new line with data in hand.
func (c *Chunked) Read(rb *Rbuf, p []byte, trailers func() error) (int, error) {
	n := 0
	for n < len(p) {
		switch c.state {
		case chunkSize:
			if n > 0 && !lineBuffered(rb.Buffered()) {
				return n, nil
			}
			line, err := rb.Line(4096)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				} else if err == ErrLineTooLong {
					err = errors.Join(ErrChunk, err)
				}
				return n, err
			}
			size, err := ParseChunkSize(line)
			rb.Discard(len(line))
			if err != nil {
				return n, err
			}
			if size == 0 {
				if err := trailers(); err != nil {
					return n, err
				}
				return n, io.EOF
			}
			c.n, c.state = size, chunkData
		case chunkData:
			if n > 0 && len(rb.Buffered()) == 0 {
				return n, nil
			}
			q := p[n:]
			if int64(len(q)) > c.n {
				q = q[:c.n]
			}
			k, err := rb.Read(q)
			n += k
			c.n -= int64(k)
			if c.n == 0 {
				c.state = chunkEnd
			}
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, err
			}
		case chunkEnd:
			if n > 0 && len(rb.Buffered()) < 2 {
				return n, nil
			}
			for len(rb.Buffered()) < 2 {
				if err := rb.Fill(); err != nil {
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return n, err
				}
			}
			if bb := rb.Buffered(); bb[0] != '\r' || bb[1] != '\n' {
				return n, errors.Join(ErrChunk, errors.New("chunk data not followed by CRLF"))
			}
			rb.Discard(2)
			c.state = chunkSize
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

// ParseChunkSize parses a chunk-size line: hex digits, optional chunk
// extensions (ignored, but checked for control bytes), CRLF.
func ParseChunkSize(line []byte) (int64, error) {
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return 0, errors.Join(ErrChunk, errors.New("chunk-size line not ended by CRLF"))
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
			return 0, errors.Join(ErrChunk, errors.New("chunk size too large"))
		}
		size = size<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, errors.Join(ErrChunk, errors.New("chunk-size line without a size"))
	}
	rest := line[i:]
	// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ); the
	// whitespace before the first ";" is refused, as net/http does.
	if len(rest) > 0 && rest[0] != ';' {
		return 0, errors.Join(ErrChunk, errors.New("invalid bytes after the chunk size"))
	}
	for _, c := range rest {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, errors.Join(ErrChunk, errors.New("control byte in a chunk extension"))
		}
	}
	return size, nil
}
