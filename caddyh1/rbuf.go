package caddyh1

import (
	"bytes"
	"errors"
	"io"
)

// rbuf is a connection's read buffer. Unlike bufio.Reader it can hold a
// whole response head in place (parsed without copying line by line), grow
// for a head larger than the buffer, and shrink back afterwards.
type rbuf struct {
	rd   io.Reader
	buf  []byte
	base []byte // the connection's own buffer, restored when a grown buffer empties
	r, w int
	got  int64 // bytes read from rd since the exchange began

	beforeRead func() // called before every read from rd, if set
}

var errLineTooLong = errors.New("line too long")

func newRbuf(rd io.Reader, size int) rbuf {
	b := make([]byte, size)
	return rbuf{rd: rd, buf: b, base: b}
}

func (b *rbuf) buffered() []byte { return b.buf[b.r:b.w] }

// fill reads once from the connection, after moving what is buffered to the
// front. It fails with errBufferFull-like io.ErrShortBuffer when the buffer
// is full.
func (b *rbuf) fill() error {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.w == len(b.buf) {
		return io.ErrShortBuffer
	}
	if b.beforeRead != nil {
		b.beforeRead()
	}
	for range 100 {
		n, err := b.rd.Read(b.buf[b.w:])
		if n < 0 || n > len(b.buf)-b.w {
			return errors.New("invalid read count")
		}
		b.w += n
		b.got += int64(n)
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// grow makes room for at least one more byte, up to max bytes in all.
func (b *rbuf) grow(max int) bool {
	if len(b.buf) >= max {
		return false
	}
	n := min(2*len(b.buf), max)
	nb := make([]byte, n)
	b.w = copy(nb, b.buf[b.r:b.w])
	b.r = 0
	b.buf = nb
	return true
}

// discard drops n buffered bytes.
func (b *rbuf) discard(n int) {
	b.r += n
	if b.r == b.w {
		b.r, b.w = 0, 0
		if len(b.buf) != len(b.base) {
			b.buf = b.base
		}
	}
}

// Read reads buffered bytes, or reads from the connection straight into p
// when nothing is buffered and p is at least as large as the buffer.
func (b *rbuf) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= len(b.buf) {
			if b.beforeRead != nil {
				b.beforeRead()
			}
			n, err := b.rd.Read(p)
			b.got += int64(max(n, 0))
			return n, err
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.discard(n)
	return n, nil
}

// line returns the next line through its LF, reading and growing the buffer
// as needed up to max bytes. The line stays valid until the next read.
func (b *rbuf) line(max int) ([]byte, error) {
	from := 0
	for {
		buf := b.buf[b.r:b.w]
		if i := bytes.IndexByte(buf[from:], '\n'); i >= 0 {
			return buf[:from+i+1], nil
		}
		from = len(buf)
		if err := b.fill(); err != nil {
			if err != io.ErrShortBuffer {
				return nil, err
			}
			if !b.grow(max) {
				return nil, errLineTooLong
			}
		}
	}
}
