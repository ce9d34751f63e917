package fleettest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// permService is a permission service whose answer per subject the test
// flips.
type permService struct {
	*httptest.Server
	mu    sync.Mutex
	allow map[string]bool
	calls int
}

func startPermService(t *testing.T) *permService {
	p := &permService{allow: map[string]bool{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Subject string `json:"subject"`
		}
		if err := jsonDecode(r, &body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		p.mu.Lock()
		ok := p.allow[body.Subject]
		p.calls++
		p.mu.Unlock()
		if ok {
			w.WriteHeader(200)
		} else {
			w.WriteHeader(403)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *permService) set(sub string, allow bool) {
	p.mu.Lock()
	p.allow[sub] = allow
	p.mu.Unlock()
}

// testInvalidation measures how long an invalidation published on NATS
// takes to change the answer of every replica: a decision cached for 10
// minutes is flipped at the service, the message is published, and each
// replica is polled until it answers with the new decision.
func testInvalidation(t *testing.T, ctx context.Context, nc *nats.Conn, reps []*replica, perm *permService) {
	const rounds = 20
	sub := fmt.Sprintf("inv-user-%d", time.Now().UnixNano())
	tok := token(t, sub)
	var lat []time.Duration
	allow := true
	for round := 0; round < rounds; round++ {
		want := 200
		if !allow {
			want = 403
		}
		perm.set(sub, allow)
		// Cache the current decision on every replica (an earlier
		// invalidation already dropped the old one).
		for _, r := range reps {
			waitFor(t, "caching the decision", 10*time.Second, func() error {
				code, err := get(r.httpURL("/orders/1"), tok, "")
				if err != nil || code != want {
					return fmt.Errorf("status %d, %v; want %d", code, err, want)
				}
				return nil
			})
		}
		allow = !allow
		perm.set(sub, allow)
		next := 200
		if !allow {
			next = 403
		}
		// Still the cached decision: the service is not asked.
		if code, _ := get(reps[round%3].httpURL("/orders/1"), tok, ""); code != want {
			t.Fatalf("round %d: cached decision not served: %d", round, code)
		}
		msg := fmt.Sprintf(`{"subject":%q}`, sub)
		if round%2 == 1 {
			msg = fmt.Sprintf(`{"prefix":[%q,"GET"]}`, sub)
		}
		var wg sync.WaitGroup
		res := make([]time.Duration, len(reps))
		errs := make([]error, len(reps))
		t0 := time.Now()
		if err := nc.Publish("gateway.perm.invalidate", []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for i, r := range reps {
			wg.Add(1)
			go func(i int, r *replica) {
				defer wg.Done()
				deadline := t0.Add(10 * time.Second)
				for time.Now().Before(deadline) {
					code, err := get(r.httpURL("/orders/1"), tok, "")
					if err == nil && code == next {
						res[i] = time.Since(t0)
						return
					}
				}
				errs[i] = fmt.Errorf("replica %d still serves the old decision 10s after the invalidation", i)
			}(i, r)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		lat = append(lat, res...)
	}
	p50, p95, max := percentile(lat, 0.5), percentile(lat, 0.95), percentile(lat, 1)
	t.Logf("invalidation reached all 3 replicas: %d samples, p50 %v, p95 %v, max %v (goal: p50 < 100ms)",
		len(lat), p50.Round(time.Microsecond), p95.Round(time.Microsecond), max.Round(time.Microsecond))
	// The goal is p50 < 100ms; only a gross miss fails the test on this
	// shared, noisy machine (a missing invalidation fails above).
	if p50 > time.Second {
		t.Errorf("invalidation p50 %v: far over the 100ms goal", p50)
	}
}
