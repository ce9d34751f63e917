package caddyapikey

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/gateway/caddyapikey/apikeys"
)

// keysFile is a keys file that is re-read when it changes. It has no
// goroutine: a request that comes at least interval after the last check
// stats the file (one request at a time; the others use the current set)
// and re-reads it when its modification time or size changed. A file that
// fails to read or parse keeps the last good set and is reported once per
// change through onError.
type keysFile struct {
	path     string
	interval time.Duration
	onError  func(error)
	onReload func(n int)

	cur       atomic.Pointer[apikeys.Set]
	lastCheck atomic.Int64 // unix nanoseconds
	mu        sync.Mutex   // one check at a time
	modTime   time.Time
	size      int64
	failed    bool // the file as stamped did not load
}

// openKeysFile reads the file once; an error there fails the config load.
func openKeysFile(path string, interval time.Duration, now time.Time) (*keysFile, error) {
	f := &keysFile{path: path, interval: interval}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("keys_file: %v", err)
	}
	set, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cur.Store(set)
	f.modTime, f.size = fi.ModTime(), fi.Size()
	f.lastCheck.Store(now.UnixNano())
	return f, nil
}

func (f *keysFile) load() (*apikeys.Set, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("keys_file: %v", err)
	}
	set, err := apikeys.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("keys_file %s: %v", f.path, err)
	}
	return set, nil
}

// Current returns the key set, re-reading the file first when it is due
// for a check and has changed.
func (f *keysFile) Current(now time.Time) *apikeys.Set {
	last := f.lastCheck.Load()
	if now.UnixNano()-last >= int64(f.interval) && f.mu.TryLock() {
		f.check(now)
		f.mu.Unlock()
	}
	return f.cur.Load()
}

func (f *keysFile) check(now time.Time) {
	f.lastCheck.Store(now.UnixNano())
	fi, err := os.Stat(f.path)
	if err != nil {
		if !f.failed {
			f.failed = true
			f.modTime, f.size = time.Time{}, -1
			f.report(fmt.Errorf("keys_file: %v", err))
		}
		return
	}
	if fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return
	}
	f.modTime, f.size = fi.ModTime(), fi.Size()
	set, err := f.load()
	if err != nil {
		f.failed = true
		f.report(err)
		return
	}
	f.failed = false
	f.cur.Store(set)
	if f.onReload != nil {
		f.onReload(set.Len())
	}
}

func (f *keysFile) report(err error) {
	if f.onError != nil {
		f.onError(err)
	}
}
