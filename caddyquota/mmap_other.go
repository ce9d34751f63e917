//go:build !unix

package caddyquota

import (
	"io"
	"os"
)

// mapRegion reads size bytes of f at off into memory. Without mmap the
// counters are written back by unmapRegion and by the store's periodic
// flush (writeBack), so a crash loses up to one flush interval.
func mapRegion(f *os.File, off int64, size int) ([]byte, error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// unmapRegion writes the region back.
func unmapRegion(f *os.File, off int64, b []byte) error {
	_, err := f.WriteAt(b, off)
	return err
}

const mapsFiles = false
