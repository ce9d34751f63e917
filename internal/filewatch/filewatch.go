// Package filewatch holds a value read from files (an API keys file, an
// OpenAPI document and the files its $refs name) and reads it again when
// one of the files changes. It has no goroutine: a caller that asks for
// the value at least an interval after the last check stats the files
// (one caller at a time; the others get the current value) and reloads
// when a modification time or size changed. A reload that fails keeps the
// last good value and is reported once per change.
package filewatch

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Value is a value read from files and read again when they change.
type Value[T any] struct {
	load     func() (T, []string, error)
	interval time.Duration

	// OnError is told of a reload that failed (once per change of the
	// files); the last good value stays.
	OnError func(error)
	// OnReload is told of each value read again after a change.
	OnReload func(T)

	cur       atomic.Pointer[T]
	base      time.Time    // Open's time: the clock's zero
	lastCheck atomic.Int64 // nanoseconds since base
	due       atomic.Bool  // an interval has passed since the last check (Latest)
	timer     *time.Timer  // sets due an interval after the last check
	mu        sync.Mutex   // one check at a time
	stamps    []stamp      // the files of the current value (or of the failed reload)
	failed    bool         // the files as stamped did not load
}

type stamp struct {
	path    string
	modTime time.Time
	size    int64
}

// Open loads the value once; an error there is the caller's to report
// (it fails a config load). load returns the value and the files it was
// read from.
func Open[T any](load func() (T, []string, error), interval time.Duration, now time.Time) (*Value[T], error) {
	w := &Value[T]{load: load, interval: interval, base: now}
	v, files, err := load()
	if err != nil {
		return nil, err
	}
	w.cur.Store(&v)
	w.stamps = restamp(nil, files)
	// a timer, not a clock read per call: Latest costs a load. Armed
	// again only by Latest's check, it does not outlive the value by
	// more than an interval.
	w.timer = time.AfterFunc(interval, func() { w.due.Store(true) })
	return w, nil
}

// restamp returns the stamps of files: the one in before where it has
// one (taken before the files were read: a change while they were read is
// seen at the next check), else taken now.
func restamp(before []stamp, files []string) []stamp {
	out := make([]stamp, 0, len(files))
	for _, f := range files {
		found := false
		for _, s := range before {
			if s.path == f {
				out = append(out, s)
				found = true
				break
			}
		}
		if !found {
			out = append(out, stampFiles([]string{f})...)
		}
	}
	return out
}

func stampFiles(files []string) []stamp {
	out := make([]stamp, len(files))
	for i, f := range files {
		out[i] = stamp{path: f, size: -1}
		if fi, err := os.Stat(f); err == nil {
			out[i].modTime, out[i].size = fi.ModTime(), fi.Size()
		}
	}
	return out
}

// Current returns the value, reading the files again first when they are
// due for a check and one of them changed.
func (w *Value[T]) Current(now time.Time) T {
	return w.at(int64(now.Sub(w.base)))
}

// Latest is Current now, for a caller that reads the value on every
// request: it reads no clock until a timer says an interval has passed
// since the last check (time.Now is some 80 instructions; this is a
// load).
func (w *Value[T]) Latest() T {
	if w.due.Load() && w.mu.TryLock() {
		w.due.Store(false)
		w.check(int64(time.Since(w.base)))
		w.timer.Reset(w.interval)
		w.mu.Unlock()
	}
	return *w.cur.Load()
}

// at returns the value at t nanoseconds since base.
func (w *Value[T]) at(t int64) T {
	if t-w.lastCheck.Load() >= int64(w.interval) && w.mu.TryLock() {
		w.check(t)
		w.mu.Unlock()
	}
	return *w.cur.Load()
}

func (w *Value[T]) check(t int64) {
	w.lastCheck.Store(t)
	changed := false
	for _, s := range w.stamps {
		fi, err := os.Stat(s.path)
		if err != nil {
			if s.size != -1 || !w.failed {
				changed = true
			}
			continue
		}
		if !fi.ModTime().Equal(s.modTime) || fi.Size() != s.size {
			changed = true
		}
	}
	if !changed {
		return
	}
	before := stampFiles(stampPaths(w.stamps))
	v, files, err := w.load()
	if err != nil {
		// stamp what failed, so that it is reported once and read again
		// when it changes
		w.stamps = before
		w.failed = true
		if w.OnError != nil {
			w.OnError(err)
		}
		return
	}
	w.failed = false
	w.stamps = restamp(before, files)
	w.cur.Store(&v)
	if w.OnReload != nil {
		w.OnReload(v)
	}
}

func stampPaths(ss []stamp) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.path
	}
	return out
}
