package caddydocker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/podmantest"
)

type fakeEngine struct {
	mu         sync.Mutex
	containers []Container
	err        error
	lists      int
	events     chan [2]string
	// subscribe, when not nil, holds each event subscription until it
	// is closed: the engine answers the subscription late.
	subscribe chan struct{}
}

func newFakeEngine(cs ...Container) *fakeEngine {
	return &fakeEngine{containers: cs, events: make(chan [2]string, 1000)}
}

func (f *fakeEngine) set(err error, cs ...Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.containers = err, cs
}

func (f *fakeEngine) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeEngine) List(ctx context.Context) ([]Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.err != nil {
		return nil, f.err
	}
	return append([]Container(nil), f.containers...), nil
}

func (f *fakeEngine) Events(ctx context.Context, subscribed func(), fn func(Event)) error {
	if f.subscribe != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-f.subscribe:
		}
	}
	subscribed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-f.events:
			ev := Event{Action: e[0], ID: e[1]}
			ev.Action, ev.Signal, _ = strings.Cut(ev.Action, " signal=")
			fn(ev)
		}
	}
}

func (f *fakeEngine) Close() error { return nil }

func (f *fakeEngine) StopsUnannounced() bool { return false }

type fakeApplier struct {
	mu    sync.Mutex
	calls int
	live  []json.RawMessage
	err   error
}

func (a *fakeApplier) ApplyRoutes(ctx context.Context, server string, routes []json.RawMessage) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.err != nil {
		return false, a.err
	}
	changed := !SameRoutes(a.live, routes)
	a.live = append([]json.RawMessage(nil), routes...)
	return changed, nil
}

func (a *fakeApplier) state() (int, []json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.live
}

func liveIDs(a *fakeApplier) string {
	_, live := a.state()
	s := ""
	for _, r := range live {
		s += RouteID(r) + " "
	}
	return s
}

func newTestWatcher(t *testing.T, e Engine, a RouteApplier, stateFile string, debounce time.Duration) *Watcher {
	t.Helper()
	w := NewWatcher(WatcherConfig{
		Server: "gateway", Debounce: debounce, Resync: time.Hour, StateFile: stateFile,
		Build: testOpts, Labels: fullLabels,
	}, e, a, nil)
	t.Cleanup(w.Stop)
	return w
}

func wait(t *testing.T, what string, cond func() string) {
	t.Helper()
	podmantest.Eventually(t, what, 10*time.Second, cond)
}

func TestWatcher(t *testing.T) {
	good := c("good", base("gateway.router.api.path_prefix", "/good")...)
	other := c("other", base("gateway.router.api.path_prefix", "/other")...)

	t.Run("applies, and an unchanged route set is not applied again", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "applied", func() string {
			if liveIDs(a) == "docker:gateway:good:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		for i := 0; i < 5; i++ {
			e.events <- [2]string{"start", "unrelated"}
		}
		wait(t, "re-listed", func() string {
			if e.listCount() >= 2 {
				return ""
			}
			return "no re-list"
		})
		if calls, _ := a.state(); calls != 1 {
			t.Fatalf("applier called %d times for one route set", calls)
		}
		e.set(nil, good, other)
		e.events <- [2]string{"start", other.ID}
		wait(t, "other added", func() string {
			if liveIDs(a) == "docker:gateway:other:api docker:gateway:good:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
	})

	// A container that starts after the first list and before the engine
	// has the event subscription is in neither; the list made once the
	// subscription is up finds it (Resync is an hour here).
	t.Run("a container started before the subscription is up is routed", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{}
		e.subscribe = make(chan struct{})
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "the first list applied", func() string {
			if liveIDs(a) == "docker:gateway:good:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		e.set(nil, good, other) // started in the gap: no event for it
		close(e.subscribe)
		wait(t, "other routed", func() string {
			if liveIDs(a) == "docker:gateway:other:api docker:gateway:good:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
	})

	t.Run("engine unreachable: routes stay", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "applied", func() string {
			if liveIDs(a) != "" {
				return ""
			}
			return "nothing"
		})
		e.set(errors.New("connection refused"))
		e.events <- [2]string{"die", "x"}
		wait(t, "unreachable", func() string {
			if !w.Snapshot().EngineReachable {
				return ""
			}
			return "reachable"
		})
		if calls, _ := a.state(); calls != 1 || liveIDs(a) != "docker:gateway:good:api " {
			t.Fatalf("routes changed while the engine was down: calls=%d live=%s", calls, liveIDs(a))
		}
	})

	t.Run("engine away from the start: one log line, not one per retry", func(t *testing.T) {
		e, a := newFakeEngine(), &fakeApplier{}
		e.set(errors.New("connection refused"))
		log, logs := observed(t)
		w := NewWatcher(WatcherConfig{Server: "gateway", Debounce: time.Millisecond, Resync: time.Hour,
			StateFile: filepath.Join(t.TempDir(), "none.json"), Build: testOpts, Labels: fullLabels}, e, a, log)
		t.Cleanup(w.Stop)
		w.Start()
		for i := 0; i < 5; i++ {
			n := e.listCount()
			e.events <- [2]string{"start", fmt.Sprint(i)}
			wait(t, "a re-list", func() string {
				if e.listCount() > n {
					return ""
				}
				return "none"
			})
		}
		if n := logs.FilterMessage("container engine unreachable; keeping the current routes").Len(); n != 1 {
			t.Errorf("%d unreachable lines over %d lists, want 1", n, e.listCount())
		}
		if n := logs.FilterMessage("no state_file yet: until the first container list applies, requests that no route matches get 503 discovery_starting").Len(); n != 1 {
			t.Errorf("%d state_file lines, want 1", n)
		}
	})

	t.Run("die event is trusted over a stale list", func(t *testing.T) {
		e, a := newFakeEngine(good, other), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "both", func() string {
			if len(liveIDs(a)) > 30 {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		e.events <- [2]string{"die", good.ID} // the engine still lists it
		wait(t, "good removed", func() string {
			if liveIDs(a) == "docker:gateway:other:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		e.events <- [2]string{"start", good.ID} // restarted
		wait(t, "good back", func() string {
			if len(liveIDs(a)) > 30 {
				return ""
			}
			return "live: " + liveIDs(a)
		})
	})

	t.Run("stop signal: out of the pool before the process exits", func(t *testing.T) {
		a1 := c("pool-1", base("gateway.name", "pool")...)
		a2 := with(c("pool-2", base("gateway.name", "pool")...), func(x *Container) { x.IP = "10.88.0.3" })
		e, a := newFakeEngine(a1, a2), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		upstreams := func() string {
			_, live := a.state()
			if len(live) != 1 {
				return fmt.Sprintf("%d routes", len(live))
			}
			var rt struct {
				Handle []struct {
					Handler string `json:"handler"`
				} `json:"handle"`
			}
			if err := json.Unmarshal(live[0], &rt); err != nil {
				return err.Error()
			}
			h := rt.Handle[len(rt.Handle)-1].Handler
			if h != "reverse_proxy" {
				return h
			}
			return strings.Join(append([]string{h}, PoolOf("gateway", "pool")...), " ")
		}
		want := func(what, exp string) {
			t.Helper()
			wait(t, what, func() string {
				if got := upstreams(); got != exp {
					return got
				}
				return ""
			})
		}
		want("both routed", "reverse_proxy 10.88.0.2:8080 10.88.0.3:8080")
		e.events <- [2]string{"kill signal=HUP", a1.ID} // a reload signal: stays
		e.events <- [2]string{"start", "unrelated"}
		time.Sleep(50 * time.Millisecond)
		want("HUP keeps it", "reverse_proxy 10.88.0.2:8080 10.88.0.3:8080")
		e.events <- [2]string{"kill signal=15", a1.ID} // the engine still lists it running
		want("pool-1 out at once", "reverse_proxy 10.88.0.3:8080")
		if got := w.Snapshot().Containers[0]; got.State != StateStopping {
			t.Fatalf("pool-1 state %q", got.State)
		}
		e.events <- [2]string{"kill", a2.ID}          // Podman reports no signal
		want("no replica left: 503", "docker_answer") // (problem+json, answer.go)
		e.events <- [2]string{"start", a2.ID}
		want("pool-2 restarted", "reverse_proxy 10.88.0.3:8080")
		old := StoppingMax
		StoppingMax = 0
		t.Cleanup(func() { StoppingMax = old })
		e.events <- [2]string{"start", "unrelated"}
		want("a signal that did not stop it expires", "reverse_proxy 10.88.0.2:8080 10.88.0.3:8080")
	})

	t.Run("health without events: polled", func(t *testing.T) {
		h := with(c("checked", base()...), func(x *Container) { x.Health = "starting" })
		e, a := newFakeEngine(h), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "starting: 503", func() string {
			if _, live := a.state(); len(live) == 1 && strings.Contains(string(live[0]), "no_healthy_upstream") {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		h.Health = "healthy"
		e.set(nil, h) // no event: Podman sends none for health changes
		wait(t, "healthy: proxied", func() string {
			if _, live := a.state(); len(live) == 1 && strings.Contains(string(live[0]), "reverse_proxy") {
				return ""
			}
			return "live: " + liveIDs(a)
		})
		if s := w.Snapshot(); s.Containers[0].State != StateRouted {
			t.Fatalf("state %q", s.Containers[0].State)
		}
	})

	t.Run("burst of events: throttled re-lists", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", 5*time.Second)
		w.Start()
		wait(t, "applied", func() string {
			if liveIDs(a) != "" {
				return ""
			}
			return "nothing"
		})
		for i := 0; i < 200; i++ {
			e.events <- [2]string{"start", fmt.Sprint(i)}
		}
		// initial list + at most one trailing re-list per debounce window
		wait(t, "events consumed", func() string {
			if len(e.events) == 0 {
				return ""
			}
			return "pending"
		})
		if n := e.listCount(); n > 2 {
			t.Fatalf("%d lists for a burst within one debounce window", n)
		}
	})

	t.Run("state file: written after apply, applied when the engine is down at start", func(t *testing.T) {
		sf := filepath.Join(t.TempDir(), "sub", "routes.json")
		e, a := newFakeEngine(good, other), &fakeApplier{}
		w := newTestWatcher(t, e, a, sf, time.Millisecond)
		w.Start()
		wait(t, "state written", func() string {
			st, err := ReadState(sf)
			if err != nil {
				return err.Error()
			}
			if len(st.Routes) != 2 || len(st.Containers) != 2 {
				return fmt.Sprintf("%d routes", len(st.Routes))
			}
			return ""
		})
		w.Stop()

		down, a2 := newFakeEngine(), &fakeApplier{}
		down.set(errors.New("no engine"))
		w2 := newTestWatcher(t, down, a2, sf, time.Millisecond)
		w2.Start()
		wait(t, "routes from state file", func() string {
			if len(liveIDs(a2)) > 30 {
				return ""
			}
			return "live: " + liveIDs(a2)
		})
		if s := w2.Snapshot(); !s.FromStateFile || s.EngineReachable || len(s.Containers) != 2 {
			t.Logf("live: %s", liveIDs(a2))
			t.Fatalf("snapshot %+v", s)
		}
		// The engine comes back with one container gone.
		down.set(nil, other)
		down.events <- [2]string{"start", other.ID}
		wait(t, "engine list replaces the state", func() string {
			if liveIDs(a2) == "docker:gateway:other:api " {
				return ""
			}
			return "live: " + liveIDs(a2)
		})
	})

	t.Run("start after a reload re-checks the live config", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "applied", func() string {
			if c, _ := a.state(); c == 1 {
				return ""
			}
			return "not yet"
		})
		// a user reload dropped the routes; the new app instance's Start
		a.mu.Lock()
		a.live = nil
		a.mu.Unlock()
		w.Start()
		wait(t, "restored", func() string {
			if liveIDs(a) == "docker:gateway:good:api " {
				return ""
			}
			return "live: " + liveIDs(a)
		})
	})

	t.Run("apply failure is retried on the next list", func(t *testing.T) {
		e, a := newFakeEngine(good), &fakeApplier{err: errors.New("admin down")}
		w := newTestWatcher(t, e, a, "", time.Millisecond)
		w.Start()
		wait(t, "error recorded", func() string {
			if w.Snapshot().LastError != "" {
				return ""
			}
			return "no error"
		})
		a.mu.Lock()
		a.err = nil
		a.mu.Unlock()
		e.events <- [2]string{"start", "x"}
		wait(t, "applied", func() string {
			if liveIDs(a) != "" {
				return ""
			}
			return "nothing"
		})
	})
}
