package fastpath

import (
	"errors"
	"io"
	"net"
	"time"
)

// rbuf is a client connection's read buffer. It holds a whole request head
// in place, so the head is parsed without copying it line by line, grows
// for a head larger than the buffer (up to the server's limit), and goes
// back to its own size once a grown buffer empties.
type rbuf struct {
	st   *state
	buf  []byte
	base []byte
	r, w int

	// deadline handling for reads of a request body (see conn.readDeadline)
}

func (b *rbuf) buffered() []byte { return b.buf[b.r:b.w] }

// fill reads once from the connection, after moving what is buffered to
// the front; io.ErrShortBuffer means the buffer is full.
func (b *rbuf) fill() error {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.w == len(b.buf) {
		return io.ErrShortBuffer
	}
	for range 100 {
		n, err := b.st.c.nc.Read(b.buf[b.w:])
		if n < 0 || n > len(b.buf)-b.w {
			return errors.New("invalid read count")
		}
		b.w += n
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// grow makes room for more bytes, up to max in all.
func (b *rbuf) grow(max int) bool {
	if len(b.buf) >= max {
		return false
	}
	nb := make([]byte, min(2*len(b.buf), max))
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

// read reads buffered bytes, or straight into p when nothing is buffered
// and p is at least as large as the buffer.
func (b *rbuf) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if len(p) >= len(b.buf) {
			return b.st.c.nc.Read(p)
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.discard(n)
	return n, nil
}

// line returns the next line through its LF, reading as needed up to max
// bytes. It stays valid until the next read.
func (b *rbuf) line(max int) ([]byte, error) {
	from := 0
	for {
		buf := b.buf[b.r:b.w]
		for i := from; i < len(buf); i++ {
			if buf[i] == '\n' {
				return buf[:i+1], nil
			}
		}
		from = len(buf)
		if from >= max {
			return nil, errLineTooLong
		}
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

var errLineTooLong = errors.New("line too long")

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// deadlineSlack: a deadline that resets on progress (read_idle_timeout,
// write_idle_timeout) is set 1.5 times the timeout ahead and only moved
// when less than the timeout is left, so that a stream of small reads or
// writes does not reset a timer each time. A stall is cut between 1 and
// 1.5 times the timeout after the last progress, never earlier.
func nextDeadline(now, current time.Time, timeout time.Duration, hard time.Time) (time.Time, bool) {
	if timeout <= 0 {
		if hard.IsZero() || current.Equal(hard) {
			return current, false
		}
		return hard, true
	}
	if !current.IsZero() && current.Sub(now) >= timeout && (hard.IsZero() || !current.After(hard)) {
		return current, false
	}
	d := now.Add(timeout + timeout/2)
	if !hard.IsZero() && d.After(hard) {
		d = hard
	}
	return d, !d.Equal(current)
}
