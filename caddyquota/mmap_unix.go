//go:build unix

package caddyquota

import (
	"os"
	"syscall"
)

// mapRegion maps size bytes of f at off, shared: what the process writes
// there is in the kernel's page cache at once, so a crash of the process
// (SIGKILL included) loses none of it; f.Sync writes it to the disk.
func mapRegion(f *os.File, off int64, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), off, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

// unmapRegion releases a mapping made by mapRegion.
func unmapRegion(f *os.File, off int64, b []byte) error { return syscall.Munmap(b) }

// mapsFiles is true where the counters live in the files' pages.
const mapsFiles = true
