package caddyquota

import (
	"math"
	"sort"
	"strconv"
	"time"
)

// The sliding windows (minute, hour) across the fleet: one document per
// consumer and plan, with each gateway's tokens per step.
//
// A lease of a sliding window is charged at the last step it may be used
// in (slideValidity steps from the one it was taken in): its tokens stay
// in the window until that step leaves it, so a request admitted from it
// is never counted as older than it is, and the fleet never admits more
// than the limit in any window.

// slideValidity is how many steps a sliding window's lease is valid; its
// tokens are counted at the last of them (so the fleet never admits more
// than the limit in any window; a lease's tokens may stay counted up to
// this many steps longer than needed).
const slideValidity = 5

func slideKey(consumer, plan string) string { return ConsumerID(consumer) + ".s." + plan }

// slideDoc is a consumer's sliding windows on a plan.
type slideDoc struct {
	Consumer string                `json:"consumer"`
	Plan     string                `json:"plan"`
	Nodes    map[string]*slideNode `json:"nodes"`
}

// slideNode is a gateway's entry of a sliding windows' document.
type slideNode struct {
	// Minute and Hour are the tokens of the plan's shorter and longer
	// sliding window by charged step (the step's number: Unix seconds
	// and Unix minutes for a minute and an hour).
	Minute map[string]int64 `json:"minute,omitempty"`
	Hour   map[string]int64 `json:"hour,omitempty"`
	// MinuteStep and HourStep are the windows' steps in nanoseconds (0:
	// a second and a minute): a gateway whose plan has another window
	// counts apart until the plans agree.
	MinuteStep int64 `json:"minute_step,omitempty"`
	HourStep   int64 `json:"hour_step,omitempty"`
	nodeStamp
}

func (n *slideNode) steps(u Unit) map[string]int64 {
	if u == Hour {
		if n.Hour == nil {
			n.Hour = map[string]int64{}
		}
		return n.Hour
	}
	if n.Minute == nil {
		n.Minute = map[string]int64{}
	}
	return n.Minute
}

// stepOf is the entry's step of window u (the default when not written).
func (n *slideNode) stepOf(u Unit) time.Duration {
	v := n.MinuteStep
	if u == Hour {
		v = n.HourStep
	}
	if v == 0 {
		return Limit{Unit: u}.step()
	}
	return time.Duration(v)
}

// setStep records the entry's step of window u, dropping its tokens of
// a window with another step.
func (n *slideNode) setStep(u Unit, step time.Duration) {
	if n.stepOf(u) != step {
		clear(n.steps(u))
	}
	v := int64(step)
	if step == (Limit{Unit: u}).step() {
		v = 0
	}
	if u == Hour {
		n.HourStep = v
	} else {
		n.MinuteStep = v
	}
}

// entry returns node's entry of the document (made when missing), and
// names the document.
func (doc *slideDoc) entry(consumer, plan, node string) *slideNode {
	if doc.Nodes == nil {
		doc.Nodes = map[string]*slideNode{}
	}
	doc.Consumer, doc.Plan = consumer, plan
	me := doc.Nodes[node]
	if me == nil {
		me = &slideNode{}
		doc.Nodes[node] = me
	}
	return me
}

// slideRead is what an operation read of one sliding window: the other
// gateways' tokens in it, and when it next admits (Unix ns; 0: not known).
type slideRead struct {
	others, reset int64
	full          bool // the fleet's count is at the limit
}

// processSliding runs the operation on the sliding windows' document: it
// writes this gateway's tokens per step, gives back a lease that ended
// or idles, and takes the leases the windows need.
func (f *Fleet) processSliding(sl *slot, p *Plan, now time.Time) error {
	op := f.beginOp(sl, now)
	var (
		doc    slideDoc
		grants []grant
		reads  [Month + 1]slideRead
	)
	err := op.write(slideKey(sl.key.consumer, p.Name), &doc, func() {
		grants = grants[:0]
		reads = [Month + 1]slideRead{}
		me := doc.entry(sl.key.consumer, p.Name, f.o.Node)
		sl.mu.Lock()
		defer sl.mu.Unlock()
		share, may := readStamps(op, sl, doc.Nodes, &me.nodeStamp)
		op.blocked = false
		for _, l := range p.Limits {
			if l.Unit.Calendar() {
				continue
			}
			g, read := f.slideGrant(op, sl, l, &doc, me, share, may)
			reads[l.Unit], op.blocked = read, op.blocked || g.blocked
			grants = append(grants, g)
		}
		writeStamp(op, sl, doc.Nodes, &me.nodeStamp, grants, op.leasing)
	})
	if err != nil {
		// the write may have landed with its answer lost (noteRead)
		f.noteSlidingRead(sl, grants, &reads)
		return err
	}
	op.wait(sl)
	s := f.s
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, g := range grants {
		k := &sl.fl.known[g.u]
		lease := s.lease(sl.idx, g.u)
		n := op.granted(g)
		lease.debt.Add(-min(g.debt, lease.debt.Load()))
		switch {
		case n > 0 && g.fresh:
			lease.restart(g.inst)
			lease.take.Store(n)
			lease.left.Store(n)
		case n > 0:
			lease.take.Add(n)
			lease.left.Add(n)
		}
		k.inst, k.others, k.reset = g.inst, reads[g.u].others, reads[g.u].reset
		l, _ := p.Limit(g.u)
		if cur := l.stepAt(now); !leaseValid(g.u, g.inst, cur) {
			// no lease in hand, or none that serves this step: the
			// read is of the current step's window (so a full window
			// refuses at once, and a share decided later is of what
			// this read found left, not of the whole limit)
			k.inst = cur + slideValidity - 1
		}
		op.learned(k, n, true)
		// (a lease that waits for another gateway's read, or for the
		// end of the hold after an outage, is not a full window)
		k.exhausted = n == 0 && lease.left.Load() == 0 && !op.idle && !op.interrupted && reads[g.u].full
		k.recheck = min(now.UnixNano()+int64(f.o.SyncInterval), max(reads[g.u].reset, now.UnixNano()))
	}
	return nil
}

// noteSlidingRead is noteRead for the sliding windows' document: what an
// operation that failed read of the others' tokens counts, and a share
// already fixed on the read before (of what was left as read, until a
// window has passed since it) shrinks by what this read found taken
// since. sl.mu is not held.
func (f *Fleet) noteSlidingRead(sl *slot, grants []grant, reads *[Month + 1]slideRead) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, g := range grants {
		k := &sl.fl.known[g.u]
		o := reads[g.u].others
		if k.aloneReads == k.reads && k.aloneUntil != 0 && k.aloneUntil != math.MaxInt64 && o > k.others {
			before := int64(math.Floor(k.aloneFrac * float64(k.aloneBase)))
			k.aloneBase = max(k.aloneBase-(o-k.others), 0)
			k.aloneAllow -= before - int64(math.Floor(k.aloneFrac*float64(k.aloneBase)))
		}
		k.others = o
	}
}

// slideGrant writes the slot's tokens of sliding window l into its entry
// (dropping the steps that left the window), and decides the lease the
// window needs: a new one, charged at the last step it serves, when the
// lease in hand ended, is used up, half used, or ends with this step; the
// lease in hand gives back what is left when it ends, idles or gives way
// to a new one (unless it may not lease yet: blocked, a lease was
// wanted). It reads the fleet's count of the window and when the window
// next admits. sl.mu is held.
func (f *Fleet) slideGrant(op *docOp, sl *slot, l Limit, doc *slideDoc, me *slideNode, share float64, may bool) (g grant, read slideRead) {
	u := l.Unit
	cur := l.stepAt(op.now)
	me.setStep(u, l.step())
	mine := me.steps(u)
	for key := range mine {
		if step, err := strconv.ParseInt(key, 10, 64); err != nil || step < cur-ringSteps-1 {
			delete(mine, key)
		}
	}
	lease := f.s.lease(sl.idx, u)
	li := lease.inst.Load()
	valid := leaseValid(u, li, cur)
	k := &sl.fl.known[u]
	left := lease.left.Load()
	want := !op.idle && (!valid || left == 0 || left <= k.lastLease/2 || li == cur)
	blocked := want && !may
	if blocked {
		// the lease in hand stays as it is until this gateway may take
		// the next one
		want = false
	}
	charged := cur + slideValidity - 1
	if (!valid || op.idle || want && charged != li) && left > 0 {
		lease.giveBack()
	}
	if li != 0 && li >= cur-ringSteps-1 {
		if t := lease.take.Load(); t > 0 {
			mine[strconv.FormatInt(li, 10)] = t
		} else {
			delete(mine, strconv.FormatInt(li, 10))
		}
	}
	g = grant{u: u, inst: li, debt: lease.debt.Load(), blocked: blocked}
	// the fleet's count: every step from the window's oldest to the
	// last charged one
	byStep := map[int64]int64{}
	var used int64
	for name, n := range doc.Nodes {
		if n.stepOf(u) != l.step() {
			continue // another window: not this plan's as this gateway has it
		}
		for key, t := range n.steps(u) {
			step, err := strconv.ParseInt(key, 10, 64)
			if err != nil || step < cur-ringSteps {
				continue
			}
			used += t
			byStep[step] += t
			if name != f.o.Node {
				read.others += t
			}
		}
	}
	if want {
		if n := f.leaseSize(l.N-used, sl.fl.rate, share); n > 0 {
			g.n, g.fresh, g.inst = n, charged != li, charged
			mine[strconv.FormatInt(charged, 10)] += n
		}
	}
	read.reset = nextAdmission(l, byStep, used)
	read.full = used >= l.N
	return g, read
}

// nextAdmission is when sliding window l, which counts used tokens (by
// charged step), next admits under its limit: when enough steps have left
// it (0 when it counts nothing).
func nextAdmission(l Limit, byStep map[int64]int64, used int64) int64 {
	steps := make([]int64, 0, len(byStep))
	for step := range byStep {
		steps = append(steps, step)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	drop, gone := used-l.N+1, int64(0)
	for _, step := range steps {
		gone += byStep[step]
		if gone >= max(drop, 1) {
			return (step + ringSteps + 1) * int64(l.step())
		}
	}
	return 0
}
