package fleettest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// rateLoad sends GET requests at a fixed rate, each on a new connection
// (keepAlive false) or through one client that keeps its connections
// (true), and records how each ended: answered as wanted, answered
// otherwise (a wrong answer), a refused connection, or another failure.
// Requests run concurrently, so a slow answer does not lower the rate.
type rateLoad struct {
	client *http.Client
	url    string
	want   func(code int, body string) bool
	stopc  chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu                     sync.Mutex
	sent, ok               int
	refused, failed, wrong []string
	failedAt               []time.Time // when each failed request was sent
	firstRefused           time.Time   // when the first refused request was sent
	maxLatency             time.Duration
}

func startRate(url string, perSecond int, keepAlive bool, want func(code int, body string) bool) *rateLoad {
	tr := &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 8}
	l := &rateLoad{client: &http.Client{Timeout: 15 * time.Second, Transport: tr}, url: url, want: want, stopc: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stopc:
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func(i int) {
				defer l.wg.Done()
				l.one(fmt.Sprintf("%s?n=%d", l.url, i))
			}(i)
		}
	}()
	return l
}

func (l *rateLoad) one(url string) {
	start := time.Now()
	resp, err := l.client.Get(url)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.maxLatency = max(l.maxLatency, took)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		l.refused = append(l.refused, fmt.Sprintf("%s at %s: %v", url, start.Format("15:04:05.000"), err))
		if l.firstRefused.IsZero() || start.Before(l.firstRefused) {
			l.firstRefused = start
		}
	case err != nil:
		l.failed = append(l.failed, fmt.Sprintf("%s at %s: %v", url, start.Format("15:04:05.000"), err))
		l.failedAt = append(l.failedAt, start)
	case !l.want(resp.StatusCode, string(body)):
		l.wrong = append(l.wrong, fmt.Sprintf("%s at %s: %d %q", url, start.Format("15:04:05.000"), resp.StatusCode, body))
	default:
		l.ok++
	}
}

// failedBefore counts the failed requests sent before t (l.mu held).
func (l *rateLoad) failedBefore(t time.Time) int {
	n := 0
	for _, at := range l.failedAt {
		if at.Before(t) {
			n++
		}
	}
	return n
}

// stop ends the load and waits for the requests in flight.
func (l *rateLoad) stop() {
	l.once.Do(func() {
		close(l.stopc)
		l.wg.Wait()
		l.client.CloseIdleConnections()
	})
}

// summary is the outcome, for failure messages and logs.
func (l *rateLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("%d sent, %d answered as wanted, %d refused, %d failed, %d wrong answers, slowest %v",
		l.sent, l.ok, len(l.refused), len(l.failed), len(l.wrong), l.maxLatency.Round(time.Millisecond))
	for _, list := range [][]string{l.refused, l.failed, l.wrong} {
		for _, e := range list[:min(len(list), 3)] {
			s += "\n  " + e
		}
	}
	return s
}

// clean reports whether every request was answered as wanted.
func (l *rateLoad) clean() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent > 0 && l.ok == l.sent
}
