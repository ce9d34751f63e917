package caddyquota

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// table is a file of fixed-size records of 64-bit words, indexed from 0,
// mapped into memory in chunks as it grows. Words are read and written
// with atomic operations in place: on Unix the pages are the file's, so a
// write is in the kernel's page cache the moment it is made and survives
// the process being killed.
//
// Chunks are never unmapped while the table is open, so a word's pointer
// stays valid until close.
type table struct {
	path     string
	f        *os.File
	rec      int // record size in bytes, a multiple of 8
	per      int // records per chunk
	mu       sync.Mutex
	chunks   atomic.Pointer[[][]byte]
	closed   bool
	chunkLen int
}

// openTable opens (creating) the table file at path, with records of rec
// bytes, per records to a chunk, and maps what it holds.
func openTable(path string, rec, per int) (*table, error) {
	if rec%8 != 0 || rec <= 0 || per <= 0 {
		return nil, fmt.Errorf("table %s: bad geometry %d/%d", path, rec, per)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	t := &table{path: path, f: f, rec: rec, per: per, chunkLen: rec * per}
	empty := [][]byte{}
	t.chunks.Store(&empty)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if n := (st.Size() + int64(t.chunkLen) - 1) / int64(t.chunkLen); n > 0 {
		if err := t.grow(int(n)); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

// ensure makes records [0, n) addressable.
func (t *table) ensure(n uint32) error {
	need := (int(n) + t.per - 1) / t.per
	if len(*t.chunks.Load()) >= need {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.grow(need)
}

// grow maps chunks up to n; t.mu is held (or t is not shared yet).
func (t *table) grow(n int) error {
	if t.closed {
		return errors.New("table closed")
	}
	old := *t.chunks.Load()
	if len(old) >= n {
		return nil
	}
	size := int64(n) * int64(t.chunkLen)
	if st, err := t.f.Stat(); err != nil {
		return err
	} else if st.Size() < size {
		if err := t.f.Truncate(size); err != nil {
			return fmt.Errorf("growing %s: %w", t.path, err)
		}
	}
	chunks := make([][]byte, len(old), n)
	copy(chunks, old)
	for i := len(old); i < n; i++ {
		b, err := mapRegion(t.f, int64(i)*int64(t.chunkLen), t.chunkLen)
		if err != nil {
			return fmt.Errorf("mapping %s: %w", t.path, err)
		}
		chunks = append(chunks, b)
	}
	t.chunks.Store(&chunks)
	return nil
}

// word returns a pointer to word w of record i, which ensure made
// addressable.
func (t *table) word(i uint32, w int) *uint64 {
	chunks := *t.chunks.Load()
	c := chunks[int(i)/t.per]
	return (*uint64)(unsafe.Pointer(&c[(int(i)%t.per)*t.rec+w*8]))
}

// has reports whether record i is addressable.
func (t *table) has(i uint32) bool { return int(i)/t.per < len(*t.chunks.Load()) }

// load reads word w of record i; 0 for a record beyond the table.
func (t *table) load(i uint32, w int) uint64 {
	if !t.has(i) {
		return 0
	}
	return atomic.LoadUint64(t.word(i, w))
}

// sync writes the table to the disk.
func (t *table) sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if !mapsFiles {
		for i, c := range *t.chunks.Load() {
			if err := unmapRegion(t.f, int64(i)*int64(t.chunkLen), c); err != nil {
				return err
			}
		}
	}
	return t.f.Sync()
}

// close unmaps the chunks and closes the file. The caller makes sure no
// pointer into the table is used after.
func (t *table) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for i, c := range *t.chunks.Load() {
		if err := unmapRegion(t.f, int64(i)*int64(t.chunkLen), c); err != nil {
			errs = append(errs, err)
		}
	}
	empty := [][]byte{}
	t.chunks.Store(&empty)
	errs = append(errs, t.f.Close())
	return errors.Join(errs...)
}

// readRecordWords reads record i of a table file without mapping it (an
// old day's file that is not open): its first n words, zeros where the
// file ends.
func readRecordWords(path string, rec int, i uint32, n int) ([]uint64, error) {
	out := make([]uint64, n)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 8*n)
	m, err := f.ReadAt(buf, int64(i)*int64(rec))
	if err != nil && err != io.EOF {
		return nil, err
	}
	for w := 0; w*8+8 <= m; w++ {
		out[w] = binary.NativeEndian.Uint64(buf[w*8:])
	}
	return out, nil
}
