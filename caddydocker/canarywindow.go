package caddydocker

import (
	"math/bits"
	"sync"
	"time"
)

// A window counts one version's answers over a sliding window of time:
// how many, how many failed (upstream 5xx and connection failures), how
// many were slower than the canary's max_p99, and a latency histogram
// for the P99 the dashboard shows. The window is windowSlots slots of
// Window/windowSlots each; a slot older than the window is dropped from
// the totals as time moves on, so the totals cover between
// (windowSlots-1)/windowSlots and all of the window.
const windowSlots = 10

// Histogram of latencies in microseconds, log-linear: values below 16 µs
// have a bin each, then each power of two has 8 bins (at most 12.5%
// apart), up to 2^31 µs (36 minutes; longer latencies share the last bin).
const (
	histLinear = 16
	histSub    = 8
	histMaxExp = 31
	histBins   = histLinear + (histMaxExp-3)*histSub
)

type slotCounts struct {
	n, fail, slow uint32
	hist          [histBins]uint32
}

func (c *slotCounts) sub(o *slotCounts) {
	c.n -= o.n
	c.fail -= o.fail
	c.slow -= o.slow
	for i := range c.hist {
		c.hist[i] -= o.hist[i]
	}
}

// window is one version's sliding window. Its zero value is not usable:
// newWindow.
type window struct {
	mu    sync.Mutex
	slot  time.Duration
	slow  time.Duration // answers slower than this count as slow (0: none)
	epoch int64         // number of the newest slot (time / slot)
	slots [windowSlots]slotCounts
	agg   slotCounts
}

func newWindow(length, slow time.Duration) *window {
	slot := length / windowSlots
	if slot <= 0 {
		slot = time.Millisecond
	}
	return &window{slot: slot, slow: slow}
}

// histBin is the bin of a latency.
func histBin(d time.Duration) int {
	us := d.Microseconds()
	if us < histLinear {
		if us < 0 {
			return 0
		}
		return int(us)
	}
	e := bits.Len64(uint64(us)) - 1 // >= 4
	if e > histMaxExp {
		return histBins - 1
	}
	m := int(uint64(us)>>(e-3)) & (histSub - 1)
	return histLinear + (e-4)*histSub + m
}

// histUpper is the largest latency of a bin.
func histUpper(b int) time.Duration {
	if b < histLinear {
		return time.Duration(b) * time.Microsecond
	}
	e := (b-histLinear)/histSub + 4
	m := (b - histLinear) % histSub
	return time.Duration((int64(histSub+m+1)<<(e-3))-1) * time.Microsecond
}

// monoBase makes slot numbers from the monotonic clock: a wall clock
// step does not move answers in or out of the window.
var monoBase = time.Now()

// advance drops the slots that left the window by now (w.mu held).
func (w *window) advance(now time.Time) *slotCounts {
	cur := int64(max(now.Sub(monoBase), 0) / w.slot)
	if cur > w.epoch {
		from := w.epoch + 1
		if cur-from >= windowSlots {
			from = cur - windowSlots + 1
		}
		for e := from; e <= cur; e++ {
			s := &w.slots[e%windowSlots]
			if s.n > 0 {
				w.agg.sub(s)
				*s = slotCounts{}
			}
		}
		w.epoch = cur
	}
	return &w.slots[cur%windowSlots]
}

// add counts one answer at now and returns the window's totals.
func (w *window) add(now time.Time, failed bool, latency time.Duration) (n, fail, slow uint32) {
	b := histBin(latency)
	isSlow := w.slow > 0 && latency > w.slow
	w.mu.Lock()
	s := w.advance(now)
	s.n++
	w.agg.n++
	s.hist[b]++
	w.agg.hist[b]++
	if failed {
		s.fail++
		w.agg.fail++
	}
	if isSlow {
		s.slow++
		w.agg.slow++
	}
	n, fail, slow = w.agg.n, w.agg.fail, w.agg.slow
	w.mu.Unlock()
	return n, fail, slow
}

// WindowStats are a window's totals at one moment.
type WindowStats struct {
	// Requests are the answers in the window; Failures those that failed
	// (upstream 5xx, connection failures); Slow those slower than max_p99.
	Requests int `json:"requests"`
	Failures int `json:"failures"`
	Slow     int `json:"slow,omitempty"`
	// ErrorRate is Failures/Requests in percent (0 without requests).
	ErrorRate float64 `json:"error_rate"`
	// P99 is the 99th percentile latency (to the response head), to
	// within 12.5% (the histogram's bin); 0 without requests. P99MS is
	// the same in milliseconds (the JSON form).
	P99   time.Duration `json:"-"`
	P99MS float64       `json:"p99_ms"`
}

// stats returns the totals at now.
func (w *window) stats(now time.Time) WindowStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.advance(now)
	return w.statsLocked()
}

func (w *window) statsLocked() WindowStats {
	a := &w.agg
	st := WindowStats{Requests: int(a.n), Failures: int(a.fail), Slow: int(a.slow)}
	if a.n == 0 {
		return st
	}
	st.ErrorRate = 100 * float64(a.fail) / float64(a.n)
	// nearest rank: the ceil(0.99 n)-th smallest answer
	rank := (99*uint64(a.n) + 99) / 100
	var seen uint64
	for b, c := range a.hist {
		seen += uint64(c)
		if seen >= rank {
			st.P99 = histUpper(b)
			st.P99MS = float64(st.P99.Microseconds()) / 1000
			break
		}
	}
	return st
}

// reset empties the window.
func (w *window) reset() {
	w.mu.Lock()
	w.slots = [windowSlots]slotCounts{}
	w.agg = slotCounts{}
	w.mu.Unlock()
}

// overLimits reports whether totals break a canary's limits: at least
// minRequests answers, and a failure rate above maxErrorRate percent or
// (with a max_p99) a P99 above it. The P99 test is exact without the
// histogram: the nearest-rank P99 of n answers is above X exactly when
// more than n/100 of them are slower than X.
func overLimits(spec *CanarySpec, n, fail, slow uint32) (bool, string) {
	if n == 0 || int(n) < spec.MinRequests {
		return false, ""
	}
	if float64(fail)*100 > spec.MaxErrorRate*float64(n) {
		return true, "error_rate"
	}
	if spec.MaxP99 > 0 && uint64(slow)*100 > uint64(n) {
		return true, "p99"
	}
	return false, ""
}
