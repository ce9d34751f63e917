package caddyquota

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// The fleet shares the counts of every gateway through a JetStream
// key-value bucket, without a NATS round trip per request: a gateway
// takes a lease of part of a consumer's remaining quota (tokens), admits
// requests from it locally, and gives back what it does not use.
//
// Keys (one consumer is the first 32 hex digits of its SHA-256):
//
//	<consumer>.<YYYYMM>.<plan>  the month's document: per gateway, its
//	                            tokens of the month and of each day, and
//	                            each day's admitted and refused requests
//	<consumer>.s.<plan>         the sliding windows' document: per
//	                            gateway, its tokens per step
//	n.<gateway>                 a gateway's heartbeat (how many share)
//
// A gateway writes only its own entry of a document, always its absolute
// values, with a compare-and-set on the document's revision: a retried
// or repeated write counts nothing twice. Its tokens ("take") are what it
// admitted plus what it holds unused; the tokens left in hand and those
// admitted while NATS could not be reached ("debt") live in the store's
// leases.cnt beside the counts, so a restart or a SIGKILL loses none.
//
// A lease is never more than max_lease, nor more than the quota left
// divided by twice the gateways that share it: together they can never
// take more than the quota, so in normal operation the fleet admits at
// most the quota, exactly.

// slideValidity is how many steps a sliding window's lease is valid; its
// tokens are counted at the last of them (so the fleet never admits more
// than the limit in any window; a lease's tokens may stay counted up to
// this many steps longer than needed).
const slideValidity = 5

// The words of a window's lease in leases.cnt (per unit, 4 words).
const (
	wInst = iota // the period (calendar) or the charged step (sliding) of the lease
	wTake        // tokens this gateway counts in that instance
	wLeft        // of which it has not used
	wDebt        // of which it admitted without a lease (NATS unreachable) since the last write
	leaseWords
)

// opTimeout bounds one NATS operation of the fleet.
const opTimeout = 2 * time.Second

// FleetOptions configure a store's fleet link.
type FleetOptions struct {
	Bucket       string
	Replicas     int
	Node         string
	MaxLease     int64
	SyncInterval time.Duration
	LeaseWait    time.Duration
	// FailClosed refuses, once a gateway's share is used, while the
	// fleet's counts cannot be reached; else it admits on.
	FailClosed bool
	// Share is the share of a consumer's remaining quota a gateway
	// admits alone while the counts cannot be reached; 0: 1 / the
	// gateways seen.
	Share float64
	// RetentionDays is the bucket's max age when the fleet creates it.
	RetentionDays int
	Logger        *zap.Logger
	// Clock is the time (tests); default time.Now.
	Clock func() time.Time
}

// FleetConn is what the fleet needs of a NATS connection.
type FleetConn struct {
	JetStream jetstream.JetStream
	// Connected reports whether the connection is up.
	Connected func() bool
	// Clustered reports whether the server is part of a cluster (a
	// bucket gets replicas only there).
	Clustered func() bool
	// OnReconnect registers a function to run when the connection comes
	// back; it returns a function that removes it.
	OnReconnect func(func()) func()
	// Release gives the connection back when the fleet stops.
	Release func()
}

// Fleet is a store's link to the fleet's shared counts.
type Fleet struct {
	s      *Store
	o      FleetOptions
	conn   FleetConn
	logger *zap.Logger
	now    func() time.Time

	policy atomic.Pointer[fleetPolicy]

	kvMu sync.Mutex
	kv   jetstream.KeyValue

	available atomic.Bool
	nodes     atomic.Int64 // gateways with a fresh heartbeat, at least 1
	downSince atomic.Int64 // Unix ns the counts became unreachable; 0 while available
	lastDown  atomic.Int64 // Unix ns of the last time they did
	holdTill  atomic.Int64 // Unix ns until which no lease is taken after an outage
	upSince   atomic.Int64 // Unix ns the counts last became reachable again
	beatErr   errorLog

	qmu     sync.Mutex
	queue   []*slot
	signal  chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	removeR func()
}

type fleetPolicy struct {
	failClosed bool
	share      float64
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

	// guarded by the slot's mu
	known    [Month + 1]knownWindow
	lastOp   int64 // Unix ns of the last successful operation
	lastDay  int64 // the day's admitted count then (the rate)
	resynced bool  // the month's days were written since the last outage
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
	// deciding alone: the instance the share is of, what was left then
	// as known, and what was admitted alone since; aloneReads is reads
	// then
	aloneInst            int64
	aloneBase, aloneUsed int64
	aloneAllow           int64 // the share of aloneBase, fixed with it
	aloneReads           int64
}

// StartFleet links the store to the fleet: its counts are shared from now
// on. The bucket is bound (or created) at the first operation.
func StartFleet(s *Store, conn FleetConn, o FleetOptions) (*Fleet, error) {
	if o.Node == "" {
		return nil, errors.New("quota fleet: no node name")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxLease <= 0 {
		o.MaxLease = DefaultMaxLease
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultFleetSyncInterval
	}
	if o.LeaseWait <= 0 {
		o.LeaseWait = DefaultLeaseWait
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	f := &Fleet{s: s, o: o, conn: conn, logger: o.Logger, now: o.Clock, signal: make(chan struct{}, 1)}
	f.policy.Store(&fleetPolicy{failClosed: o.FailClosed, share: o.Share})
	f.nodes.Store(1)
	f.available.Store(true)
	fleetAvailable.Set(1)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if conn.OnReconnect != nil {
		f.removeR = conn.OnReconnect(func() { f.wake() })
	}
	for i := 0; i < 4; i++ {
		f.wg.Add(1)
		go f.worker()
	}
	f.wg.Add(1)
	go f.ticker()
	s.fleet.Store(f)
	return f, nil
}

// setPolicy applies a reloaded config's unavailable policy.
func (f *Fleet) setPolicy(o FleetOptions) {
	f.policy.Store(&fleetPolicy{failClosed: o.FailClosed, share: o.Share})
}

// Stop unlinks the store (its counts are this gateway's alone again, the
// leases it holds stay recorded for the next link) and waits for the
// fleet's goroutines.
func (f *Fleet) Stop() {
	f.s.fleet.CompareAndSwap(f, nil)
	f.cancel()
	f.wg.Wait()
	if f.removeR != nil {
		f.removeR()
	}
	if f.conn.Release != nil {
		f.conn.Release()
	}
}

// Available reports whether the fleet's counts answered the last
// operation.
func (f *Fleet) Available() bool { return f.available.Load() }

// Nodes returns how many gateways share the counts (fresh heartbeats).
func (f *Fleet) Nodes() int { return int(f.nodes.Load()) }

func (f *Fleet) setAvailable(ok bool, err error) {
	if f.available.Swap(ok) == ok {
		return
	}
	if ok {
		fleetAvailable.Set(1)
		// every gateway writes what it admitted alone before any takes
		// a lease again (they see NATS return within about one sync
		// interval of each other)
		f.holdTill.Store(f.now().UnixNano() + int64(f.o.SyncInterval))
		f.upSince.Store(f.now().UnixNano())
		down := time.Duration(f.now().UnixNano() - f.downSince.Swap(0))
		f.logger.Info("quota fleet counts reachable again: writing what this gateway admitted alone", zap.Duration("unreachable_for", down))
		f.resyncAll()
		return
	}
	now := f.now().UnixNano()
	f.downSince.Store(now)
	f.lastDown.Store(now)
	fleetAvailable.Set(0)
	p := f.policy.Load()
	mode := FailOpen
	if p.failClosed {
		mode = FailClosed
	}
	f.logger.Warn("quota fleet counts unreachable: this gateway admits its share of each consumer's remaining quota alone",
		zap.String("on_unavailable", mode), zap.Float64("share", f.share()), zap.Error(err))
}

// share is the share of the remaining quota a gateway admits alone.
func (f *Fleet) share() float64 {
	if s := f.policy.Load().share; s > 0 {
		return s
	}
	return 1 / float64(max(f.nodes.Load(), 1))
}

// instOf is the instance of a window at now: the period's ID, or the
// step.
func instOf(u Unit, now time.Time, sn *calSnap) int64 {
	switch u {
	case Day:
		return sn.day.ID
	case Month:
		return sn.month.ID
	}
	return stepOf(now, u)
}

// leaseValid reports whether a lease of instance li serves instance
// inst: the same period, or (sliding) a step of its validity.
func leaseValid(u Unit, li, inst int64) bool {
	if u.Calendar() {
		return li == inst
	}
	return inst <= li && li-inst < slideValidity
}

func (s *Store) lw(idx uint32, u Unit, k int) *uint64 {
	return s.leases.word(idx, int(u-1)*leaseWords+k)
}

func ld(p *uint64) int64     { return int64(atomic.LoadUint64(p)) }
func st(p *uint64, v int64)  { atomic.StoreUint64(p, uint64(v)) }
func add(p *uint64, v int64) { atomic.AddUint64(p, uint64(v)) }

// acquire decides a request with the fleet's counts.
func (f *Fleet) acquire(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry bool) (Decision, error) {
	if sl.fl.plan.Load() != p {
		sl.fl.plan.Store(p)
	}
	alone := !f.available.Load() || now.UnixNano() < f.holdTill.Load()
	if !alone && f.conn.Connected != nil && !f.conn.Connected() {
		f.setAvailable(false, errors.New("NATS connection lost"))
		alone = true
	}
	// slow, not away: decided on the share, and refused beyond it
	// whatever on_unavailable says
	closed := false
	began, asked := time.Now(), now
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		sl.mu.Lock()
		d, need, prefetch := f.decide(s, sl, p, now, sn, dt, dry, alone, closed)
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
		f.enqueue(sl)
		if timer == nil {
			timer = time.NewTimer(f.o.LeaseWait)
		}
		select {
		case <-ch:
			// another try: the lease may have gone to the requests
			// that woke first; alone once the counts are unreachable
			alone = !f.available.Load() || now.UnixNano() < f.holdTill.Load()
		case <-timer.C:
			// NATS answers too slowly to wait longer: this request
			// is decided on the share, as when it is unreachable
			alone, closed = true, f.available.Load()
			leaseTimeouts.Inc()
		}
		// decided when it is decided: a wait that outlasts a sliding
		// window's step (or a day) must not decide on the instance it
		// began in, whose leases no longer serve now
		now = asked.Add(time.Since(began))
		sn = s.periods(now)
	}
}

// decide admits or refuses from the tokens in hand; need is set when a
// window has none and a lease must be asked for (unless alone: then the
// share decides). sl.mu is held.
func (f *Fleet) decide(s *Store, sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry, decideAlone, closed bool) (d Decision, need, prefetch bool) {
	s.ensureMonth(sl, sn)
	d = Decision{N: len(p.Limits), Binding: -1}
	var full, fromLease, alone [MaxLimits]bool
	nowNs := now.UnixNano()
	for i, l := range p.Limits {
		u := l.Unit
		inst := instOf(u, now, sn)
		k := &sl.fl.known[u]
		li, left := ld(s.lw(sl.idx, u, wInst)), ld(s.lw(sl.idx, u, wLeft))
		if leaseValid(u, li, inst) && left > 0 {
			fromLease[i] = true
			if left <= k.lastLease/2 || (!u.Calendar() && li == inst) {
				prefetch = true
			}
			continue
		}
		if k.exhausted && leaseValid(u, k.inst, inst) && nowNs < k.recheck {
			full[i] = true
			continue
		}
		if !decideAlone {
			need = true
			continue
		}
		// alone: the share of what was left when the counts were last
		// read
		if !leaseValid(u, li, inst) {
			li = inst
			if !u.Calendar() {
				li = inst + slideValidity - 1
			}
			st(s.lw(sl.idx, u, wInst), li)
			st(s.lw(sl.idx, u, wTake), 0)
			st(s.lw(sl.idx, u, wLeft), 0)
			st(s.lw(sl.idx, u, wDebt), 0)
		}
		if k.aloneInst != li || k.reads != k.aloneReads {
			// the share is of what was left when this gateway began
			// deciding alone (as last read while leasing), and it
			// stays fixed until the gateway leases again: through the
			// outage, the hold after it (the reads then miss what the
			// others admitted alone and have not written yet: a share
			// of them would be over what is left) and a new outage
			// with no lease between (the others' alone admissions are
			// not known yet). It does not depend on which of a lease
			// that waited too long or the outage it turned into came
			// first. What was left excludes all this gateway took:
			// its lease in hand, admitted from first, and what it
			// admitted alone and has not written yet.
			take := ld(s.lw(sl.idx, u, wTake))
			var others int64
			if leaseValid(u, k.inst, inst) || k.inst == li {
				others = k.others
			}
			k.aloneInst, k.aloneReads = li, k.reads
			k.aloneBase, k.aloneUsed = max(l.N-others-take, 0), 0
			// the share too: a count of gateways read later (a
			// heartbeat listing while NATS restarts) must not widen it
			k.aloneAllow = int64(math.Floor(f.share() * float64(k.aloneBase)))
		}
		d.Share = true
		alone[i] = true
		if k.aloneUsed >= k.aloneAllow && (closed || f.policy.Load().failClosed) {
			full[i] = true
		}
	}
	if need && !anyTrue(full) {
		return d, true, false
	}
	over := anyTrue(full)
	admitted := dt.word(sl.idx, 0)
	if !over || dry {
		atomic.AddUint64(admitted, 1)
		sl.month++
		for i, l := range p.Limits {
			u := l.Unit
			if fromLease[i] {
				add(s.lw(sl.idx, u, wLeft), -1)
			} else {
				add(s.lw(sl.idx, u, wTake), 1)
				add(s.lw(sl.idx, u, wDebt), 1)
				if alone[i] {
					sl.fl.known[u].aloneUsed++
				}
			}
			if !u.Calendar() {
				s.ringAdd(sl.idx, u, now)
			}
		}
	} else {
		atomic.AddUint64(dt.word(sl.idx, 1), 1)
	}
	for i, l := range p.Limits {
		u := l.Unit
		k := &sl.fl.known[u]
		take, left := ld(s.lw(sl.idx, u, wTake)), ld(s.lw(sl.idx, u, wLeft))
		var others int64
		if leaseValid(u, k.inst, instOf(u, now, sn)) || k.inst == ld(s.lw(sl.idx, u, wInst)) {
			others = k.others
		}
		w := WindowState{Remaining: max(l.N-others-take+left, 0)}
		if full[i] {
			w.Remaining = 0
		}
		switch u {
		case Day:
			w.Reset = sn.dayHi
		case Month:
			w.Reset = sn.month.End.UnixNano()
		default:
			if full[i] && k.reset > nowNs {
				w.Reset = k.reset
			} else {
				w.Reset = ringResetEmpty(u, now)
			}
		}
		d.Windows[i] = w
	}
	d.bind(full)
	d.Admitted = !over || dry
	return d, false, prefetch && !over
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

// enqueue asks a worker to run an operation on the slot (once at a time).
func (f *Fleet) enqueue(sl *slot) {
	if !sl.fl.queued.CompareAndSwap(false, true) {
		sl.fl.again.Store(true)
		return
	}
	f.qmu.Lock()
	f.queue = append(f.queue, sl)
	f.qmu.Unlock()
	f.wake()
}

func (f *Fleet) wake() {
	select {
	case f.signal <- struct{}{}:
	default:
	}
}

func (f *Fleet) next() *slot {
	f.qmu.Lock()
	defer f.qmu.Unlock()
	if len(f.queue) == 0 {
		return nil
	}
	sl := f.queue[0]
	f.queue[0] = nil
	f.queue = f.queue[1:]
	if len(f.queue) > 0 {
		f.wake() // for the other workers
	}
	return sl
}

func (f *Fleet) worker() {
	defer f.wg.Done()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-f.signal:
		}
		for sl := f.next(); sl != nil; sl = f.next() {
			f.run(sl)
		}
	}
}

// run runs one operation on the slot, recovering from a panic.
func (f *Fleet) run(sl *slot) {
	defer func() {
		if r := recover(); r != nil {
			f.logger.Error("panic in a quota fleet operation", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		}
		sl.fl.broadcast()
		sl.fl.queued.Store(false)
		if sl.fl.again.Swap(false) {
			f.enqueue(sl)
		}
	}()
	sl.fl.again.Store(false)
	err := f.process(sl)
	sl.fl.failed.Store(err != nil)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, errContention) {
			// NATS answers; the waiting requests try again or decide
			// on their share
			if ce := f.logger.Check(zap.DebugLevel, "quota fleet: contention on a consumer's document"); ce != nil {
				ce.Write(zap.Error(err))
			}
			return
		}
		leaseOpsVec.WithLabelValues("error").Inc()
		f.setAvailable(false, err)
		return
	}
	f.setAvailable(true, nil)
}

// ticker writes usage and returns idle leases every sync interval, and
// keeps the heartbeat.
func (f *Fleet) ticker() {
	defer f.wg.Done()
	tick := time.NewTicker(f.o.SyncInterval)
	defer tick.Stop()
	var last int64
	nextBeat, started := time.Time{}, f.now()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-tick.C:
		}
		now := f.now()
		if now.After(nextBeat) {
			// a heartbeat that fails says nothing the lease operations
			// do not: it only leaves the count of gateways as it was
			if err := f.heartbeat(now); err != nil && f.beatErr.due() {
				f.logger.Warn("quota fleet heartbeat failed", zap.Error(err))
			}
			// every tick for the first 10 seconds: the gateways of a
			// fleet starting together see each other at once
			nextBeat = now.Add(10 * time.Second)
			if now.Sub(started) < 10*time.Second {
				nextBeat = now
			}
		}
		for _, sl := range f.s.allSlots() {
			if sl.fl.plan.Load() == nil {
				continue
			}
			if sl.used.Load() > last || f.holds(sl) || sl.fl.failed.Load() {
				f.enqueue(sl)
			}
		}
		last = now.UnixNano() - int64(f.o.SyncInterval)/2
	}
}

// holds reports whether the slot holds unused or unwritten tokens.
func (f *Fleet) holds(sl *slot) bool {
	for u := Minute; u <= Month; u++ {
		if ld(f.s.lw(sl.idx, u, wLeft)) > 0 || ld(f.s.lw(sl.idx, u, wDebt)) > 0 {
			return true
		}
	}
	return false
}

// resyncAll runs an operation on every slot used while the counts were
// unreachable, writing what was admitted meanwhile (all the month's days).
func (f *Fleet) resyncAll() {
	for _, sl := range f.s.allSlots() {
		if sl.fl.plan.Load() != nil {
			sl.mu.Lock()
			sl.fl.resynced = false
			sl.mu.Unlock()
			f.enqueue(sl)
		}
	}
}

// bucket returns the bound bucket, binding (creating) it the first time.
func (f *Fleet) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	f.kvMu.Lock()
	defer f.kvMu.Unlock()
	if f.kv != nil {
		return f.kv, nil
	}
	if f.conn.JetStream == nil {
		return nil, errors.New("no NATS connection")
	}
	replicas := f.o.Replicas
	if replicas < 1 || f.conn.Clustered != nil && !f.conn.Clustered() {
		replicas = 1
	}
	retention := f.o.RetentionDays
	if retention <= 0 {
		retention = DefaultRetentionDays
	}
	kv, err := natsconn.BindKV(ctx, f.conn.JetStream, jetstream.KeyValueConfig{
		Bucket:      f.o.Bucket,
		Description: "apigate quota counts: per consumer and month, each gateway's tokens and usage",
		History:     1,
		TTL:         time.Duration(retention) * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}, f.logger)
	if err != nil {
		return nil, err
	}
	f.kv = kv
	return kv, nil
}

// ConsumerID is a consumer's part of the fleet's keys: the first 32 hex
// digits of the SHA-256 of its name.
func ConsumerID(consumer string) string {
	sum := sha256.Sum256([]byte(consumer))
	return hex.EncodeToString(sum[:16])
}

func monthKey(consumer, plan string, month int64) string {
	y, m := monthDate(month)
	return ConsumerID(consumer) + "." + fmt.Sprintf("%04d%02d", y, int(m)) + "." + plan
}

func slideKey(consumer, plan string) string { return ConsumerID(consumer) + ".s." + plan }

// monthDoc is a consumer's month on a plan.
type monthDoc struct {
	Consumer string                `json:"consumer"`
	Plan     string                `json:"plan"`
	Month    string                `json:"month"`
	Nodes    map[string]*monthNode `json:"nodes"`
}

type monthNode struct {
	// Take is the gateway's tokens of the month window.
	Take int64 `json:"take,omitempty"`
	// Days by day of the month ("01".."31").
	Days map[string]*dayNode `json:"days,omitempty"`
	// Seen is when the gateway last wrote (Unix ms).
	Seen int64 `json:"seen"`
}

type dayNode struct {
	Take     int64 `json:"take,omitempty"`
	Admitted int64 `json:"admitted,omitempty"`
	Refused  int64 `json:"refused,omitempty"`
}

// slideDoc is a consumer's sliding windows on a plan.
type slideDoc struct {
	Consumer string                `json:"consumer"`
	Plan     string                `json:"plan"`
	Nodes    map[string]*slideNode `json:"nodes"`
}

type slideNode struct {
	// Minute and Hour are tokens by charged step (Unix seconds, Unix
	// minutes).
	Minute map[string]int64 `json:"minute,omitempty"`
	Hour   map[string]int64 `json:"hour,omitempty"`
	Seen   int64            `json:"seen"`
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

func dayOfMonth(id int64) string {
	_, _, d := civilDate(id)
	return fmt.Sprintf("%02d", d)
}

// errConflict: another gateway wrote the document first.
var errConflict = errors.New("conflict")

// casDoc reads key, lets change modify the decoded document (v, a
// pointer to a zero value to fill), and writes it back if its revision is
// unchanged; on a conflict it tries again. change returns false to write
// nothing. after runs once the write succeeded.
func (f *Fleet) casDoc(key string, v any, change func(found bool) (write bool, err error)) error {
	deadline := time.Now().Add(opTimeout)
	for attempt := 0; ; attempt++ {
		err := func() error {
			ctx, cancel := context.WithDeadline(f.ctx, deadline)
			defer cancel()
			kv, err := f.bucket(ctx)
			if err != nil {
				return err
			}
			var rev uint64
			found := false
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
			write, err := change(found)
			if err != nil || !write {
				return err
			}
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
		}()
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

// errContention: the gateways wrote one document so often that this one
// could not within opTimeout (NATS answers: the fleet stays available).
var errContention = errors.New("too many conflicting writes")

// process writes the slot's usage and tokens, returns idle leases and
// takes the leases its windows need.
func (f *Fleet) process(sl *slot) error {
	p := sl.fl.plan.Load()
	if p == nil {
		return nil
	}
	now := f.now()
	sn := f.s.periods(now)
	if err := f.processMonth(sl, p, now, sn); err != nil {
		return err
	}
	for _, l := range p.Limits {
		if !l.Unit.Calendar() {
			return f.processSliding(sl, p, now)
		}
	}
	return nil
}

// grant is a lease decided for a window, applied once written.
type grant struct {
	u     Unit
	inst  int64
	n     int64
	debt  int64 // debt included in the written take, cleared once written
	fresh bool  // a new lease (sliding: a new charged step)
}

// leasing reports whether the gateway takes leases at now: the counts
// answer and it is not holding after an outage.
func (f *Fleet) leasing(now time.Time) bool {
	return f.available.Load() && now.UnixNano() >= f.holdTill.Load()
}

// leaseSize is the tokens of a new lease: enough for two sync intervals
// at the slot's rate (at least 10), at most max_lease, at most the
// remaining quota over twice the gateways.
func (f *Fleet) leaseSize(remaining int64, rate float64) int64 {
	if !f.leasing(f.now()) {
		return 0 // after an outage: the others' writes first
	}
	n := max(f.nodes.Load(), 1)
	want := int64(rate*2*f.o.SyncInterval.Seconds()) + 1
	want = max(want, min(10, f.o.MaxLease))
	want = min(want, f.o.MaxLease)
	limit := max(remaining/(2*n), 1)
	return max(min(want, limit, remaining), 0)
}

// processMonth runs the month document's operation.
func (f *Fleet) processMonth(sl *slot, p *Plan, now time.Time, sn *calSnap) error {
	s := f.s
	key := monthKey(sl.key.consumer, p.Name, sn.month.ID)
	nowNs := now.UnixNano()
	idle := nowNs-sl.used.Load() > int64(f.o.SyncInterval)
	leasing := f.leasing(now)
	downAt := f.lastDown.Load()
	var grants []grant
	var doc monthDoc
	var othersTake, othersAdm [Month + 1]int64
	hold := false
	err := f.casDoc(key, &doc, func(bool) (bool, error) {
		grants = grants[:0]
		if doc.Nodes == nil {
			doc.Nodes = map[string]*monthNode{}
		}
		doc.Consumer, doc.Plan, doc.Month = sl.key.consumer, p.Name, MonthString(sn.month.ID)
		me := doc.Nodes[f.o.Node]
		if me == nil {
			me = &monthNode{}
			doc.Nodes[f.o.Node] = me
		}
		if me.Days == nil {
			me.Days = map[string]*dayNode{}
		}
		today := dayOfMonth(sn.day.ID)
		othersTake, othersAdm = [Month + 1]int64{}, [Month + 1]int64{}
		seen := func(yield func(int64) bool) {
			for name, n := range doc.Nodes {
				if name != f.o.Node && !yield(n.Seen) {
					return
				}
			}
		}
		f.countNodes(len(doc.Nodes), seen, now)
		hold = f.othersPending(seen, now)
		for name, n := range doc.Nodes {
			if name == f.o.Node {
				continue
			}
			othersTake[Month] += n.Take
			for d, dn := range n.Days {
				othersAdm[Month] += dn.Admitted
				if d == today {
					othersTake[Day] += dn.Take
					othersAdm[Day] += dn.Admitted
				}
			}
		}
		sl.mu.Lock()
		defer sl.mu.Unlock()
		// the day's usage (and every day of the month after an outage)
		days := []int64{sn.day.ID}
		if !sl.fl.resynced {
			days = days[:0]
			for id := s.Calendar().Day(sn.month.Start).ID; id <= sn.day.ID; id++ {
				days = append(days, id)
			}
		} else if y := sn.day.ID - 1; MonthOfDay(y) == sn.month.ID {
			days = append(days, y)
		}
		for _, id := range days {
			a, r := s.dayCounts(sl.idx, id)
			dd := dayOfMonth(id)
			dn := me.Days[dd]
			if dn == nil {
				if a == 0 && r == 0 {
					continue
				}
				dn = &dayNode{}
				me.Days[dd] = dn
			}
			dn.Admitted, dn.Refused = a, r
		}
		rate := 0.0
		if sl.fl.lastOp != 0 && nowNs > sl.fl.lastOp {
			a, _ := s.dayCounts(sl.idx, sn.day.ID)
			rate = float64(a-sl.fl.lastDay) / (float64(nowNs-sl.fl.lastOp) / 1e9)
		}
		for _, u := range []Unit{Day, Month} {
			l, limited := p.Limit(u)
			inst := instOf(u, now, sn)
			iw, tw, lw, dw := s.lw(sl.idx, u, wInst), s.lw(sl.idx, u, wTake), s.lw(sl.idx, u, wLeft), s.lw(sl.idx, u, wDebt)
			if ld(iw) != inst {
				// a new period: the old one's tokens no longer matter
				st(iw, inst)
				st(tw, 0)
				st(lw, 0)
				st(dw, 0)
			}
			if idle || !limited {
				// give back what is not used
				if left := ld(lw); left > 0 {
					add(lw, -left)
					add(tw, -left)
				}
			}
			g := grant{u: u, inst: inst, debt: ld(dw)}
			if limited && !idle && !hold {
				k := &sl.fl.known[u]
				left := ld(lw)
				if left == 0 || left <= k.lastLease/2 {
					remaining := l.N - othersTake[u] - ld(tw)
					g.n = f.leaseSize(remaining, rate)
				}
			}
			take := ld(tw) + g.n
			if u == Month {
				me.Take = take
			} else {
				dn := me.Days[today]
				if dn == nil {
					dn = &dayNode{}
					me.Days[today] = dn
				}
				dn.Take = take
			}
			grants = append(grants, g)
		}
		me.Seen = now.UnixMilli()
		return true, nil
	})
	if err != nil {
		return err
	}
	if hold {
		f.holdFor(now)
	}
	interrupted := f.interrupted(downAt)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, g := range grants {
		l, limited := p.Limit(g.u)
		k := &sl.fl.known[g.u]
		if interrupted {
			g.n = 0
		}
		if ld(s.lw(sl.idx, g.u, wInst)) == g.inst {
			add(s.lw(sl.idx, g.u, wTake), g.n)
			add(s.lw(sl.idx, g.u, wLeft), g.n)
			add(s.lw(sl.idx, g.u, wDebt), -g.debt)
		}
		k.inst, k.others, k.othersAdm = g.inst, othersTake[g.u], othersAdm[g.u]
		if leasing && !hold && !interrupted {
			// (a read while the others' alone admissions may not be
			// written yet is no ground for a new share)
			k.reads++
		}
		if g.n > 0 {
			k.lastLease = g.n
		}
		k.exhausted = limited && g.n == 0 && ld(s.lw(sl.idx, g.u, wLeft)) == 0 &&
			l.N-othersTake[g.u]-ld(s.lw(sl.idx, g.u, wTake)) <= 0
		k.recheck = now.UnixNano() + int64(f.o.SyncInterval)
	}
	a, _ := s.dayCounts(sl.idx, sn.day.ID)
	sl.fl.lastOp, sl.fl.lastDay, sl.fl.resynced = now.UnixNano(), a, true
	return nil
}

// processSliding runs the sliding windows' document operation.
func (f *Fleet) processSliding(sl *slot, p *Plan, now time.Time) error {
	s := f.s
	key := slideKey(sl.key.consumer, p.Name)
	nowNs := now.UnixNano()
	idle := nowNs-sl.used.Load() > int64(f.o.SyncInterval)
	leasing := f.leasing(now)
	downAt := f.lastDown.Load()
	var grants []grant
	var doc slideDoc
	var others [Month + 1]int64
	var resets [Month + 1]int64
	err := f.casDoc(key, &doc, func(bool) (bool, error) {
		grants = grants[:0]
		others, resets = [Month + 1]int64{}, [Month + 1]int64{}
		if doc.Nodes == nil {
			doc.Nodes = map[string]*slideNode{}
		}
		doc.Consumer, doc.Plan = sl.key.consumer, p.Name
		me := doc.Nodes[f.o.Node]
		if me == nil {
			me = &slideNode{}
			doc.Nodes[f.o.Node] = me
		}
		sl.mu.Lock()
		defer sl.mu.Unlock()
		for _, l := range p.Limits {
			u := l.Unit
			if u.Calendar() {
				continue
			}
			cur := stepOf(now, u)
			mine := me.steps(u)
			// drop the steps that left the window
			for k := range mine {
				if st, err := strconv.ParseInt(k, 10, 64); err != nil || st < cur-ringSteps-1 {
					delete(mine, k)
				}
			}
			iw, tw, lw, dw := s.lw(sl.idx, u, wInst), s.lw(sl.idx, u, wTake), s.lw(sl.idx, u, wLeft), s.lw(sl.idx, u, wDebt)
			li := ld(iw)
			valid := leaseValid(u, li, cur)
			k := &sl.fl.known[u]
			want := !idle && (!valid || ld(lw) == 0 || ld(lw) <= k.lastLease/2 || li == cur)
			c := cur + slideValidity - 1
			// the current lease's final tokens when it ends, idles or
			// gives way to a new one
			if (!valid || idle || want && c != li) && ld(lw) > 0 {
				left := ld(lw)
				add(lw, -left)
				add(tw, -left)
			}
			if li != 0 && li >= cur-ringSteps-1 {
				if t := ld(tw); t > 0 {
					mine[strconv.FormatInt(li, 10)] = t
				} else {
					delete(mine, strconv.FormatInt(li, 10))
				}
			}
			g := grant{u: u, inst: li, debt: ld(dw)}
			// the fleet's count: every step from the window's oldest to
			// the last charged one
			var byStep = map[int64]int64{}
			var used int64
			for name, n := range doc.Nodes {
				for key, t := range n.steps(u) {
					stp, err := strconv.ParseInt(key, 10, 64)
					if err != nil || stp < cur-ringSteps {
						continue
					}
					used += t
					byStep[stp] += t
					if name != f.o.Node {
						others[u] += t
					}
				}
			}
			if want {
				if n := f.leaseSize(l.N-used, 0); n > 0 {
					g.n, g.fresh, g.inst = n, c != li, c
					mine[strconv.FormatInt(c, 10)] += n
				}
			}
			// when the window next admits: when enough steps leave it
			steps := make([]int64, 0, len(byStep))
			for stp := range byStep {
				steps = append(steps, stp)
			}
			sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
			drop, gone := used-l.N+1, int64(0)
			for _, stp := range steps {
				gone += byStep[stp]
				if gone >= max(drop, 1) {
					resets[u] = (stp + ringSteps + 1) * int64(stepLen(u))
					break
				}
			}
			grants = append(grants, g)
		}
		me.Seen = now.UnixMilli()
		return true, nil
	})
	if err != nil {
		return err
	}
	interrupted := f.interrupted(downAt)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, g := range grants {
		k := &sl.fl.known[g.u]
		if interrupted {
			g.n = 0
		}
		iw, tw, lw, dw := s.lw(sl.idx, g.u, wInst), s.lw(sl.idx, g.u, wTake), s.lw(sl.idx, g.u, wLeft), s.lw(sl.idx, g.u, wDebt)
		add(dw, -min(g.debt, ld(dw)))
		switch {
		case g.n > 0 && g.fresh:
			st(iw, g.inst)
			st(tw, g.n)
			st(lw, g.n)
			st(dw, 0)
		case g.n > 0:
			add(tw, g.n)
			add(lw, g.n)
		}
		k.inst, k.others, k.reset = g.inst, others[g.u], resets[g.u]
		if cur := stepOf(now, g.u); !leaseValid(g.u, g.inst, cur) {
			// no lease in hand, or none that serves this step: the
			// read is of the current step's window (so a full window
			// refuses at once, and a share decided later is of what
			// this read found left, not of the whole limit)
			k.inst = cur + slideValidity - 1
		}
		if leasing && !interrupted {
			k.reads++
		}
		if g.n > 0 {
			k.lastLease = g.n
		}
		k.exhausted = g.n == 0 && ld(lw) == 0 && !idle && !interrupted
		k.recheck = min(now.UnixNano()+int64(f.o.SyncInterval), max(resets[g.u], now.UnixNano()))
	}
	return nil
}

// countNodes raises the count of gateways to those of a document that
// wrote in the last minute (the heartbeats may not have seen them yet).
func (f *Fleet) countNodes(n int, seen func(func(int64) bool), now time.Time) {
	if int64(n) <= f.nodes.Load() {
		return
	}
	fresh := int64(1) // this gateway
	for ms := range seen {
		if now.UnixMilli()-ms < int64(time.Minute/time.Millisecond) {
			fresh++
		}
	}
	for {
		cur := f.nodes.Load()
		if fresh <= cur || f.nodes.CompareAndSwap(cur, fresh) {
			return
		}
	}
}

// pendingFor is how long after NATS is back a gateway waits for the
// others' writes of what they admitted alone; one that has not written by
// then is taken for gone (a gateway killed during the outage).
const pendingFor = time.Minute

// othersPending reports whether another gateway that wrote a document in
// the minute before this gateway's last outage, or during it, has not
// written it since NATS is back for this one (seen: the other gateways'
// last writes, Unix ms): what it admitted alone is not in the document
// yet (its outage may have begun later than this one's), and a lease
// taken now could exceed the quota. Only within pendingFor of NATS being
// back.
func (f *Fleet) othersPending(seen func(func(int64) bool), now time.Time) bool {
	down, up := f.lastDown.Load(), f.upSince.Load()
	if down == 0 || up < down || now.UnixNano()-up > int64(pendingFor) {
		return false
	}
	downMs, upMs := down/int64(time.Millisecond), up/int64(time.Millisecond)
	for ms := range seen {
		if ms < upMs && downMs-ms < int64(time.Minute/time.Millisecond) {
			return true
		}
	}
	return false
}

// interrupted reports whether an outage began while a document's
// operation was under way (downAt: the last outage's start when it
// began): its read may predate what the others admit alone from then on,
// so it grants no lease and is no ground for a new share. The tokens it
// wrote for a lease not taken are given back by the next write, which
// counts what this gateway holds.
func (f *Fleet) interrupted(downAt int64) bool {
	return f.lastDown.Load() != downAt
}

// holdFor keeps this gateway deciding on its share, without leases, for
// another sync interval from now.
func (f *Fleet) holdFor(now time.Time) {
	till := now.UnixNano() + int64(f.o.SyncInterval)
	for {
		cur := f.holdTill.Load()
		if till <= cur || f.holdTill.CompareAndSwap(cur, till) {
			return
		}
	}
}

// heartbeat writes this gateway's heartbeat and counts the fresh ones.
func (f *Fleet) heartbeat(now time.Time) error {
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	kv, err := f.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, "n."+nodeKey(f.o.Node), []byte(strconv.FormatInt(now.UnixMilli(), 10))); err != nil {
		return err
	}
	lister, err := kv.ListKeysFiltered(ctx, "n.*")
	if err != nil {
		return err
	}
	var n int64
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			// a count from part of the heartbeats would widen the
			// shares: keep the last one
			_ = lister.Stop()
			return err
		}
		ms, err := strconv.ParseInt(string(e.Value()), 10, 64)
		if err == nil && now.UnixMilli()-ms < int64(time.Minute/time.Millisecond) {
			n++
		}
	}
	_ = lister.Stop()
	f.nodes.Store(max(n, 1))
	return nil
}

// nodeKey makes a node name a valid key token.
func nodeKey(node string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, node)
}

// current adds the fleet's view to a slot's counts: the other gateways'
// admitted requests as last read.
func (f *Fleet) current(sl *slot, sn *calSnap, u *SlotUsage) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if k := sl.fl.known[Day]; k.inst == sn.day.ID {
		u.Day += k.othersAdm
	}
	if k := sl.fl.known[Month]; k.inst == sn.month.ID {
		u.Month += k.othersAdm
	}
}

// Usage reads a consumer's daily usage from the fleet's documents, from
// day from to day to (inclusive), every gateway's counts added up; this
// gateway's own are its store's (never older than what it wrote).
func (f *Fleet) Usage(consumer string, from, to int64) ([]DayUsage, error) {
	consumer = NormalizeConsumer(consumer)
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	kv, err := f.bucket(ctx)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(ctx, ConsumerID(consumer)+".>")
	if err != nil {
		return nil, err
	}
	type pm struct {
		plan  string
		month int64
	}
	var keys []pm
	for k := range lister.Keys() {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) != 3 || len(parts[1]) != 6 {
			continue
		}
		y, err1 := strconv.Atoi(parts[1][:4])
		m, err2 := strconv.Atoi(parts[1][4:])
		if err1 != nil || err2 != nil || m < 1 || m > 12 {
			continue
		}
		month := MonthID(y, time.Month(m))
		if month < MonthOfDay(from) || month > MonthOfDay(to) {
			continue
		}
		keys = append(keys, pm{parts[2], month})
	}
	_ = lister.Stop()
	type dk struct {
		day  int64
		plan string
	}
	sum := map[dk]*DayUsage{}
	for _, k := range keys {
		e, err := kv.Get(ctx, monthKey(consumer, k.plan, k.month))
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, err
		}
		var doc monthDoc
		if err := json.Unmarshal(e.Value(), &doc); err != nil || doc.Consumer != consumer {
			continue
		}
		y, m := monthDate(k.month)
		own := f.s.lookup(k.plan, consumer)
		for name, n := range doc.Nodes {
			for dd, dn := range n.Days {
				d, err := strconv.Atoi(dd)
				if err != nil {
					continue
				}
				id := civilDays(y, m, d)
				if id < from || id > to {
					continue
				}
				a, r := dn.Admitted, dn.Refused
				if name == f.o.Node && own != nil {
					la, lr := f.s.dayCounts(own.idx, id)
					a, r = max(a, la), max(r, lr)
				}
				u := sum[dk{id, k.plan}]
				if u == nil {
					u = &DayUsage{Date: DateString(id), Plan: k.plan}
					sum[dk{id, k.plan}] = u
				}
				u.Admitted += a
				u.Refused += r
			}
		}
	}
	// this gateway's days not written yet
	for _, plan := range f.s.Plans(consumer) {
		own := f.s.lookup(plan, consumer)
		if own == nil {
			continue
		}
		for id := from; id <= to; id++ {
			if _, ok := sum[dk{id, plan}]; ok {
				continue
			}
			if a, r := f.s.dayCounts(own.idx, id); a != 0 || r != 0 {
				sum[dk{id, plan}] = &DayUsage{Date: DateString(id), Plan: plan, Admitted: a, Refused: r}
			}
		}
	}
	out := make([]DayUsage, 0, len(sum))
	for _, u := range sum {
		if u.Admitted != 0 || u.Refused != 0 {
			out = append(out, *u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Date != out[j].Date {
			return out[i].Date < out[j].Date
		}
		return out[i].Plan < out[j].Plan
	})
	return out, nil
}
