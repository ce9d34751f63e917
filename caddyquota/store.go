package caddyquota

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyquota/quotausage"
)

// The store keeps a gateway's counts on disk, in a directory:
//
//	consumers.log        the slots' names (index.go)
//	days/YYYY-MM-DD.cnt  per slot, that day's admitted and refused requests
//	rings.cnt            per slot, the sliding minute and hour windows
//	leases.cnt           per slot, the leases of the fleet's counts (fleetlease.go)
//
// A slot is one consumer on one plan. Every count is a 64-bit word in a
// file mapped into memory (table.go), changed in place: a count is in the
// kernel's page cache as soon as it is made, before the response is
// written, so a restart or a SIGKILL of the gateway loses none; the files
// are written to the disk every sync interval (a power loss loses at most
// that much). A month's count is the sum of its days, added up when a slot
// is first used in the month.

// Defaults of the store.
const (
	DefaultMaxConsumers  = 1_000_000
	DefaultRetentionDays = 100 // more than the current and the previous month
	DefaultSyncInterval  = time.Second
	// MaxConsumerLen bounds a consumer key; a longer one is counted
	// under "sha256:" and its hash.
	MaxConsumerLen = 256
)

// OverflowConsumer is the consumer that counts, per plan, every new
// consumer once the store holds max_consumers (they share its quota).
const OverflowConsumer = "*overflow*"

const (
	dayRec    = 16   // admitted, refused
	ringRec   = 1024 // 64 minute buckets, 64 hour buckets
	leaseRec  = 128  // fleetlease.go: a windowLease per unit
	perChunk  = 4096
	ringWords = ringSize
)

// StoreOptions configure a store.
type StoreOptions struct {
	// Dir is the store's directory (created).
	Dir string
	// Calendar gives days and months (UTC when nil).
	Calendar *Calendar
	// MaxConsumers bounds the slots; default DefaultMaxConsumers.
	MaxConsumers int
	// RetentionDays is how many days of usage are kept; default
	// DefaultRetentionDays.
	RetentionDays int
	// SyncInterval is how often the files are written to the disk;
	// default DefaultSyncInterval; negative: never (tests).
	SyncInterval time.Duration
	// Logger logs what the store cannot do (nil: nothing).
	Logger *zap.Logger
}

// Store is a gateway's counts. It is safe for concurrent use.
type Store struct {
	dir       string
	maxSlots  int
	retention int
	logger    *zap.Logger

	cal  atomic.Pointer[Calendar]
	snap atomic.Pointer[calSnap]

	seed   maphash.Seed
	shards [64]shard

	mu         sync.Mutex // slot creation, the open days
	index      *os.File
	slots      atomic.Pointer[[]*slot] // by index, append-only
	byConsumer map[string][]*slot
	overflowed bool
	days       map[int64]*table
	cur        atomic.Pointer[dayRef]
	pruned     int64 // the day the old day files were last deleted for (syncLoop)
	rings      *table
	leases     *table

	fleet atomic.Pointer[Fleet] // set while the counts are shared (fleet.go)

	stop    chan struct{}
	stopped sync.WaitGroup
	closed  atomic.Bool
}

type shard struct {
	mu sync.RWMutex
	m  map[slotKey]*slot
}

type slotKey struct{ plan, consumer string }

// slot is one consumer on one plan.
type slot struct {
	idx uint32
	key slotKey

	mu      sync.Mutex
	monthID int64 // the month whose admitted count month holds; -1: none
	month   int64

	used atomic.Int64 // the last admission or refusal, Unix ns

	fl fleetSlot // fleetlease.go
}

type dayRef struct {
	id int64
	t  *table
}

type calSnap struct {
	day, month     Period
	dayLo, dayHi   int64 // day.Start, day.End in Unix ns
	dayStr, monStr string
}

// OpenStore opens (creating) the store in o.Dir.
func OpenStore(o StoreOptions) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("quota store: no directory")
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "days"), 0o700); err != nil {
		return nil, fmt.Errorf("quota store: %w", err)
	}
	s := &Store{
		dir: o.Dir, maxSlots: o.MaxConsumers, retention: o.RetentionDays, logger: o.Logger,
		seed: maphash.MakeSeed(), byConsumer: map[string][]*slot{}, days: map[int64]*table{},
		stop: make(chan struct{}),
	}
	if s.maxSlots <= 0 {
		s.maxSlots = DefaultMaxConsumers
	}
	if s.retention <= 0 {
		s.retention = DefaultRetentionDays
	}
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	if o.Calendar == nil {
		o.Calendar = NewCalendar(nil)
	}
	s.cal.Store(o.Calendar)
	for i := range s.shards {
		s.shards[i].m = map[slotKey]*slot{}
	}
	var err error
	fail := func(e error) (*Store, error) {
		s.closeFiles()
		return nil, fmt.Errorf("quota store %s: %w", o.Dir, e)
	}
	if s.rings, err = openTable(filepath.Join(o.Dir, "rings.cnt"), ringRec, perChunk/4); err != nil {
		return fail(err)
	}
	if s.leases, err = openTable(filepath.Join(o.Dir, "leases.cnt"), leaseRec, perChunk); err != nil {
		return fail(err)
	}
	f, recs, err := openIndex(filepath.Join(o.Dir, "consumers.log"))
	if err != nil {
		return fail(err)
	}
	s.index = f
	slots := make([]*slot, 0, len(recs))
	for _, r := range recs {
		sl := &slot{idx: r.slot, key: slotKey{r.plan, r.consumer}, monthID: -1}
		slots = append(slots, sl)
		s.shardOf(r.consumer).m[sl.key] = sl
		s.byConsumer[r.consumer] = append(s.byConsumer[r.consumer], sl)
	}
	s.slots.Store(&slots)
	if err := s.rings.ensure(uint32(len(slots))); err != nil {
		return fail(err)
	}
	if err := s.leases.ensure(uint32(len(slots))); err != nil {
		return fail(err)
	}
	s.pruned = s.Calendar().Day(time.Now()).ID
	s.prune(s.pruned)
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.SyncInterval > 0 {
		s.stopped.Add(1)
		go s.syncLoop(o.SyncInterval)
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Calendar returns the calendar the store counts days and months in.
func (s *Store) Calendar() *Calendar { return s.cal.Load() }

// SetCalendar changes the calendar (a config with another time zone).
func (s *Store) SetCalendar(c *Calendar) {
	if c == nil || c == s.cal.Load() {
		return
	}
	s.cal.Store(c)
	s.snap.Store(nil)
	for _, sl := range s.allSlots() {
		sl.mu.Lock()
		sl.monthID = -1
		sl.mu.Unlock()
	}
}

func (s *Store) shardOf(consumer string) *shard {
	return &s.shards[maphash.String(s.seed, consumer)&63]
}

func (s *Store) allSlots() []*slot { return *s.slots.Load() }

// periods returns the day and the month of now, cached for the day.
func (s *Store) periods(now time.Time) *calSnap {
	n := now.UnixNano()
	if sn := s.snap.Load(); sn != nil && n >= sn.dayLo && n < sn.dayHi {
		return sn
	}
	c := s.Calendar()
	sn := &calSnap{day: c.Day(now), month: c.Month(now)}
	sn.dayLo, sn.dayHi = sn.day.Start.UnixNano(), sn.day.End.UnixNano()
	sn.dayStr, sn.monStr = DateString(sn.day.ID), MonthString(sn.month.ID)
	s.snap.Store(sn)
	return sn
}

// Periods returns the day and the month of t in the store's calendar.
func (s *Store) Periods(t time.Time) (day, month Period) {
	sn := s.periods(t)
	return sn.day, sn.month
}

// NormalizeConsumer returns the name a consumer key is counted under:
// the key, or "sha256:" and the key's hash for a key longer than
// MaxConsumerLen.
func NormalizeConsumer(key string) string {
	if len(key) <= MaxConsumerLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// slotFor returns the slot of a consumer on a plan, making it (and
// recording its names on disk first) when it is new.
func (s *Store) slotFor(plan, consumer string) (*slot, error) {
	if sl := s.lookup(plan, consumer); sl != nil {
		return sl, nil
	}
	return s.newSlot(plan, NormalizeConsumer(consumer), consumer)
}

// lookup returns the slot of a consumer on a plan, if there is one.
func (s *Store) lookup(plan, consumer string) *slot {
	sh := s.shardOf(consumer)
	sh.mu.RLock()
	sl := sh.m[slotKey{plan, consumer}]
	sh.mu.RUnlock()
	return sl
}

func (s *Store) newSlot(plan, name, lookup string) (*slot, error) {
	if s.closed.Load() {
		return nil, errors.New("quota store closed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.lookup(plan, name); sl != nil { // made meanwhile, or a long key's hashed name
		return sl, nil
	}
	slots := s.allSlots()
	if len(slots) >= s.maxSlots && name != OverflowConsumer {
		if !s.overflowed {
			s.overflowed = true
			s.logger.Warn("quota store holds max_consumers: new consumers share the quota of consumer "+OverflowConsumer,
				zap.Int("max_consumers", s.maxSlots), zap.String("plan", plan))
		}
		if sl := s.lookup(plan, OverflowConsumer); sl != nil {
			return sl, nil
		}
		name = OverflowConsumer
	}
	idx := uint32(len(slots))
	if err := s.rings.ensure(idx + 1); err != nil {
		return nil, err
	}
	if err := s.leases.ensure(idx + 1); err != nil {
		return nil, err
	}
	if cur := s.cur.Load(); cur != nil {
		if err := cur.t.ensure(idx + 1); err != nil {
			return nil, err
		}
	}
	// the slot's words may hold counts of a slot whose index record was
	// lost (a power loss): start from zero
	for w := 0; w < ringRec/8; w++ {
		atomic.StoreUint64(s.rings.word(idx, w), 0)
	}
	for w := 0; w < leaseRec/8; w++ {
		atomic.StoreUint64(s.leases.word(idx, w), 0)
	}
	for _, t := range s.days {
		if t.has(idx) {
			atomic.StoreUint64(t.word(idx, 0), 0)
			atomic.StoreUint64(t.word(idx, 1), 0)
		}
	}
	if _, err := s.index.Write(appendIndexRecord(nil, indexRecord{slot: idx, plan: plan, consumer: name})); err != nil {
		return nil, fmt.Errorf("recording consumer: %w", err)
	}
	sl := &slot{idx: idx, key: slotKey{plan, name}, monthID: -1}
	// readers hold the old header, whose length hides the new element
	grown := append(slots, sl)
	s.slots.Store(&grown)
	s.byConsumer[name] = append(s.byConsumer[name], sl)
	sh := s.shardOf(name)
	sh.mu.Lock()
	sh.m[sl.key] = sl
	sh.mu.Unlock()
	if name != lookup && name != OverflowConsumer {
		// the long key finds the slot directly next time
		sh := s.shardOf(lookup)
		sh.mu.Lock()
		sh.m[slotKey{plan, lookup}] = sl
		sh.mu.Unlock()
	}
	return sl, nil
}

// dayTable returns the open table of a day, opening (creating) it.
func (s *Store) dayTable(id int64) (*table, error) {
	if cur := s.cur.Load(); cur != nil && cur.id == id {
		return cur.t, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.days[id]
	if t == nil {
		var err error
		t, err = openTable(s.dayPath(id), dayRec, perChunk)
		if err != nil {
			return nil, err
		}
		if err := t.ensure(uint32(len(s.allSlots()))); err != nil {
			t.close()
			return nil, err
		}
		s.days[id] = t
	}
	if cur := s.cur.Load(); cur == nil || id > cur.id {
		s.cur.Store(&dayRef{id: id, t: t})
		s.closeOldDays(id)
	}
	return t, nil
}

// closeOldDays closes the day tables more than two days before today
// (no request is still counting in them); s.mu is held.
func (s *Store) closeOldDays(today int64) {
	for id, t := range s.days {
		if id < today-2 {
			if err := t.close(); err != nil {
				s.logger.Error("closing a day's counts", zap.String("file", t.path), zap.Error(err))
			}
			delete(s.days, id)
		}
	}
}

func (s *Store) dayPath(id int64) string {
	return filepath.Join(s.dir, "days", DateString(id)+".cnt")
}

// prune deletes the day files older than the retention.
func (s *Store) prune(today int64) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "days"))
	if err != nil {
		return
	}
	for _, e := range entries {
		date, ok := strings.CutSuffix(e.Name(), ".cnt")
		if !ok {
			continue
		}
		id, err := ParseDate(date)
		if err != nil || id > today-int64(s.retention) {
			continue
		}
		s.mu.Lock()
		_, open := s.days[id]
		s.mu.Unlock()
		if !open {
			_ = os.Remove(filepath.Join(s.dir, "days", e.Name()))
		}
	}
}

// dayCounts returns a slot's admitted and refused counts of a day.
func (s *Store) dayCounts(idx uint32, id int64) (admitted, refused int64) {
	s.mu.Lock()
	t := s.days[id]
	s.mu.Unlock()
	if t != nil {
		return int64(t.load(idx, 0)), int64(t.load(idx, 1))
	}
	w, err := readRecordWords(s.dayPath(id), dayRec, idx, 2)
	if err != nil {
		s.logger.Error("reading a day's counts", zap.String("day", DateString(id)), zap.Error(err))
		return 0, 0
	}
	return int64(w[0]), int64(w[1])
}

// monthAdmitted adds up a slot's admitted counts of the month's days up
// to today (inclusive).
func (s *Store) monthAdmitted(idx uint32, month Period, today int64) int64 {
	first := s.Calendar().Day(month.Start).ID
	var sum int64
	for id := first; id <= today; id++ {
		a, _ := s.dayCounts(idx, id)
		sum += a
	}
	return sum
}

// AcquireAt counts one request of consumer on plan p at now, and decides
// it: admitted when every limit of the plan has room (and counted in each
// window), refused otherwise (and counted as refused). In dry run the
// request is admitted and counted even over a limit; Decision.Over says
// it would have been refused. An error (the store cannot write) decides
// nothing.
func (s *Store) AcquireAt(p *Plan, consumer string, now time.Time, dry bool) (Decision, error) {
	sl, err := s.slotFor(p.Name, consumer)
	if err != nil {
		return Decision{}, err
	}
	sn := s.periods(now)
	dt, err := s.dayTable(sn.day.ID)
	if err != nil {
		return Decision{}, err
	}
	if !dt.has(sl.idx) {
		if err := dt.ensure(sl.idx + 1); err != nil {
			return Decision{}, err
		}
	}
	sl.used.Store(now.UnixNano())
	if f := s.fleet.Load(); f != nil {
		return f.acquire(s, sl, p, now, sn, dt, dry)
	}
	return s.acquireLocal(sl, p, now, sn, dt, dry), nil
}

// acquireLocal decides on this gateway's counts alone.
func (s *Store) acquireLocal(sl *slot, p *Plan, now time.Time, sn *calSnap, dt *table, dry bool) Decision {
	d := Decision{N: len(p.Limits), Binding: -1}
	var full [MaxLimits]bool
	admitted := dt.word(sl.idx, 0)
	sl.mu.Lock()
	s.ensureMonth(sl, sn)
	over := false
	for i, l := range p.Limits {
		var used, reset int64
		switch l.Unit {
		case Day:
			used, reset = int64(atomic.LoadUint64(admitted)), sn.dayHi
		case Month:
			used, reset = sl.month, sn.month.End.UnixNano()
		default:
			used, reset = s.ringCount(sl.idx, l, now)
		}
		full[i] = used >= l.N
		over = over || full[i]
		d.Windows[i] = WindowState{Remaining: l.N - used, Reset: reset}
	}
	if !over || dry {
		atomic.AddUint64(admitted, 1)
		sl.month++
		for i, l := range p.Limits {
			d.Windows[i].Remaining--
			if !l.Unit.Calendar() {
				s.ringAdd(sl.idx, l, now)
				if d.Windows[i].Reset == 0 {
					d.Windows[i].Reset = ringResetEmpty(l, now)
				}
			}
		}
	} else {
		atomic.AddUint64(dt.word(sl.idx, 1), 1)
	}
	sl.mu.Unlock()
	for i := 0; i < d.N; i++ {
		if d.Windows[i].Remaining < 0 {
			d.Windows[i].Remaining = 0
		}
	}
	d.bind(full)
	d.Admitted = !over || dry
	return d
}

// ensureMonth makes sl.month the slot's admitted count of sn's month;
// sl.mu is held.
func (s *Store) ensureMonth(sl *slot, sn *calSnap) {
	if sl.monthID == sn.month.ID {
		return
	}
	sl.month = s.monthAdmitted(sl.idx, sn.month, sn.day.ID)
	sl.monthID = sn.month.ID
}

// The ring words of a slot: 64 minute buckets, then 64 hour buckets. A
// bucket holds its step (the low 32 bits of the step number) in its high
// half and its count in its low half.
func ringBase(u Unit) int {
	if u == Hour {
		return ringWords
	}
	return 0
}

// ringCount returns the requests sliding window l counts at now, and
// when it next admits more: with its limit or more counted, when enough
// steps have left it to go under the limit; else when its oldest counted
// step leaves (0 when it counts nothing).
func (s *Store) ringCount(idx uint32, l Limit, now time.Time) (used, reset int64) {
	step := l.stepAt(now)
	var counts [ringSteps + 1]int64 // oldest first
	base := ringBase(l.Unit)
	for j := 0; j < ringSize; j++ {
		v := atomic.LoadUint64(s.rings.word(idx, base+j))
		age := uint32(step) - uint32(v>>32)
		if v&0xffffffff != 0 && age <= ringSteps {
			c := int64(v & 0xffffffff)
			counts[ringSteps-int(age)] += c
			used += c
		}
	}
	drop := used - l.N + 1 // how many must leave for one more to fit
	if drop < 1 {
		drop = 1
	}
	var gone int64
	for k, c := range counts {
		if c == 0 {
			continue
		}
		gone += c
		if gone >= drop {
			// the bucket of step (step-ringSteps+k) leaves at step+k+1
			return used, (step + int64(k) + 1) * int64(l.step())
		}
	}
	return used, 0
}

// ringResetEmpty is when a window that counts only the request just made
// next admits more: when that request's step leaves it.
func ringResetEmpty(l Limit, now time.Time) int64 {
	return ringResetEmptyStep(l, l.stepAt(now))
}

// ringResetEmptyStep is ringResetEmpty at step (l.stepAt(now)).
func ringResetEmptyStep(l Limit, step int64) int64 {
	return (step + ringSteps + 1) * int64(l.step())
}

// ringAdd counts one request in the current step.
func (s *Store) ringAdd(idx uint32, l Limit, now time.Time) {
	s.ringAddStep(idx, l, l.stepAt(now))
}

// ringAddStep counts one request in step (l.stepAt(now)).
func (s *Store) ringAddStep(idx uint32, l Limit, step int64) {
	w := s.rings.word(idx, ringBase(l.Unit)+int(uint64(step)%ringSize))
	v := atomic.LoadUint64(w)
	if uint32(v>>32) != uint32(step) {
		atomic.StoreUint64(w, uint64(uint32(step))<<32|1)
		return
	}
	atomic.StoreUint64(w, v+1)
}

// ringUsed returns a sliding window's count at now.
func (s *Store) ringUsed(idx uint32, l Limit, now time.Time) int64 {
	l.N = MaxLimit
	used, _ := s.ringCount(idx, l, now)
	return used
}

// DayUsage is one consumer's requests on one plan and day.
type DayUsage = quotausage.Day

// Plans returns the plans a consumer has been counted on, sorted.
func (s *Store) Plans(consumer string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sl := range s.byConsumer[NormalizeConsumer(consumer)] {
		out = append(out, sl.key.plan)
	}
	sort.Strings(out)
	return out
}

// Usage returns a consumer's requests per day and plan, from day from to
// day to (IDs, inclusive), oldest first; days without requests are left
// out.
func (s *Store) Usage(consumer string, from, to int64) []DayUsage {
	s.mu.Lock()
	slots := append([]*slot(nil), s.byConsumer[NormalizeConsumer(consumer)]...)
	s.mu.Unlock()
	sort.Slice(slots, func(i, j int) bool { return slots[i].key.plan < slots[j].key.plan })
	out := []DayUsage{}
	for id := from; id <= to; id++ {
		for _, sl := range slots {
			a, r := s.dayCounts(sl.idx, id)
			if a != 0 || r != 0 {
				out = append(out, DayUsage{Date: DateString(id), Plan: sl.key.plan, Admitted: a, Refused: r})
			}
		}
	}
	return out
}

// SlotUsage is one slot's counts now.
type SlotUsage struct {
	Consumer string
	Plan     string
	// Day and Month are the admitted requests of the current day and
	// month; Refused the day's refused ones. With the counts shared by a
	// fleet, Day and Month add the other gateways' as last read.
	Day, Month, Refused int64
	// LastUsed is the last request counted here (zero: none since the
	// store opened).
	LastUsed time.Time
}

// Current returns every slot's counts at now.
func (s *Store) Current(now time.Time) []SlotUsage {
	sn := s.periods(now)
	slots := s.allSlots()
	out := make([]SlotUsage, 0, len(slots))
	dt, err := s.dayTable(sn.day.ID)
	if err != nil {
		dt = nil
	}
	f := s.fleet.Load()
	for _, sl := range slots {
		u := SlotUsage{Consumer: sl.key.consumer, Plan: sl.key.plan}
		if dt != nil {
			u.Day, u.Refused = int64(dt.load(sl.idx, 0)), int64(dt.load(sl.idx, 1))
		}
		sl.mu.Lock()
		s.ensureMonth(sl, sn)
		u.Month = sl.month
		sl.mu.Unlock()
		if f != nil {
			f.current(sl, sn, &u)
		}
		if ns := sl.used.Load(); ns != 0 {
			u.LastUsed = time.Unix(0, ns)
		}
		out = append(out, u)
	}
	return out
}

// Standing returns a consumer's use of each limit of plan p at now (0
// for a consumer never counted on p): the fleet's as last read, with the
// counts shared.
func (s *Store) Standing(p *Plan, consumer string, now time.Time) []int64 {
	used := make([]int64, len(p.Limits))
	sl := s.lookup(p.Name, NormalizeConsumer(consumer))
	if sl == nil {
		return used
	}
	sn := s.periods(now)
	a, _ := s.dayCounts(sl.idx, sn.day.ID)
	sl.mu.Lock()
	s.ensureMonth(sl, sn)
	u := SlotUsage{Day: a, Month: sl.month}
	var others [Month + 1]int64
	if f := s.fleet.Load(); f != nil {
		for _, l := range p.Limits {
			if k := sl.fl.known[l.Unit]; !l.Unit.Calendar() && leaseValid(l.Unit, k.inst, l.stepAt(now)) {
				others[l.Unit] = k.others
			}
		}
	}
	sl.mu.Unlock()
	if f := s.fleet.Load(); f != nil {
		f.current(sl, sn, &u)
	}
	for i, l := range p.Limits {
		switch l.Unit {
		case Day:
			used[i] = u.Day
		case Month:
			used[i] = u.Month
		default:
			used[i] = s.ringUsed(sl.idx, l, now) + others[l.Unit]
		}
	}
	return used
}

// LastPlan returns the plan of a consumer's latest request here ("" when
// it has none).
func (s *Store) LastPlan(consumer string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var plan string
	var last int64 = -1
	for _, sl := range s.byConsumer[NormalizeConsumer(consumer)] {
		if u := sl.used.Load(); u > last {
			plan, last = sl.key.plan, u
		}
	}
	return plan
}

// Consumers returns how many slots the store holds.
func (s *Store) Consumers() int { return len(s.allSlots()) }

// Sync writes the counts to the disk.
func (s *Store) Sync() error {
	var errs []error
	s.mu.Lock()
	tables := []*table{s.rings, s.leases}
	for _, t := range s.days {
		tables = append(tables, t)
	}
	index := s.index
	s.mu.Unlock()
	for _, t := range tables {
		errs = append(errs, t.sync())
	}
	if index != nil {
		errs = append(errs, index.Sync())
	}
	return errors.Join(errs...)
}

func (s *Store) syncLoop(every time.Duration) {
	defer s.stopped.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			if cur := s.cur.Load(); cur != nil && cur.id != s.pruned {
				s.pruned = cur.id
				s.prune(cur.id)
			}
			if err := s.Sync(); err != nil {
				s.logger.Error("writing quota counts to disk", zap.Error(err))
			}
		}
	}
}

// Close writes the counts to the disk and closes the files. No Acquire
// may run during or after Close.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	s.stopped.Wait()
	err := s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(err, s.closeFiles())
}

// closeFiles closes every file; s.mu is held (or s is not shared).
func (s *Store) closeFiles() error {
	var errs []error
	for id, t := range s.days {
		errs = append(errs, t.close())
		delete(s.days, id)
	}
	for _, t := range []*table{s.rings, s.leases} {
		if t != nil {
			errs = append(errs, t.close())
		}
	}
	if s.index != nil {
		errs = append(errs, s.index.Close())
	}
	return errors.Join(errs...)
}
