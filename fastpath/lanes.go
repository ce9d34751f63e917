package fastpath

import (
	"os"
	"sync/atomic"
)

// The fast path's lanes are where it skips a header map that Caddy's path
// builds: the plain lane writes a request's fields upstream from the
// parsed head (proxyState.prepare), takeHeader makes the upstream's
// response map the client's instead of copying it field by field, and the
// lazy map leaves the request's header map empty until something asks
// for it (exchange.header: a handler module, a matcher or selection
// policy that may read fields, a placeholder of a field, the error
// routes). Each lane is taken only when nothing that runs could see the
// difference; a case missed there would show as a difference between a
// lane and the maps, never as a skipped check (the duties read the
// request's header map, which is filled before any of them runs).
//
// The map mode is a test-only switch that turns every lane off, so that
// the differential suites can run the same requests through the maps and
// through the lanes and compare both with Caddy's path (docs/testing.md,
// "The map mode"). A process started with APIGATE_TEST_MAPS_ONLY=1 runs
// in it from the start and says so in its "fast path on" log line
// ("lanes": "off"); a test in this package sets it with setMapsOnly.
var mapsOnly atomic.Bool

// lanesTaken counts the requests that took a lane, while countLanes is
// set (by tests: a shared counter costs every request a contended write),
// so that a test can show that its requests took the lanes it compares.
var (
	countLanes atomic.Bool
	lanesTaken struct{ plain, take, lazy atomic.Int64 }
)

func init() {
	if os.Getenv("APIGATE_TEST_MAPS_ONLY") == "1" {
		mapsOnly.Store(true)
	}
}

// MapsOnly reports whether the process runs in the map mode.
func MapsOnly() bool { return mapsOnly.Load() }

// SetMapsOnly sets the map mode for the requests that begin from now on,
// and returns the mode it replaced: for test kits that run a test once
// more in it (internal/testkit/pathtest). Never for a serving process.
func SetMapsOnly(on bool) (was bool) { return mapsOnly.Swap(on) }

// CountLanes counts, from now on, the requests that take a lane, and
// returns a function that reads how many did since the call and one that
// stops the counting (for test kits: a shared counter costs every request
// a contended write).
func CountLanes() (taken func() int64, stop func()) {
	countLanes.Store(true)
	p0, t0, l0 := lanesTaken.plain.Load(), lanesTaken.take.Load(), lanesTaken.lazy.Load()
	return func() int64 {
			return lanesTaken.plain.Load() - p0 + lanesTaken.take.Load() - t0 + lanesTaken.lazy.Load() - l0
		},
		func() { countLanes.Store(false) }
}

// lanesLog is the "lanes" value of the "fast path on" log line.
func lanesLog() string {
	if mapsOnly.Load() {
		return "off"
	}
	return "on"
}

// plainLane reports whether a request may take the plain lane, given
// that its steps allow it (eligible).
func plainLane(eligible bool) bool { return eligible && !mapsOnly.Load() }

// tookPlain counts a request whose fields went upstream on the plain lane.
func tookPlain() {
	if countLanes.Load() {
		lanesTaken.plain.Add(1)
	}
}

// lazyHeader reports whether a request's header map may wait until
// something asks for it (exchange.header); the map mode fills it as each
// request begins.
func lazyHeader() bool { return !mapsOnly.Load() }

// tookLazy counts a request served without its header map.
func tookLazy() {
	if countLanes.Load() {
		lanesTaken.lazy.Add(1)
	}
}

// mayTakeHeader reports whether takeHeader may run (not in the map mode).
func mayTakeHeader() bool { return !mapsOnly.Load() }

// tookHeader counts a response whose header map takeHeader took.
func tookHeader() {
	if countLanes.Load() {
		lanesTaken.take.Add(1)
	}
}
