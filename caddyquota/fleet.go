package caddyquota

import "time"

// fleetSlot is a slot's state with the fleet (filled in by the fleet).
type fleetSlot struct{}

// fleetLink shares the counts with other gateways.
type fleetLink struct{}

func (f *fleetLink) acquire(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry bool) (Decision, error) {
	return s.acquireLocal(sl, p, now, sn, dt, dry), nil
}

func (f *fleetLink) current(sl *slot, sn *calSnap, u *SlotUsage) {}
