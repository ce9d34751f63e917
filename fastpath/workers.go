package fastpath

import (
	"slices"
	"sync"
	"time"
)

// The pool of goroutines HTTP/2 streams' requests run on (h2.go).

// workerPool runs HTTP/2 streams' requests on reused goroutines (the idea
// of fasthttp's workerpool): a stream's request takes an idle worker, or
// starts one when none is idle; a worker idle for workerIdle (to twice
// that) exits. The number running is bounded per connection
// (h2MaxStreams handlers).
type workerPool struct {
	mu   sync.Mutex
	idle []*worker
}

type worker struct {
	ch chan *h2stream
	// used says the worker served a stream since its idle timer was
	// set: the timer is not reset per stream (a timer reset was about
	// 350 instructions a request, callgrind), it is looked at when it
	// fires
	used bool
}

const workerIdle = 10 * time.Second

var h2Workers = &workerPool{}

func (p *workerPool) run(s *h2stream) {
	p.mu.Lock()
	var w *worker
	if n := len(p.idle); n > 0 {
		w = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if w == nil {
		w = &worker{ch: make(chan *h2stream, 1)}
		go w.loop(p)
	}
	w.ch <- s
}

func (w *worker) loop(p *workerPool) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case s := <-w.ch:
			s.serveStream()
			w.used = true
			p.mu.Lock()
			p.idle = append(p.idle, w)
			p.mu.Unlock()
		case <-t.C:
			if w.used { // not idle for all of workerIdle: look again after another
				w.used = false
				t.Reset(workerIdle)
				continue
			}
			p.mu.Lock()
			i := slices.Index(p.idle, w)
			if i >= 0 {
				p.idle = slices.Delete(p.idle, i, i+1)
			}
			p.mu.Unlock()
			if i >= 0 {
				return
			}
			t.Reset(workerIdle) // (taken: a stream is on its way)
		}
	}
}
