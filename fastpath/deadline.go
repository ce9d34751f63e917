package fastpath

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// writeDeadlineMoves counts the write deadlines set on HTTP/1.1
// connections (setWriteDeadline) while countWriteDeadlines is set: for
// the test that a connection's deadline is not moved on every request
// (TestWriteDeadlineKept; a shared counter costs every move a write).
var (
	countWriteDeadlines atomic.Bool
	writeDeadlineMoves  atomic.Int64
)

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
		return hard, !current.Equal(hard)
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
