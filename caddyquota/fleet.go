package caddyquota

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"runtime/debug"
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
//	<consumer>.<YYYYMM>.<plan>  the month's document (fleetcalendar.go):
//	                            per gateway, its tokens of the month and
//	                            of each day, and each day's admitted and
//	                            refused requests
//	<consumer>.s.<plan>         the sliding windows' document
//	                            (fleetsliding.go): per gateway, its
//	                            tokens per step
//	n.<gateway>                 a gateway's heartbeat (how many share)
//
// A gateway writes only its own entry of a document, always its absolute
// values, with a compare-and-set on the document's revision (docOp in
// fleetlease.go): a retried or repeated write counts nothing twice. Its
// tokens ("take") are what it admitted plus what it holds unused; the
// tokens left in hand and those admitted while NATS could not be reached
// ("debt") live in the store's leases.cnt beside the counts, so a restart
// or a SIGKILL loses none.
//
// A lease is never more than max_lease, nor more than the quota left
// divided by twice the gateways that share it: together they can never
// take more than the quota, so in normal operation the fleet admits at
// most the quota, exactly.
//
// This file is the link itself: its options, its state with NATS
// (available, deciding alone, holding after an outage), the workers that
// run the documents' operations, the ticker and the heartbeat.
// fleetlease.go decides requests from the leases and runs an operation;
// fleetcalendar.go and fleetsliding.go are the two documents.

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
	// Plan returns the plan of a name (nil: none), for the slots written
	// when the link starts, before a request names their plan.
	Plan func(name string) *Plan
	// Apart: the counts are a handler's own (Counts), apart from the
	// quota app's; the link leaves gateway_quota_fleet_available to the
	// app's.
	Apart bool
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
	// Publish and Subscribe carry the fleet's requests to read (core
	// NATS, subject <bucket>.read.<node>): a gateway whose lease waits
	// for another's read asks that one to read now. Without them it waits
	// for that gateway's next operation (at most a sync interval while it
	// serves the consumer).
	Publish   func(subject string, data []byte) error
	Subscribe func(subject string, handle func(data []byte)) (unsubscribe func(), err error)
}

// readRequest is the message that asks a gateway to read a slot's
// documents now.
type readRequest struct {
	Consumer string `json:"consumer"`
	Plan     string `json:"plan"`
}

// readSubject is the subject of a node's read requests.
func (f *Fleet) readSubject(node string) string {
	return f.o.Bucket + ".read." + nodeKey(node)
}

// askToRead asks node to read the slot's documents now (best effort: a
// gateway that does not hear it reads at its next operation).
func (f *Fleet) askToRead(sl *slot, node string) {
	if f.conn.Publish == nil || node == "" {
		return
	}
	data, _ := json.Marshal(readRequest{Consumer: sl.key.consumer, Plan: sl.key.plan})
	_ = f.conn.Publish(f.readSubject(node), data)
}

// onReadRequest runs an operation on the slot another gateway asked this
// one to read.
func (f *Fleet) onReadRequest(data []byte) {
	var rr readRequest
	if json.Unmarshal(data, &rr) != nil {
		return
	}
	if sl := f.s.lookup(rr.Plan, rr.Consumer); sl != nil && sl.fl.plan.Load() != nil {
		f.enqueue(sl)
	}
}

// Fleet is a store's link to the fleet's shared counts.
type Fleet struct {
	s      *Store
	o      FleetOptions
	conn   FleetConn
	logger *zap.Logger
	now    func() time.Time

	policy atomic.Pointer[fleetPolicy]

	kvMu      sync.Mutex
	kv        jetstream.KeyValue
	bindFails uint // the bind attempts that failed in a row (kvMu)

	available atomic.Bool
	// reached: an operation has answered since the link started. Until
	// then an operation's error does not start an outage while requests
	// wait for it: they wait on (their operation tried again in a
	// moment) up to lease_wait, whose end starts it (startErr: the last
	// such error, for the log)
	reached  atomic.Bool
	startErr atomic.Pointer[error]
	// startHold: the hold after an outage (holdTill) is the one after
	// the link's first answer: the gateway has no read to take a share
	// of, so its requests wait for the hold's end (acquire)
	startHold atomic.Bool
	nodes     atomic.Int64 // gateways with a fresh heartbeat, at least 1
	downSince atomic.Int64 // Unix ns the counts became unreachable; 0 while available
	lastDown  atomic.Int64 // Unix ns of the last time they did
	holdTill  atomic.Int64 // Unix ns until which no lease is taken after an outage
	upSince   atomic.Int64 // Unix ns the counts last became reachable again
	// lastRead is when the last operation that wrote a document began
	// (Unix ns); readBeforeDown is what it was as the last outage began:
	// the last moment this gateway read the others' entries before it
	readBeforeDown atomic.Int64
	lastRead       atomic.Int64
	beatErr        errorLog

	qmu     sync.Mutex
	queue   []*slot
	signal  chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	removeR func()
	unsub   func()
}

type fleetPolicy struct {
	failClosed bool
	share      float64
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
	f.gauge(1)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if conn.OnReconnect != nil {
		f.removeR = conn.OnReconnect(func() { f.wake() })
	}
	if conn.Subscribe != nil {
		unsub, err := conn.Subscribe(f.readSubject(o.Node), f.onReadRequest)
		if err != nil {
			f.logger.Warn("quota fleet: not listening to read requests (a lease that waits for this gateway's read waits for its next operation)", zap.Error(err))
		} else {
			f.unsub = unsub
		}
	}
	for i := 0; i < 4; i++ {
		f.wg.Add(1)
		go f.worker()
	}
	f.wg.Add(1)
	go f.ticker()
	s.fleet.Store(f)
	f.resyncStored()
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
	if f.unsub != nil {
		f.unsub()
	}
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
		f.gauge(1)
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
	f.startHold.Store(false)
	now := f.now().UnixNano()
	f.readBeforeDown.Store(f.lastRead.Load())
	f.downSince.Store(now)
	f.lastDown.Store(now)
	f.gauge(0)
	p := f.policy.Load()
	mode := FailOpen
	if p.failClosed {
		mode = FailClosed
	}
	f.logger.Warn("quota fleet counts unreachable: this gateway admits its share of each consumer's remaining quota alone",
		zap.String("on_unavailable", mode), zap.Float64("share", f.share()), zap.Error(err))
}

// gauge sets gateway_quota_fleet_available (the quota app's link only).
func (f *Fleet) gauge(v float64) {
	if !f.o.Apart {
		fleetAvailable.Set(v)
	}
}

// share is the share of the remaining quota a gateway admits alone.
func (f *Fleet) share() float64 {
	if s := f.policy.Load().share; s > 0 {
		return s
	}
	return 1 / float64(max(f.nodes.Load(), 1))
}

// enqueue asks a worker to run an operation on the slot (once at a time).
func (f *Fleet) enqueue(sl *slot) {
	if nb := sl.fl.notBefore.Load(); nb != 0 {
		if wait := time.Duration(nb - time.Now().UnixNano()); wait > 0 {
			// its lease waits for another gateway's read: again in a
			// moment, once
			if sl.fl.timed.CompareAndSwap(false, true) {
				time.AfterFunc(wait, func() {
					sl.fl.timed.Store(false)
					f.enqueue(sl)
				})
			}
			return
		}
	}
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
		if f.starting(sl, err) {
			return
		}
		f.setAvailable(false, err)
		return
	}
	if !f.reached.Swap(true) && !f.available.Load() {
		f.startHold.Store(true)
	}
	f.setAvailable(true, nil)
}

// startHoldLeft is what is left at now of the hold after the link's
// first answer (0: none, or the hold is another outage's).
func (f *Fleet) startHoldLeft(now time.Time) time.Duration {
	if !f.startHold.Load() || !f.available.Load() {
		return 0
	}
	return max(time.Duration(f.holdTill.Load()-now.UnixNano()), 0)
}

// starting handles an operation's error while the link has never reached
// the counts and requests wait for the operation: a bucket just created
// answers "no responders" until its stream has a leader, and gateways
// starting together create it together. The requests wait on, up to
// lease_wait (the outage begins when that ends with no lease: acquire),
// and the operation runs again in a moment; a gateway that never reached
// the counts has no share to decide on (its share is of a read it never
// made), so deciding alone at the first error would only refuse them.
// False once the link has reached the counts, while no request waits
// (the ticker's and the restart's operations: the outage begins), or
// once the wait has started the outage.
func (f *Fleet) starting(sl *slot, err error) bool {
	if f.reached.Load() || sl.fl.waiters.Load() == 0 || !f.available.Load() {
		return false
	}
	f.startErr.Store(&err)
	sl.fl.notBefore.Store(time.Now().Add(f.retryPause()).UnixNano())
	if ce := f.logger.Check(zap.DebugLevel, "quota fleet: counts not reached yet since the link started: the waiting requests wait on"); ce != nil {
		ce.Write(zap.String("consumer", sl.key.consumer), zap.String("plan", sl.key.plan), zap.Error(err))
	}
	return true
}

// retryPause is how long a slot's next operation waits after one that
// must be tried again (a lease that waits for another gateway's read, a
// start whose counts do not answer yet): at most 50 ms, an eighth of a
// sync interval and of lease_wait, at least 5 ms.
func (f *Fleet) retryPause() time.Duration {
	return max(min(f.o.SyncInterval/8, f.o.LeaseWait/8, 50*time.Millisecond), 5*time.Millisecond)
}

// unanswered is the error that starts the outage when a request waited
// lease_wait with no lease and no answer.
func (f *Fleet) unanswered() error {
	if !f.reached.Load() {
		if e := f.startErr.Load(); e != nil {
			return fmt.Errorf("no answer within lease_wait since the link started: %w", *e)
		}
		return errors.New("no answer within lease_wait since the link started")
	}
	return errors.New("no answer within lease_wait")
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
		if l := f.s.lease(sl.idx, u); l.left.Load() > 0 || l.debt.Load() > 0 {
			return true
		}
	}
	return false
}

// resyncStored runs an operation on every slot of the store that counted
// requests today or yesterday, or holds tokens: a gateway started again
// (after a SIGKILL, say) writes what it admitted since its last write and
// gives back the lease it held, whether or not the consumer's requests
// reach it again. (Before, only a slot used since the start was written:
// a gateway killed with unwritten admissions and no request of that
// consumer afterwards left them out of the fleet's usage for good.)
func (f *Fleet) resyncStored() {
	s := f.s
	sn := s.periods(f.now())
	days := []*table{}
	for _, id := range []int64{sn.day.ID, sn.day.ID - 1} {
		if _, err := os.Stat(s.dayPath(id)); err != nil {
			continue
		}
		if t, err := s.dayTable(id); err == nil {
			days = append(days, t)
		}
	}
	for _, sl := range s.allSlots() {
		counted := false
		for _, t := range days {
			if t.load(sl.idx, 0) != 0 || t.load(sl.idx, 1) != 0 {
				counted = true
			}
		}
		if !counted && !f.holds(sl) {
			continue
		}
		p := (*Plan)(nil)
		if f.o.Plan != nil {
			p = f.o.Plan(sl.key.plan)
		}
		if p == nil {
			// a plan no longer configured: its usage is written and
			// its calendar tokens given back (a plan without limits)
			p = &Plan{Name: sl.key.plan}
		}
		sl.fl.plan.CompareAndSwap(nil, p)
		f.enqueue(sl)
	}
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

// leasing reports whether the gateway takes leases at now: the counts
// answer and it is not holding after an outage.
func (f *Fleet) leasing(now time.Time) bool {
	return f.available.Load() && now.UnixNano() >= f.holdTill.Load()
}

// countNodes raises the count of gateways to those of a document that
// wrote in the last minute (n: its entries; others: the others' stamps;
// the heartbeats may not have seen them yet).
func (f *Fleet) countNodes(n int, others iter.Seq[*nodeStamp], now time.Time) {
	if int64(n) <= f.nodes.Load() {
		return
	}
	fresh := int64(1) // this gateway
	for o := range others {
		if now.UnixMilli()-o.Seen < int64(time.Minute/time.Millisecond) {
			fresh++
		}
	}
	raiseTo(&f.nodes, fresh)
}

// pendingFor is how long after NATS is back a gateway waits for the
// others' writes of what they admitted alone; one that has not written by
// then is taken for gone (a gateway killed during the outage).
const pendingFor = time.Minute

// othersPending reports whether this gateway, back from an outage, must
// hold on (no lease, its share only) for another gateway's write of
// what that one admitted alone: a gateway whose entry has not changed
// since NATS is back for this one (its outage may have begun later than
// this one's), and a lease taken now could exceed the quota. Only within
// pendingFor of NATS being back, and only for a gateway that
//
//   - was not silent for an ack window already when this gateway last
//     read the counts before its outage (or wrote during the outage):
//     silent that long, it was no longer one whose reads the leases
//     waited for (mayLease), so it was already leased past while NATS
//     answered; what it admits alone, if alive, is a partial outage's,
//     whatever this gateway does now. (A gateway SIGKILLed seconds before
//     a survivor's own short outage kept the survivor holding for the
//     minute, with the quota left: 8 of 50 TestQuotaFleetKill runs under
//     load. A link that never read before its outage waits, as before,
//     for every gateway that wrote in the minute before it.)
//   - and did not last write passive while leasing (it held nothing,
//     and took leases): the leases did not wait for its reads either
//     (mayLease), so it was leased past as above; and such a read is no
//     ground for a share (learned, readFresh), so alone it admits nothing
//     with fail_closed. (A gateway killed passive within an ack window of
//     the survivors' own outage kept both holding for the minute, each
//     waiting for it and so neither leasing: a fresh-clone CI run of
//     TestFleetHoldAfterKill. A passive write while holding after an
//     outage still counts: that gateway's share stays fixed on its read
//     before, see fixShare.)
//
// and not once another gateway has written taking leases since this one
// is back: NATS answers the fleet and that one leases past the silent
// ones, so holding here would keep nothing from the quota. (Seen is the
// writer's clock: as for the ack window, the clocks must agree to well
// within a sync interval.)
func (f *Fleet) othersPending(others iter.Seq[*nodeStamp], now time.Time) bool {
	down, up := f.lastDown.Load(), f.upSince.Load()
	if down == 0 || up < down || now.UnixNano()-up > int64(pendingFor) {
		return false
	}
	upMs := up / int64(time.Millisecond)
	ref, silentFor := down/int64(time.Millisecond), int64(time.Minute/time.Millisecond)
	if read := f.readBeforeDown.Load(); read != 0 {
		ref, silentFor = read/int64(time.Millisecond), f.ackWindow().Milliseconds()
	}
	pending := false
	for o := range others {
		if o.Seen >= upMs && o.Leasing {
			return false
		}
		if o.Seen < upMs && !(o.Passive && o.Leasing) && ref-o.Seen < silentFor {
			pending = true
		}
	}
	return pending
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
	raiseTo(&f.holdTill, now.UnixNano()+int64(f.o.SyncInterval))
}

// raiseTo raises a to v unless it is already at least v.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
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
	n, err := f.freshBeats(ctx, kv, now)
	if err != nil {
		return err
	}
	f.nodes.Store(max(n, 1))
	return nil
}

// freshBeats counts the heartbeats in kv less than a minute old at now.
// A listing cut short is an error, not a smaller count (which would widen
// the shares): the lister ends without an error when its context expires
// (NATS went away meanwhile, seen while a cluster shut down: the count
// fell to 1 and the share to the whole remaining quota), and this
// gateway's own heartbeat, just written, must be in it.
func (f *Fleet) freshBeats(ctx context.Context, kv jetstream.KeyValue, now time.Time) (int64, error) {
	lister, err := kv.ListKeysFiltered(ctx, "n.*")
	if err != nil {
		return 0, err
	}
	defer func() { _ = lister.Stop() }()
	me := "n." + nodeKey(f.o.Node)
	var n int64
	self := false
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			// a count from part of the heartbeats would widen the
			// shares: keep the last one
			return 0, err
		}
		self = self || k == me
		ms, err := strconv.ParseInt(string(e.Value()), 10, 64)
		if err == nil && now.UnixMilli()-ms < int64(time.Minute/time.Millisecond) {
			n++
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("listing the heartbeats: %w", err)
	}
	if !self {
		return 0, errors.New("listing the heartbeats: cut short (this gateway's own is missing)")
	}
	return n, nil
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
	// an attempt is bounded: while other gateways create the bucket
	// (gateways starting together) the stream's info can go unanswered
	// until the deadline (its leader not elected yet), where the next
	// attempt finds it at once; so a request at the start sees a second
	// one within its lease_wait. The bound doubles with each failure, up
	// to opTimeout (a slow NATS still binds).
	bctx, cancel := context.WithTimeout(ctx, min(max(f.o.LeaseWait/2, 250*time.Millisecond)<<f.bindFails, opTimeout))
	defer cancel()
	kv, err := natsconn.BindKV(bctx, f.conn.JetStream, jetstream.KeyValueConfig{
		Bucket:      f.o.Bucket,
		Description: "apigate quota counts: per consumer and month, each gateway's tokens and usage",
		History:     1,
		TTL:         time.Duration(retention) * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}, f.logger)
	if err != nil {
		f.bindFails = min(f.bindFails+1, 8)
		return nil, err
	}
	f.kv, f.bindFails = kv, 0
	return kv, nil
}

// ConsumerID is a consumer's part of the fleet's keys: the first 32 hex
// digits of the SHA-256 of its name.
func ConsumerID(consumer string) string {
	sum := sha256.Sum256([]byte(consumer))
	return hex.EncodeToString(sum[:16])
}
