package fastpath

import (
	"sync"
	"time"
)

// The pool of goroutines HTTP/2 streams' requests run on (h2.go).

// workerPool runs HTTP/2 streams' requests on reused goroutines (the idea
// of fasthttp's workerpool): a stream's request takes an idle worker, or
// starts one when none is idle; a worker idle for the pool's idleAfter
// (to twice that) exits. The number running is bounded per connection
// (h2MaxStreams handlers).
//
// A worker waits on its channel alone: the pool's cleaner, one timer for
// all workers, tells an idle one to exit by sending it nil. (A select on
// the channel and a timer of its own cost ~2,000 instructions a request:
// selectgo, two channels' locks and the timer channel's heap work,
// callgrind, bench/callgrind/h2.)
type workerPool struct {
	idleAfter time.Duration

	mu   sync.Mutex
	idle []*worker // the longest idle first (workers go idle at the end)
	// tick counts the cleaner's runs; a worker idle since tick-2 or
	// before has been idle for idleAfter at least
	tick    uint64
	running int  // workers started and not told to exit
	armed   bool // the cleaner's timer is set
}

// poolJob is what a worker runs: an HTTP/2 stream (serveStream), or a
// test's job.
type poolJob interface{ serveStream() }

type worker struct {
	ch        chan poolJob // nil: exit
	idleSince uint64       // the pool's tick when it went idle
}

const workerIdle = 10 * time.Second

var h2Workers = &workerPool{idleAfter: workerIdle}

func (p *workerPool) run(s poolJob) {
	p.mu.Lock()
	var w *worker
	start := false
	if n := len(p.idle); n > 0 {
		w = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	} else {
		w, start = &worker{ch: make(chan poolJob, 1)}, true
		p.running++
		if !p.armed {
			p.armed = true
			time.AfterFunc(p.idleAfter, p.clean)
		}
	}
	p.mu.Unlock()
	if start {
		go w.loop(p)
	}
	w.ch <- s
}

func (w *worker) loop(p *workerPool) {
	for s := range w.ch {
		if s == nil {
			return
		}
		s.serveStream()
		p.mu.Lock()
		w.idleSince = p.tick
		p.idle = append(p.idle, w)
		p.mu.Unlock()
	}
}

// clean tells the workers idle since two ticks ago or earlier to exit,
// and sets its timer again while workers run.
func (p *workerPool) clean() {
	p.mu.Lock()
	p.tick++
	n := 0
	for n < len(p.idle) && p.idle[n].idleSince+2 <= p.tick {
		n++
	}
	gone := make([]*worker, n)
	copy(gone, p.idle[:n])
	rest := copy(p.idle, p.idle[n:])
	clear(p.idle[rest:])
	p.idle = p.idle[:rest]
	p.running -= n
	p.armed = p.running > 0
	if p.armed {
		time.AfterFunc(p.idleAfter, p.clean)
	}
	p.mu.Unlock()
	for _, w := range gone {
		w.ch <- nil // (idle: its channel is empty, and no one else sends to it now)
	}
}

// counts is how many workers run and how many of them are idle.
func (p *workerPool) counts() (running, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, len(p.idle)
}
