package caddyh1

import (
	"net"
	"syscall"
	"unsafe"
)

// socketFD returns nc's file descriptor, or -1.
func socketFD(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// peekIdle looks at an idle connection's socket without blocking or
// consuming anything: alive when there is nothing to read yet. The
// connection is held by the caller alone (taken from the pool, not closed),
// so its descriptor is valid; the call never blocks (MSG_DONTWAIT), so it
// is made as a raw system call, without the scheduler's bookkeeping or
// net.Conn's locks (one recvfrom, about half the cost of going through
// syscall.RawConn.Read).
func (cn *conn) peekIdle() bool {
	if cn.fd < 0 {
		return true
	}
	var b [1]byte
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(cn.fd), uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	// EAGAIN: open, nothing sent. Otherwise the socket was reset (another
	// errno), closed by the upstream (0 bytes) or holds unasked bytes (1).
	return errno == syscall.EAGAIN
}
