//go:build unix

package caddyjwt

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) the process has used. On a
// shared machine a benchmark's wall time includes the time it waited for a
// CPU; cpu-ns/op does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
