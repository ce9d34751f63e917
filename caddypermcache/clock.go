package caddypermcache

import (
	"log"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// clockTick is the resolution of the clock that dates cached decisions.
// Reading the system clock costs more than the rest of a cache hit on some
// virtual machines, so hits read an atomic that a ticker updates instead.
const clockTick = 10 * time.Millisecond

var coarseNow atomic.Int64

// coarseNowFunc is the clock of the caches: Now, at clockTick resolution.
func coarseNowFunc() int64 { return coarseNow.Load() }

// coarseClock runs while any cache is in use (see addLive/removeLive).
type coarseClock struct {
	quit chan struct{}
	done chan struct{}
}

func startCoarseClock() *coarseClock {
	coarseNow.Store(Now())
	c := &coarseClock{quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *coarseClock) run() {
	defer close(c.done)
	defer func() {
		if p := recover(); p != nil {
			log.Printf("[ERROR] permission cache clock: panic: %v\n%s", p, debug.Stack())
		}
	}()
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			coarseNow.Store(Now())
		}
	}
}

// stop stops the clock and waits for its goroutine.
func (c *coarseClock) stop() {
	close(c.quit)
	<-c.done
}
