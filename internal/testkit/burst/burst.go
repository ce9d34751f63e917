// Package burst sends a burst of requests as fast as they are answered:
// a number of requests in all, from concurrent clients spread over
// targets (gateways), each client sending its next request as soon as its
// last was answered. The fleet tests measure what a fleet admits of such
// a burst.
package burst

import (
	"sync"
	"sync/atomic"
)

// Run sends total requests from clients goroutines, client i sending to
// target i % targets with send (which reports whether the request was
// admitted), and returns the admitted count per target.
func Run(total, clients, targets int, send func(target int) bool) []int64 {
	var sent atomic.Int64
	counts := make([]atomic.Int64, targets)
	var wg sync.WaitGroup
	for i := range clients {
		target := i % targets
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= int64(total) {
				if send(target) {
					counts[target].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out := make([]int64, targets)
	for i := range counts {
		out[i] = counts[i].Load()
	}
	return out
}

// Sum adds up counts.
func Sum(counts []int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}
