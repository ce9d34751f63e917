package fastpath

import (
	"runtime"
	"testing"
	"time"
)

// testJob is a pool job that runs until released.
type testJob struct{ started, release chan struct{} }

func newTestJob() *testJob {
	return &testJob{started: make(chan struct{}), release: make(chan struct{})}
}

func (j *testJob) serveStream() {
	close(j.started)
	<-j.release
}

// TestWorkerPool: a stream's job takes an idle worker or starts one; the
// cleaner (run here by hand: the pool's own timer is an hour away) stops a
// worker once it has been idle since two of its runs ago, never a busy
// one, and a worker it stopped is not used again.
func TestWorkerPool(t *testing.T) {
	p := &workerPool{idleAfter: time.Hour}
	goroutines := runtime.NumGoroutine()
	want := func(step string, running, idle int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, i := p.counts()
			if r == running && i == idle {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d workers running, %d idle; want %d and %d", step, r, i, running, idle)
			}
			time.Sleep(time.Millisecond)
		}
	}
	finish := func(j *testJob) { <-j.started; close(j.release) }

	a, b := newTestJob(), newTestJob()
	p.run(a)
	p.run(b)
	<-a.started
	<-b.started
	want("two busy jobs", 2, 0)
	finish(a)
	want("one job done", 2, 1)
	c := newTestJob()
	p.run(c) // (takes a's idle worker)
	want("the idle worker reused", 2, 0)
	finish(c)
	want("c done", 2, 1)

	p.clean() // tick 1: c's worker went idle at tick 0
	want("idle for less than a tick", 2, 1)
	p.clean() // tick 2
	want("idle since two ticks ago: stopped; b still busy", 1, 0)
	p.clean()
	p.clean()
	want("a busy worker is never stopped", 1, 0)
	finish(b)
	want("b done", 1, 1)
	p.clean()
	want("b's worker idle for less than a tick", 1, 1)
	p.clean()
	want("all stopped", 0, 0)
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stopped workers' goroutines did not exit: %d goroutines, %d before the pool ran", runtime.NumGoroutine(), goroutines)
		}
	}

	d := newTestJob()
	p.run(d)
	<-d.started
	want("a new worker after all stopped", 1, 0)
	finish(d)
	want("d done", 1, 1)
}
