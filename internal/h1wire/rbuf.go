package h1wire

import (
	"bytes"
	"errors"
	"io"
)

// Rbuf is a connection's read buffer. Unlike bufio.Reader it can hold a
// whole head in place (parsed without copying it line by line), grow for a
// head larger than the buffer, and shrink back afterwards.
type Rbuf struct {
	Rd   io.Reader
	buf  []byte
	base []byte // the connection's own buffer, restored when a grown buffer empties
	r, w int
	Got  int64 // bytes read from Rd since the caller last zeroed it

	BeforeRead func() // called before every read from Rd, if set
}

// ErrLineTooLong is a line longer than Line's limit.
var ErrLineTooLong = errors.New("line too long")

// NewRbuf returns a buffer of size bytes reading from rd.
func NewRbuf(rd io.Reader, size int) Rbuf {
	b := make([]byte, size)
	return Rbuf{Rd: rd, buf: b, base: b}
}

// Buffered returns the bytes read and not yet consumed.
func (b *Rbuf) Buffered() []byte { return b.buf[b.r:b.w] }

// Reset drops what is buffered.
func (b *Rbuf) Reset() {
	b.r, b.w = 0, 0
	b.buf = b.base
}

// Space returns the free space after what is buffered (moved to the
// front first), for a caller that reads into it itself and then calls
// Added; io.ErrShortBuffer when the buffer is full.
func (b *Rbuf) Space() ([]byte, error) {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.w == len(b.buf) {
		return nil, io.ErrShortBuffer
	}
	return b.buf[b.w:], nil
}

// Added counts n bytes read into Space's slice as buffered.
func (b *Rbuf) Added(n int) {
	b.w += n
	b.Got += int64(n)
}

// Fill reads once from Rd, after moving what is buffered to the front. It
// fails with io.ErrShortBuffer when the buffer is full.
func (b *Rbuf) Fill() error {
	if _, err := b.Space(); err != nil {
		return err
	}
	if b.BeforeRead != nil {
		b.BeforeRead()
	}
	for range 100 {
		n, err := b.Rd.Read(b.buf[b.w:])
		if n < 0 || n > len(b.buf)-b.w {
			return errors.New("invalid read count")
		}
		b.Added(n)
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// Grow makes room for at least one more byte, up to max bytes in all.
func (b *Rbuf) Grow(max int) bool {
	if len(b.buf) >= max {
		return false
	}
	nb := make([]byte, min(2*len(b.buf), max))
	b.w = copy(nb, b.buf[b.r:b.w])
	b.r = 0
	b.buf = nb
	return true
}

// Discard drops n buffered bytes.
func (b *Rbuf) Discard(n int) {
	b.r += n
	if b.r == b.w {
		b.r, b.w = 0, 0
		if len(b.buf) != len(b.base) {
			b.buf = b.base
		}
	}
}

// Read reads buffered bytes, or reads from Rd straight into p when nothing
// is buffered and p is at least as large as the buffer.
func (b *Rbuf) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= len(b.buf) {
			if b.BeforeRead != nil {
				b.BeforeRead()
			}
			n, err := b.Rd.Read(p)
			b.Got += int64(max(n, 0))
			return n, err
		}
		if err := b.Fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.Discard(n)
	return n, nil
}

// Line returns the next line through its LF, reading and growing the
// buffer as needed up to max bytes. The line stays valid until the next
// read.
func (b *Rbuf) Line(max int) ([]byte, error) {
	from := 0
	for {
		buf := b.buf[b.r:b.w]
		if i := bytes.IndexByte(buf[from:], '\n'); i >= 0 {
			return buf[:from+i+1], nil
		}
		from = len(buf)
		if from >= max {
			return nil, ErrLineTooLong
		}
		if err := b.Fill(); err != nil {
			if err != io.ErrShortBuffer {
				return nil, err
			}
			if !b.Grow(max) {
				return nil, ErrLineTooLong
			}
		}
	}
}
