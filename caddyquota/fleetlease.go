package caddyquota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// This file decides requests from the leases a gateway holds, and runs
// the operations that write its counts and take or return leases
// (docOp, the compare-and-set step both documents share).

// windowLease is a slot's lease of one window: four words of the slot's
// record in leases.cnt, changed in place (so a SIGKILL loses none).
type windowLease struct {
	// inst is the instance the lease is of: the period (calendar), or
	// the step its tokens are charged at (sliding).
	inst atomic.Int64
	// take is the tokens this gateway counts in that instance: what it
	// admitted plus what it holds unused.
	take atomic.Int64
	// left is the tokens of take not used yet.
	left atomic.Int64
	// debt is the tokens of take admitted without a lease (NATS
	// unreachable) and not yet written.
	debt atomic.Int64
}

// leaseWords is the words of a windowLease in a slot's record of
// leases.cnt: one windowLease per unit, in unit order.
const leaseWords = int(unsafe.Sizeof(windowLease{}) / 8)

// lease returns the slot's lease of unit u.
func (s *Store) lease(idx uint32, u Unit) *windowLease {
	return (*windowLease)(unsafe.Pointer(s.leases.word(idx, int(u-1)*leaseWords)))
}

// restart makes the lease one of instance inst, with no token taken.
func (l *windowLease) restart(inst int64) {
	l.inst.Store(inst)
	l.take.Store(0)
	l.left.Store(0)
	l.debt.Store(0)
}

// giveBack returns the tokens in hand: they are no longer taken.
func (l *windowLease) giveBack() {
	if left := l.left.Load(); left > 0 {
		l.left.Add(-left)
		l.take.Add(-left)
	}
}

// fleetSlot is a slot's state with the fleet.
type fleetSlot struct {
	plan   atomic.Pointer[Plan] // the plan the slot was last used with
	queued atomic.Bool
	again  atomic.Bool
	// failed: the last operation did not write (an error, or too
	// many conflicting writes); the ticker tries again even when the
	// slot is no longer used, else its last counts would stay unwritten
	failed atomic.Bool

	waitMu sync.Mutex
	wait   chan struct{} // closed after each operation on the slot

	// asked counts the slot's requests decided with the fleet (its
	// demand, admitted or not): the rate its leases are sized for
	asked atomic.Int64
	// notBefore (Unix ns) delays the next operation of a slot whose
	// lease waits for another gateway's read (0: none); timed is set
	// while a timer will enqueue it
	notBefore atomic.Int64
	timed     atomic.Bool
	// waiting: the last operation's lease waits for another gateway's
	// read (the counts answer); blocked is the running operation's
	// (touched by it alone: one operation runs on a slot at a time)
	waiting atomic.Bool
	blocked bool
	// waiters counts the requests waiting for a lease (the slot is not
	// idle while one does)
	waiters atomic.Int32

	// guarded by the slot's mu
	known    [Month + 1]knownWindow
	resynced bool // the month's days were written since the last outage
	// the slot's request rate (per second), measured over at least a
	// quarter of a sync interval: asked at rateAt (Unix ns), and the
	// last rate measured
	rateAt, rateAsked int64
	rate              float64
}

// knownWindow is what the last operation learned of a window.
type knownWindow struct {
	inst      int64 // the instance it is about
	others    int64 // the other gateways' tokens in the window
	othersAdm int64 // the other gateways' admitted requests (calendar)
	exhausted bool  // the fleet had no token left to lease
	recheck   int64 // when to ask again (Unix ns)
	reset     int64 // a sliding window's next admission (Unix ns)
	lastLease int64
	// reads counts the successful operations that read the window
	// while this gateway was leasing: not deciding alone, nor holding
	// after an outage for the others' writes of what they admitted
	// alone (a read then misses those, and is no ground for a share)
	reads int64
	// readAt is when the last of those reads was (Unix ns)
	readAt int64
	// deciding alone: the instance the share is of, what was left then
	// as known, and what was admitted alone since; aloneReads is reads
	// then
	aloneInst            int64
	aloneBase, aloneUsed int64
	aloneAllow           int64 // the share of aloneBase, fixed with it
	aloneReads           int64
	// a sliding window alone: the share (a fraction) fixed as it began
	// deciding alone, and until when (Unix ns) aloneAllow holds
	aloneFrac  float64
	aloneUntil int64
}

// instOf is the instance of window l at now: the period's ID, or the
// step.
func instOf(l Limit, now time.Time, sn *calSnap) int64 {
	switch l.Unit {
	case Day:
		return sn.day.ID
	case Month:
		return sn.month.ID
	}
	return l.stepAt(now)
}

// leaseValid reports whether a lease of instance li serves instance
// inst: the same period, or (sliding) a step of its validity.
func leaseValid(u Unit, li, inst int64) bool {
	if u.Calendar() {
		return li == inst
	}
	return inst <= li && li-inst < slideValidity
}

// acquire decides a request with the fleet's counts.
func (f *Fleet) acquire(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry bool) (Decision, error) {
	if sl.fl.plan.Load() != p {
		sl.fl.plan.Store(p)
	}
	sl.fl.asked.Add(1)
	alone := !f.available.Load() || now.UnixNano() < f.holdTill.Load()
	if !alone && f.conn.Connected != nil && !f.conn.Connected() {
		f.setAvailable(false, errors.New("NATS connection lost"))
		alone = true
	}
	if !alone || f.startHoldLeft(now) <= 0 {
		// the usual request: decided from the tokens in hand (or the
		// share), with no wait to prepare; one that needs a lease goes
		// on to wait for it (its decide, which changed nothing, runs
		// again there)
		sl.mu.Lock()
		d, need, prefetch := f.decide(s, sl, p, now, sn, dt, dry, alone, false)
		sl.mu.Unlock()
		if !need {
			if prefetch {
				f.enqueue(sl)
			}
			return d, nil
		}
	}
	return f.acquireWaiting(s, sl, p, now, sn, dt, dry, alone)
}

// acquireWaiting decides a request that waits: for a lease, or for the
// hold after the link's first answer. Its wait is timed from here (the
// request's decide before it took no time worth counting).
func (f *Fleet) acquireWaiting(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry, alone bool) (Decision, error) {
	// late: the wait for a lease ended while it waits for another
	// gateway's read (the counts answer): the windows that need one
	// refuse; a share is only for a gateway that cannot reach the
	// counts, else its admissions would add to what the others lease
	// meanwhile
	late := false
	began, asked := time.Now(), now
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// waitStarts starts the request's wait for a lease (lease_wait),
	// counted before the operation runs: its error while the link starts
	// leaves this request waiting (starting)
	waitStarts := func() {
		if timer == nil {
			timer = time.NewTimer(f.o.LeaseWait)
			sl.fl.waiters.Add(1)
		}
	}
	defer func() {
		if timer != nil {
			sl.fl.waiters.Add(-1)
		}
	}()
	// expired: lease_wait ended while the request waited out the hold
	// after the link's first answer: it decides alone from then on
	expired := false
	for {
		if hold := f.startHoldLeft(now); alone && hold > 0 && !expired {
			// a link that never reached the counts before has no share
			// to decide on (deciding alone would refuse): the request
			// waits for the hold's end, up to lease_wait, and leases
			waitStarts()
			end := time.NewTimer(hold)
			select {
			case <-end.C:
			case <-timer.C:
				leaseTimeouts.Inc()
				expired = true
			}
			end.Stop()
			now = asked.Add(time.Since(began))
			sn = s.periods(now)
			alone = expired || !f.available.Load() || now.UnixNano() < f.holdTill.Load()
			continue
		}
		sl.mu.Lock()
		d, need, prefetch := f.decide(s, sl, p, now, sn, dt, dry, alone, late)
		var ch chan struct{}
		if need {
			ch = sl.fl.waitCh()
		}
		sl.mu.Unlock()
		if !need {
			if prefetch {
				f.enqueue(sl)
			}
			return d, nil
		}
		waitStarts()
		f.enqueue(sl)
		select {
		case <-ch:
			// another try: the lease may have gone to the requests
			// that woke first; alone once the counts are unreachable
			alone = !f.available.Load() || now.UnixNano() < f.holdTill.Load()
		case <-timer.C:
			leaseTimeouts.Inc()
			switch {
			case f.conn.Connected != nil && !f.conn.Connected():
				// the connection went away while the request waited
				// (the operation under way waits for NATS until its
				// timeout): the counts cannot be reached, whatever the
				// last operation said
				f.setAvailable(false, errors.New("NATS connection lost"))
				alone = true
			case sl.fl.waiting.Load():
				// the counts answered: the lease waits for another
				// gateway's read; refused for now
				late = true
			case f.available.Load():
				// no answer within lease_wait: for this gateway NATS
				// is away (if it answers the others, a partial
				// outage): it decides on its share from now on
				f.setAvailable(false, f.unanswered())
				alone = true
			default:
				alone = true
			}
		}
		// decided when it is decided: a wait that outlasts a sliding
		// window's step (or a day) must not decide on the instance it
		// began in, whose leases no longer serve now
		now = asked.Add(time.Since(began))
		sn = s.periods(now)
	}
}

// The ways a window decides a request (decide).
const (
	fromNothing = iota // no token in hand: a lease must be asked for
	fromLease          // a token of the lease in hand
	fromShare          // the gateway decides alone, on its share
	shareUsed          // the gateway decides alone and its share is used up: refused
	windowFull         // the fleet had no token left when last asked: refused
	noLease            // no lease came within lease_wait while the counts answer: refused
)

// decide admits or refuses from the tokens in hand; need is set when a
// window has none and a lease must be asked for (unless alone: then the
// share decides; or late: then it refuses); prefetch when a lease runs
// low and the next should be taken before it is needed. sl.mu is held.
func (f *Fleet) decide(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry, decideAlone, late bool) (d Decision, need, prefetch bool) {
	s.ensureMonth(sl, sn)
	d = Decision{N: len(p.Limits), Binding: -1}
	var how [MaxLimits]int
	var full [MaxLimits]bool
	// each window's instance at now (a sliding window's step: one
	// division, read by source, count and windowState)
	var inst [MaxLimits]int64
	for i, l := range p.Limits {
		inst[i] = instOf(l, now, sn)
		var low bool
		how[i], low = f.source(s, sl, l, inst[i], now, decideAlone)
		prefetch = prefetch || low
		switch how[i] {
		case fromNothing:
			if late {
				how[i], full[i], d.Late = noLease, true, true
			} else {
				need = true
			}
		case fromShare:
			d.Share = true
		case shareUsed:
			d.Share, full[i] = true, true
		case windowFull:
			full[i] = true
		}
	}
	over := anyTrue(full)
	if need && !over {
		return d, true, false
	}
	if !over || dry {
		f.count(s, sl, p, dt, how, &inst)
	} else {
		atomic.AddUint64(dt.word(sl.idx, 1), 1)
	}
	for i, l := range p.Limits {
		d.Windows[i] = f.windowState(s, sl, l, inst[i], now, sn, full[i])
		if how[i] == noLease {
			// a moment, not the window's end: the next lease may come
			// with the next operation
			d.Windows[i].Reset = now.Add(f.o.SyncInterval).UnixNano()
		}
	}
	d.bind(full)
	d.Admitted = !over || dry
	return d, false, prefetch && !over
}

// source says how window l decides the request: from the lease in hand
// (low: it runs low, the next lease should be asked for now), from the
// share while deciding alone, or not at all (a lease is needed, or the
// window is full). Deciding alone, it fixes the share the first time.
// inst is the window's instance at now (instOf). sl.mu is held.
func (f *Fleet) source(s *Store, sl *slot, l Limit, inst int64, now time.Time, decideAlone bool) (how int, low bool) {
	u := l.Unit
	k := &sl.fl.known[u]
	lease := s.lease(sl.idx, u)
	li, left := lease.inst.Load(), lease.left.Load()
	if leaseValid(u, li, inst) && left > 0 {
		return fromLease, left <= k.lastLease/2 || (!u.Calendar() && li == inst)
	}
	if k.exhausted && leaseValid(u, k.inst, inst) && now.UnixNano() < k.recheck {
		return windowFull, false
	}
	if !decideAlone {
		return fromNothing, false
	}
	// alone: the share of what was left when the counts were last read
	if !leaseValid(u, li, inst) {
		li = inst
		if !u.Calendar() {
			li = inst + slideValidity - 1
		}
		lease.restart(li)
	}
	if !u.Calendar() {
		return f.slidingAlone(s, sl, l, k, now), false
	}
	if k.aloneInst != li || k.reads != k.aloneReads {
		f.fixShare(k, lease, l, li, inst, now)
		if ce := f.logger.Check(zap.DebugLevel, "quota fleet: deciding alone on a share"); ce != nil {
			ce.Write(zap.String("consumer", sl.key.consumer), zap.String("plan", sl.key.plan), zap.String("window", l.WindowName()),
				zap.Int64("left_as_read", k.aloneBase), zap.Int64("others_as_read", k.others), zap.Int64("own_tokens", lease.take.Load()),
				zap.Int64("share", k.aloneAllow), zap.Duration("read_age", time.Duration(now.UnixNano()-k.readAt)))
		}
	}
	if k.aloneUsed >= k.aloneAllow && f.policy.Load().failClosed {
		return shareUsed, false
	}
	return fromShare, false
}

// fixShare sets the share a gateway deciding alone admits of window l
// (li: the lease instance it decides in). sl.mu is held.
//
// The share is of what was left when this gateway began deciding alone
// (as last read while leasing), and it stays fixed until the gateway
// leases again: through the outage, the hold after it (the reads then
// miss what the others admitted alone and have not written yet: a share
// of them would be over what is left) and a new outage with no lease
// between (the others' alone admissions are not known yet). It does not
// depend on which of a lease that waited too long or the outage it turned
// into came first. What was left excludes all this gateway took: its
// lease in hand, admitted from first, and what it admitted alone and has
// not written yet.
func (f *Fleet) fixShare(k *knownWindow, lease *windowLease, l Limit, li, inst int64, now time.Time) {
	take := lease.take.Load()
	var others int64
	if leaseValid(l.Unit, k.inst, inst) || k.inst == li {
		others = k.others
	}
	k.aloneInst, k.aloneReads = li, k.reads
	k.aloneBase, k.aloneUsed = max(l.N-others-take, 0), 0
	if !f.readFresh(k, now) {
		k.aloneBase = 0
	}
	// the share too: a count of gateways read later (a heartbeat
	// listing while NATS restarts) must not widen it
	k.aloneAllow = int64(math.Floor(f.share() * float64(k.aloneBase)))
}

// slidingAlone decides a request on sliding window l alone, from this
// gateway's own requests in the window (its ring of steps on disk): it
// admits up to the share of what was left as it last read the fleet's
// count (plus what it had admitted itself then) until a window has passed
// since that read, then up to its share of the limit per window, so that
// together the gateways admit at most the limit in any window once the
// others' earlier requests have left it. sl.mu is held.
func (f *Fleet) slidingAlone(s *Store, sl *slot, l Limit, k *knownWindow, now time.Time) int {
	own := s.ringUsed(sl.idx, l, now)
	nowNs := now.UnixNano()
	if k.reads != k.aloneReads || k.aloneFrac == 0 {
		// a count of gateways read later (a heartbeat listing while
		// NATS restarts) must not widen the share
		k.aloneFrac, k.aloneReads, k.aloneUntil = f.share(), k.reads, 0
	}
	if k.aloneUntil == 0 || nowNs >= k.aloneUntil {
		switch {
		case k.aloneUntil == 0 && !f.readFresh(k, now):
			// the others' requests of the last window are not known:
			// nothing more until they have left it
			k.aloneBase, k.aloneAllow = 0, own
			k.aloneUntil = nowNs + int64(l.Window)
		case k.aloneUntil == 0 && nowNs-k.readAt < int64(l.Window):
			k.aloneBase = max(l.N-k.others-own, 0)
			k.aloneAllow = own + int64(math.Floor(k.aloneFrac*float64(k.aloneBase)))
			k.aloneUntil = k.readAt + int64(l.Window)
		default:
			k.aloneBase = l.N
			k.aloneAllow = int64(math.Floor(k.aloneFrac * float64(l.N)))
			k.aloneUntil = math.MaxInt64
		}
		if ce := f.logger.Check(zap.DebugLevel, "quota fleet: deciding alone on a share"); ce != nil {
			ce.Write(zap.String("consumer", sl.key.consumer), zap.String("plan", sl.key.plan), zap.String("window", l.WindowName()),
				zap.Int64("left_as_read", k.aloneBase), zap.Int64("others_as_read", k.others), zap.Int64("own_in_window", own),
				zap.Int64("allowed_in_window", k.aloneAllow), zap.Duration("read_age", time.Duration(nowNs-k.readAt)))
		}
	}
	if own >= k.aloneAllow && f.policy.Load().failClosed {
		return shareUsed
	}
	return fromShare
}

// readFresh reports whether the gateway's last read of window k (while
// leasing, not passive) is recent enough to take a share of: at most
// half the ack window before NATS went away (before now while it is
// away for no outage, a wait that was late). The others waited for its
// reads until then, so the read misses at most one lease of each.
func (f *Fleet) readFresh(k *knownWindow, now time.Time) bool {
	if k.readAt == 0 {
		return false
	}
	ref := now.UnixNano()
	if down := f.downSince.Load(); down != 0 && down < ref {
		ref = down
	}
	return ref-k.readAt <= int64(f.ackWindow()/2)
}

// count counts an admitted request in every window, from where each
// decided it (how), in its instance at now (inst). sl.mu is held.
func (f *Fleet) count(s *Store, sl *slot, p *Plan, dt *table, how [MaxLimits]int, inst *[MaxLimits]int64) {
	atomic.AddUint64(dt.word(sl.idx, 0), 1)
	sl.month++
	for i, l := range p.Limits {
		u := l.Unit
		lease := s.lease(sl.idx, u)
		if how[i] == fromLease {
			lease.left.Add(-1)
		} else {
			lease.take.Add(1)
			lease.debt.Add(1)
			if how[i] == fromShare || how[i] == shareUsed {
				sl.fl.known[u].aloneUsed++
			}
		}
		if !u.Calendar() {
			s.ringAddStep(sl.idx, l, inst[i])
		}
	}
}

// windowState is window l's state after the request (full: it refused;
// inst: the window's instance at now). sl.mu is held.
func (f *Fleet) windowState(s *Store, sl *slot, l Limit, inst int64, now time.Time, sn *calSnap, full bool) WindowState {
	u := l.Unit
	k := &sl.fl.known[u]
	lease := s.lease(sl.idx, u)
	take, left := lease.take.Load(), lease.left.Load()
	var others int64
	if leaseValid(u, k.inst, inst) || k.inst == lease.inst.Load() {
		others = k.others
	}
	w := WindowState{Remaining: max(l.N-others-take+left, 0)}
	if full {
		w.Remaining = 0
	}
	switch u {
	case Day:
		w.Reset = sn.dayHi
	case Month:
		w.Reset = sn.month.End.UnixNano()
	default:
		if full && k.reset > now.UnixNano() {
			w.Reset = k.reset
		} else {
			w.Reset = ringResetEmptyStep(l, inst)
		}
	}
	return w
}

func anyTrue(b [MaxLimits]bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// waitCh returns the channel closed after the slot's next operation;
// sl.mu is held.
func (fs *fleetSlot) waitCh() chan struct{} {
	fs.waitMu.Lock()
	defer fs.waitMu.Unlock()
	if fs.wait == nil {
		fs.wait = make(chan struct{})
	}
	return fs.wait
}

// broadcast wakes the requests waiting for the slot's operation.
func (fs *fleetSlot) broadcast() {
	fs.waitMu.Lock()
	if fs.wait != nil {
		close(fs.wait)
		fs.wait = nil
	}
	fs.waitMu.Unlock()
}

// process writes the slot's usage and tokens, returns idle leases and
// takes the leases its windows need: the month's document, then the
// sliding windows' when the plan has any.
func (f *Fleet) process(sl *slot) error {
	p := sl.fl.plan.Load()
	if p == nil {
		return nil
	}
	now := f.now()
	sn := f.s.periods(now)
	sl.fl.notBefore.Store(0)
	sl.fl.blocked = false
	sl.mu.Lock()
	f.measureRate(sl, now)
	sl.mu.Unlock()
	if err := f.processMonth(sl, p, now, sn); err != nil {
		return err
	}
	for _, l := range p.Limits {
		if !l.Unit.Calendar() {
			if err := f.processSliding(sl, p, now); err != nil {
				return err
			}
			break
		}
	}
	sl.fl.waiting.Store(sl.fl.blocked)
	return nil
}

// granted reports whether any of grants is a lease.
func granted(grants []grant) bool {
	for _, g := range grants {
		if g.n > 0 {
			return true
		}
	}
	return false
}

// grant is a lease decided for a window, applied once written.
type grant struct {
	u     Unit
	inst  int64
	n     int64
	debt  int64 // debt included in the written take, cleared once written
	fresh bool  // a new lease (sliding: a new charged step)
	// blocked: a lease was wanted and waits for another gateway's read
	blocked bool
}

// measureRate updates the slot's request rate at now: the requests
// asked since it was last measured, at least a quarter of a sync interval
// ago (so that operations close together, a lease and a prefetch, do not
// measure a burst of one). sl.mu is held.
func (f *Fleet) measureRate(sl *slot, now time.Time) {
	fs := &sl.fl
	nowNs, asked := now.UnixNano(), fs.asked.Load()
	if fs.rateAt == 0 {
		fs.rateAt, fs.rateAsked = nowNs, asked
		return
	}
	if elapsed := nowNs - fs.rateAt; elapsed >= int64(f.o.SyncInterval)/4 {
		fs.rate = float64(asked-fs.rateAsked) / (float64(elapsed) / 1e9)
		fs.rateAt, fs.rateAsked = nowNs, asked
	}
}

// nodeStamp is what a gateway's entry of either document (monthNode,
// slideNode, which embed it) says of the gateway beside its tokens: its
// rate, the leases it took and the others' it read, and when and how it
// last wrote.
type nodeStamp struct {
	// Rate is the gateway's requests per second of the consumer on the
	// plan when it last wrote (the leases follow each gateway's share).
	Rate float64 `json:"rate,omitempty"`
	// Leases counts the leases the gateway was granted in the document,
	// Saw the others' as it last read them, and Passive says that it
	// held nothing as it last wrote (see mayLease).
	Leases  int64            `json:"leases,omitempty"`
	Saw     map[string]int64 `json:"saw,omitempty"`
	Passive bool             `json:"passive,omitempty"`
	// Leasing says that the gateway took leases as it last wrote: it
	// neither decided alone nor held after an outage (see othersPending;
	// absent in an older gateway's entry, which is read as holding).
	Leasing bool `json:"leasing,omitempty"`
	// Seen is when the gateway last wrote (Unix ms).
	Seen int64 `json:"seen"`
}

// stamp returns the entry's stamp (promoted to the entries that embed
// it).
func (n *nodeStamp) stamp() *nodeStamp { return n }

// stamped is a document's entry: it has a stamp.
type stamped interface{ stamp() *nodeStamp }

// othersStamps yields every gateway's stamp but me's.
func othersStamps[N stamped](nodes map[string]N, me string) iter.Seq[*nodeStamp] {
	return func(yield func(*nodeStamp) bool) {
		for name, n := range nodes {
			if name != me && !yield(n.stamp()) {
				return
			}
		}
	}
}

// readStamps is the step of an operation that reads the others' stamps
// before deciding the grants: this gateway's share of the slot's traffic,
// and whether it may take a new lease (else op.waitFor names the gateway
// whose read it waits for). sl.mu is held.
func readStamps[N stamped](op *docOp, sl *slot, nodes map[string]N, me *nodeStamp) (share float64, may bool) {
	f := op.f
	share = f.trafficShare(sl.fl.rate, othersStamps(nodes, f.o.Node), op.now)
	may, op.waitFor = mayLease(f, nodes, f.o.Node, me.Leases, op.now)
	return share, may
}

// writeStamp is the step of an operation that stamps this gateway's
// entry once the grants are decided: a lease granted counts, the others'
// leases are acknowledged when leasing (not deciding alone, nor holding
// after an outage: its share stays fixed on the read before, so its
// reads must not let the others lease on), and when and how it wrote.
// sl.mu is held.
func writeStamp[N stamped](op *docOp, sl *slot, nodes map[string]N, me *nodeStamp, grants []grant, leasing bool) {
	if granted(grants) {
		me.Leases++
	}
	if leasing {
		me.Saw = sawAll(nodes, op.f.o.Node)
	}
	me.Rate, me.Passive, me.Seen = sl.fl.rate, op.idle, op.now.UnixMilli()
	me.Leasing = leasing
}

// trafficShare is this gateway's share of the fleet's requests of a
// slot: its rate over the rates every gateway wrote in the last minute
// (others: the others' stamps); 1 / the gateways while no rate is known.
func (f *Fleet) trafficShare(mine float64, others iter.Seq[*nodeStamp], now time.Time) float64 {
	total := mine
	for o := range others {
		if now.UnixMilli()-o.Seen < int64(time.Minute/time.Millisecond) {
			total += o.Rate
		}
	}
	if total <= 0 {
		return 1 / float64(max(f.nodes.Load(), 1))
	}
	return mine / total
}

// leaseSize is the tokens of a new lease of a window with remaining
// tokens: enough for two sync intervals at the slot's rate (at least
// 10), at most max_lease, and at most half
// of this gateway's share of the traffic of what is left (a quiet
// gateway takes little, so it holds little that a busy one needs; at
// least 1). Every lease is written with a compare-and-set of the
// document that counts every gateway's tokens, so together they never
// take more than the limit, whatever each one's share.
func (f *Fleet) leaseSize(remaining int64, rate, share float64) int64 {
	if !f.leasing(f.now()) {
		return 0 // after an outage: the others' writes first
	}
	want := int64(rate*2*f.o.SyncInterval.Seconds()) + 1
	want = max(want, min(10, f.o.MaxLease))
	want = min(want, f.o.MaxLease)
	limit := max(int64(float64(remaining)*share/2), 1)
	return max(min(want, limit, remaining), 0)
}

// docOp is one operation of a slot on one of its documents, the step
// both documents share: what the gateway knew as it began, the
// compare-and-set of the document (whose change writes this gateway's
// entry and decides the grants), and, once written, whether the grants
// stand and what the gateway learned.
type docOp struct {
	f   *Fleet
	now time.Time
	// idle: the slot was not used for a sync interval; it gives back
	// what it holds and takes no lease
	idle bool
	// leasing: the gateway took leases as the operation began (the
	// counts answered and it was not holding after an outage)
	leasing bool
	// downAt is the last outage's start as the operation began
	downAt int64
	// interrupted: an outage began while the operation was under way
	// (set by write)
	interrupted bool
	// blocked: a lease was wanted and waits for another gateway's read
	// of this one's previous lease (see mayLease): waitFor's
	blocked bool
	waitFor string
}

// ackWindow is how long after its last write a gateway that is not
// passive counts, for the others, as one whose read they wait for
// before each new lease, and how old (at most half of it) a gateway's
// last read may be when NATS goes away for it to take a share of it:
// twice the longest a serving gateway goes between two reads (a sync
// interval, a lease wait, a sync interval).
func (f *Fleet) ackWindow() time.Duration {
	return 2 * (f.o.LeaseWait + 2*f.o.SyncInterval)
}

// mayLease reports whether this gateway (me, granted mine leases so far)
// may take a new lease in a document: only once every other gateway
// that wrote it within the ack window and is not passive has read its
// previous one. So between two reads of a gateway each other takes at
// most one lease, and what a gateway's last read misses when NATS goes
// away is at most one lease (max_lease) of each other gateway: the bound
// of an outage, (gateways - 1) x max_lease, holds at any rate of
// requests. It names the gateway waited for.
func mayLease[N stamped](f *Fleet, nodes map[string]N, me string, mine int64, now time.Time) (bool, string) {
	if mine == 0 {
		return true, ""
	}
	window := f.ackWindow().Milliseconds()
	for name, n := range nodes {
		if name == me {
			continue
		}
		o := n.stamp()
		if o.Passive || now.UnixMilli()-o.Seen >= window {
			continue
		}
		if o.Saw[me] < mine {
			return false, name
		}
	}
	return true, ""
}

// sawAll returns every other gateway's leases, as this one reads them.
func sawAll[N stamped](nodes map[string]N, me string) map[string]int64 {
	saw := make(map[string]int64, len(nodes))
	for name, n := range nodes {
		if leases := n.stamp().Leases; name != me && leases > 0 {
			saw[name] = leases
		}
	}
	return saw
}

// wait delays the slot's next operation after one whose lease waited
// for another gateway's read, and asks that gateway to read now: the
// waiting requests ask again in a moment (at most every 50 ms), until
// that gateway has read (without the request, it does at least every
// sync interval while it serves the consumer).
func (op *docOp) wait(sl *slot) {
	if !op.blocked {
		return
	}
	sl.fl.blocked = true
	sl.fl.notBefore.Store(op.now.Add(op.f.retryPause()).UnixNano())
	op.f.askToRead(sl, op.waitFor)
	if ce := op.f.logger.Check(zap.DebugLevel, "quota fleet: a lease waits for another gateway's read"); ce != nil {
		ce.Write(zap.String("consumer", sl.key.consumer), zap.String("plan", sl.key.plan))
	}
}

func (f *Fleet) beginOp(sl *slot, now time.Time) *docOp {
	return &docOp{
		f:       f,
		now:     now,
		idle:    now.UnixNano()-sl.used.Load() > int64(f.o.SyncInterval) && sl.fl.waiters.Load() == 0,
		leasing: f.leasing(now),
		downAt:  f.lastDown.Load(),
	}
}

// write reads the document at key into doc (a pointer to its zero
// value), lets change write this gateway's entry into it, and writes it
// back with a compare-and-set on its revision, again on a conflict
// (change runs again on the fresh read). Once written, it notes whether
// an outage began meanwhile: the read may then predate what the others
// admit alone from then on, so the grants are void (see granted) and the
// read is no ground for a new share. The tokens written for a lease not
// taken are given back by the next write, which counts what this gateway
// holds.
func (op *docOp) write(key string, doc any, change func()) error {
	if err := op.f.casDoc(key, doc, change); err != nil {
		return err
	}
	raiseTo(&op.f.lastRead, op.now.UnixNano())
	op.interrupted = op.f.lastDown.Load() != op.downAt
	return nil
}

// granted is the tokens of g that stand once the document is written.
func (op *docOp) granted(g grant) int64 {
	if op.interrupted {
		return 0
	}
	return g.n
}

// learned records in k what a written operation read and granted (n
// tokens); readWhileLeasing is whether its read counts as one made
// while leasing (a ground for a new share). sl.mu is held.
func (op *docOp) learned(k *knownWindow, n int64, readWhileLeasing bool) {
	if readWhileLeasing && op.leasing && !op.interrupted {
		k.reads++
		k.readAt = op.now.UnixNano()
		if op.idle {
			// a passive entry (it held nothing): no ground for a
			// share, since the others lease on without waiting for
			// its reads
			k.readAt = 0
		}
	}
	if n > 0 {
		k.lastLease = n
	}
}

// errConflict: another gateway wrote the document first.
var errConflict = errors.New("conflict")

// errContention: the gateways wrote one document so often that this one
// could not within opTimeout (NATS answers: the fleet stays available).
var errContention = errors.New("too many conflicting writes")

// casDoc reads key into v (a pointer to a zero value to fill; left zero
// when the key does not exist), lets change modify it, and writes it back
// if its revision is unchanged; on a conflict it reads and changes it
// again, for at most opTimeout.
func (f *Fleet) casDoc(key string, v any, change func()) error {
	deadline := time.Now().Add(opTimeout)
	for attempt := 0; ; attempt++ {
		err := f.casOnce(key, v, change, deadline)
		if !errors.Is(err, errConflict) {
			if err == nil {
				leaseOpsVec.WithLabelValues("ok").Inc()
			}
			return err
		}
		leaseOpsVec.WithLabelValues("conflict").Inc()
		// other gateways write the same document: back off a little,
		// at random, and read it again
		pause := time.Duration(rand.Int64N(int64(min(attempt+1, 20)) * int64(time.Millisecond)))
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("quota document %s: %w", key, errContention)
		}
		select {
		case <-f.ctx.Done():
			return f.ctx.Err()
		case <-time.After(pause):
		}
	}
}

// casOnce is one read, change and conditional write of casDoc.
func (f *Fleet) casOnce(key string, v any, change func(), deadline time.Time) error {
	ctx, cancel := context.WithDeadline(f.ctx, deadline)
	defer cancel()
	kv, err := f.bucket(ctx)
	if err != nil {
		return err
	}
	var rev uint64
	found := false
	// a fresh document for each attempt: what an earlier attempt's
	// change wrote into it is not the stored document's
	rv := reflect.ValueOf(v).Elem()
	rv.Set(reflect.Zero(rv.Type()))
	e, err := kv.Get(ctx, key)
	switch {
	case err == nil:
		if err := json.Unmarshal(e.Value(), v); err != nil {
			return fmt.Errorf("quota document %s is not valid JSON (left as it is): %w", key, err)
		}
		rev, found = e.Revision(), true
	case errors.Is(err, jetstream.ErrKeyNotFound):
	default:
		return err
	}
	change()
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if found {
		_, err = kv.Update(ctx, key, data, rev)
	} else {
		_, err = kv.Create(ctx, key, data)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return errConflict
	}
	return err
}
