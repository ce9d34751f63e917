package caddyquota

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func openTestStore(t testing.TB, dir string, loc *time.Location) *Store {
	t.Helper()
	s, err := OpenStore(StoreOptions{Dir: dir, Calendar: NewCalendar(loc), SyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustPlan(t testing.TB, name string, limits ...string) *Plan {
	t.Helper()
	var ls []Limit
	for _, l := range limits {
		lim, err := ParseLimit(l)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, lim)
	}
	p, err := NewPlan(name, ls)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func at(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func acquire(t testing.TB, s *Store, p *Plan, consumer string, now time.Time) Decision {
	t.Helper()
	d, err := s.AcquireAt(p, consumer, now, false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDayLimit: a day's limit admits exactly its count, refuses the next
// with the day's end as reset, counts both, and starts again the next
// local day.
func TestDayLimit(t *testing.T) {
	loc := mustZone(t, "Europe/Berlin")
	s := openTestStore(t, t.TempDir(), loc)
	p := mustPlan(t, "free", "3/day")
	now := at(t, "2026-12-01T22:00:00Z") // 23:00 in Berlin
	for i := 1; i <= 3; i++ {
		d := acquire(t, s, p, "alice", now)
		if !d.Admitted || d.Over || d.Windows[0].Remaining != int64(3-i) {
			t.Fatalf("request %d: %+v, want admitted with %d left", i, d, 3-i)
		}
	}
	d := acquire(t, s, p, "alice", now)
	wantReset := at(t, "2026-12-01T23:00:00Z") // Berlin midnight
	if d.Admitted || !d.Over || d.Binding != 0 || !d.Reset().Equal(wantReset) || d.RetryAfter(now) != 3600 {
		t.Fatalf("request 4: %+v (reset %s), want refused until %s", d, d.Reset(), wantReset)
	}
	// another consumer has its own count
	if d := acquire(t, s, p, "bob", now); !d.Admitted {
		t.Fatal("bob refused")
	}
	// the next local day
	if d := acquire(t, s, p, "alice", at(t, "2026-12-01T23:00:00Z")); !d.Admitted || d.Windows[0].Remaining != 2 {
		t.Fatalf("next day: %+v", d)
	}
	u := s.Usage("alice", mustDate(t, "2026-12-01"), mustDate(t, "2026-12-02"))
	want := []DayUsage{{Date: "2026-12-01", Plan: "free", Admitted: 3, Refused: 1}, {Date: "2026-12-02", Plan: "free", Admitted: 1}}
	if fmt.Sprint(u) != fmt.Sprint(want) {
		t.Errorf("usage %v, want %v", u, want)
	}
}

func mustDate(t testing.TB, s string) int64 {
	t.Helper()
	id, err := ParseDate(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestMonthLimit: a month's count is the sum of its days, kept across a
// reopen of the store, and starts at zero on the first local day of the
// next month (here a leap year's February into March, in Los Angeles).
func TestMonthLimit(t *testing.T) {
	loc := mustZone(t, "America/Los_Angeles")
	dir := t.TempDir()
	p := mustPlan(t, "pro", "2/day", "5/month")
	s, err := OpenStore(StoreOptions{Dir: dir, Calendar: NewCalendar(loc), SyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	days := []string{"2028-02-26T20:00:00Z", "2028-02-27T20:00:00Z", "2028-02-29T20:00:00Z"} // local 26th, 27th, 29th
	admitted := 0
	for _, day := range days {
		for i := 0; i < 3; i++ {
			if d := acquire(t, s, p, "carol", at(t, day)); d.Admitted {
				admitted++
			}
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d in February, want 5 (2+2+1)", admitted)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// reopened: the month is still full on the leap day's last second
	s = openTestStore(t, dir, loc)
	d := acquire(t, s, p, "carol", at(t, "2028-03-01T07:59:59Z")) // 23:59:59 on the 29th, Los Angeles
	if d.Admitted || d.Binding != 1 || !d.Reset().Equal(at(t, "2028-03-01T08:00:00Z")) {
		t.Fatalf("after reopen, Feb 29 23:59:59: %+v (reset %s), want refused by the month until March 1 local", d, d.Reset())
	}
	d = acquire(t, s, p, "carol", at(t, "2028-03-01T08:00:00Z"))
	if !d.Admitted || d.Windows[1].Remaining != 4 {
		t.Fatalf("March 1: %+v, want admitted with 4 left this month", d)
	}
	u := s.Usage("carol", mustDate(t, "2028-02-01"), mustDate(t, "2028-03-31"))
	want := "[{2028-02-26 pro 2 1} {2028-02-27 pro 2 1} {2028-02-29 pro 1 3} {2028-03-01 pro 1 0}]"
	if fmt.Sprint(u) != want {
		t.Errorf("usage %v\nwant %v", u, want)
	}
}

// TestSlidingMinute: a minute window admits its count in any 60 seconds,
// and its reset is when the oldest counted second leaves.
func TestSlidingMinute(t *testing.T) {
	s := openTestStore(t, t.TempDir(), nil)
	p := mustPlan(t, "burst", "3/minute")
	t0 := at(t, "2026-12-01T10:00:00.5Z")
	for _, off := range []time.Duration{0, 10 * time.Second, 20 * time.Second} {
		if d := acquire(t, s, p, "dan", t0.Add(off)); !d.Admitted {
			t.Fatalf("at +%v refused", off)
		}
	}
	d := acquire(t, s, p, "dan", t0.Add(59*time.Second))
	// the request of 10:00:00 leaves at 10:01:01 (the window counts the
	// current second and the 60 before it)
	if d.Admitted || !d.Reset().Equal(at(t, "2026-12-01T10:01:01Z")) {
		t.Fatalf("at +59s: %+v reset %s, want refused until 10:01:01", d, d.Reset())
	}
	if d := acquire(t, s, p, "dan", at(t, "2026-12-01T10:01:00.9Z")); d.Admitted {
		t.Fatal("admitted at 10:01:00.9: 4 requests within 60.4 seconds")
	}
	d = acquire(t, s, p, "dan", at(t, "2026-12-01T10:01:01Z"))
	if reset := time.Unix(0, d.Windows[0].Reset); !d.Admitted || d.Windows[0].Remaining != 0 || !reset.Equal(at(t, "2026-12-01T10:01:11Z")) {
		t.Fatalf("at 10:01:01: %+v reset %s, want admitted, 0 left, next at 10:01:11", d, reset)
	}
	// a long pause empties it
	if d := acquire(t, s, p, "dan", at(t, "2026-12-01T11:00:00Z")); !d.Admitted || d.Windows[0].Remaining != 2 {
		t.Fatalf("an hour later: %+v", d)
	}
}

// TestSlidingNeverOver: whatever the arrival times, no window's length
// holds more admitted requests than its limit, and the window is not
// stricter than its length and one step; for sliding windows of every
// length, and for a plan with two.
func TestSlidingNeverOver(t *testing.T) {
	for _, tc := range []struct {
		limits []string
		every  time.Duration // between arrivals
	}{
		{[]string{"5/minute"}, 137 * time.Millisecond},
		{[]string{"3/10s"}, 23 * time.Millisecond},
		{[]string{"4/1s"}, 3 * time.Millisecond},
		{[]string{"7/5m"}, 700 * time.Millisecond},
		{[]string{"20/hour"}, 9 * time.Second},
		{[]string{"3/10s", "10/minute"}, 41 * time.Millisecond},
		{[]string{"10/minute", "3/10s"}, 41 * time.Millisecond},
	} {
		t.Run(strings.Join(tc.limits, "+"), func(t *testing.T) {
			s := openTestStore(t, t.TempDir(), nil)
			p := mustPlan(t, "burst", tc.limits...)
			t0 := at(t, "2026-12-01T10:00:00Z")
			var admitted []time.Time
			for i := 0; i < 2000; i++ {
				now := t0.Add(time.Duration(i) * tc.every)
				if acquire(t, s, p, "eve", now).Admitted {
					admitted = append(admitted, now)
				}
			}
			span := 2000 * tc.every
			for _, l := range p.Limits {
				for i := range admitted {
					n := 0
					for j := i; j < len(admitted) && admitted[j].Sub(admitted[i]) < l.Window; j++ {
						n++
					}
					if n > int(l.N) {
						t.Fatalf("%s: %d admitted within %s from %s", l, n, l.Window, admitted[i])
					}
				}
				// at least the limit per window and step, where it binds
				least := int(l.N) * int(span/(l.Window+l.step()))
				if least > 0 && len(admitted) < least && l == p.Limits[len(p.Limits)-1] {
					t.Errorf("%s: only %d admitted in %s", l, len(admitted), span)
				}
			}
		})
	}
}

// TestConcurrentExact: many goroutines on one consumer admit exactly the
// limit.
func TestConcurrentExact(t *testing.T) {
	s := openTestStore(t, t.TempDir(), nil)
	p := mustPlan(t, "free", "1000/day", "1500/month", "100000/minute")
	now := at(t, "2026-12-01T10:00:00Z")
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				if d, err := s.AcquireAt(p, "frank", now, false); err == nil && d.Admitted {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1000 {
		t.Fatalf("admitted %d, want 1000", ok.Load())
	}
	u := s.Usage("frank", mustDate(t, "2026-12-01"), mustDate(t, "2026-12-01"))
	if len(u) != 1 || u[0].Admitted != 1000 || u[0].Refused != 1400 {
		t.Errorf("usage %v, want 1000 admitted, 1400 refused", u)
	}
}

func TestDryRun(t *testing.T) {
	s := openTestStore(t, t.TempDir(), nil)
	p := mustPlan(t, "free", "1/day")
	now := at(t, "2026-12-01T10:00:00Z")
	for i := 0; i < 3; i++ {
		d, err := s.AcquireAt(p, "gus", now, true)
		if err != nil || !d.Admitted || d.Over != (i > 0) {
			t.Fatalf("dry run %d: %+v %v", i, d, err)
		}
	}
	if u := s.Usage("gus", mustDate(t, "2026-12-01"), mustDate(t, "2026-12-01")); u[0].Admitted != 3 || u[0].Refused != 0 {
		t.Errorf("usage %v: what dry run lets through is admitted", u)
	}
}

// TestIndexTornTail: a consumer index whose last record was cut short
// (a power loss) opens with the records before it.
func TestIndexTornTail(t *testing.T) {
	dir := t.TempDir()
	p := mustPlan(t, "free", "10/day")
	now := at(t, "2026-12-01T10:00:00Z")
	s, err := OpenStore(StoreOptions{Dir: dir, SyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, s, p, "a", now)
	acquire(t, s, p, "b", now)
	s.Close()
	idx := filepath.Join(dir, "consumers.log")
	b, _ := os.ReadFile(idx)
	rec := appendIndexRecord(nil, indexRecord{slot: 2, plan: "free", consumer: "c"})
	if err := os.WriteFile(idx, append(b, rec[:len(rec)-1]...), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, nil)
	if s.Consumers() != 2 {
		t.Fatalf("%d consumers, want 2", s.Consumers())
	}
	if d := acquire(t, s, p, "c", now); d.Windows[0].Remaining != 9 {
		t.Errorf("c: %+v: a new slot starts at zero", d)
	}
	if d := acquire(t, s, p, "a", now); d.Windows[0].Remaining != 8 {
		t.Errorf("a: %+v, want its count kept (8 left)", d)
	}
	if st, _ := os.Stat(idx); st.Size() != int64(3*len(rec)) {
		t.Errorf("index is %d bytes, want 3 whole records", st.Size())
	}
}

func TestOverflowAndLongKeys(t *testing.T) {
	s, err := OpenStore(StoreOptions{Dir: t.TempDir(), SyncInterval: -1, MaxConsumers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := mustPlan(t, "free", "2/day")
	now := at(t, "2026-12-01T10:00:00Z")
	long := strings.Repeat("k", 300)
	acquire(t, s, p, long, now)
	if d := acquire(t, s, p, long, now); d.Windows[0].Remaining != 0 {
		t.Errorf("a long key's second request: %+v", d)
	}
	if got := s.Plans(long); len(got) != 1 {
		t.Errorf("plans of the long key: %v", got)
	}
	if s.Current(now)[0].Consumer != NormalizeConsumer(long) || !strings.HasPrefix(NormalizeConsumer(long), "sha256:") {
		t.Errorf("long key counted as %q", s.Current(now)[0].Consumer)
	}
	acquire(t, s, p, "x1", now)
	acquire(t, s, p, "x2", now)
	// the store is full: every new consumer shares the overflow slot
	acquire(t, s, p, "x3", now)
	acquire(t, s, p, "x3", now)
	if d := acquire(t, s, p, "x4", now); d.Admitted {
		t.Errorf("x4 admitted: x3 and x4 share the overflow slot's 2/day")
	}
	if s.Consumers() != 4 {
		t.Errorf("%d slots, want 4 (3 and the overflow)", s.Consumers())
	}
}

// TestSurvivesSIGKILL: a process counts requests, says how many it was
// told were admitted, and is killed with SIGKILL; the store reopened
// holds every one.
func TestSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	// The test binary itself, found through /proc/self/exe: not
	// os.Args[0], which Caddy's caddytest sets to "caddy run ..." when a
	// test of this package has started Caddy in this process (with
	// -count=2 the second run started "caddy" from $PATH and failed).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUOTA_KILL_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	admitted := 0
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "admitted "); ok {
			admitted, _ = strconv.Atoi(n)
			if admitted >= 500 {
				break
			}
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if admitted < 500 {
		t.Fatalf("the child reported %d admitted", admitted)
	}
	s := openTestStore(t, dir, nil)
	now := at(t, "2026-12-01T10:00:00Z")
	u := s.Usage("killed", mustDate(t, "2026-12-01"), mustDate(t, "2026-12-01"))
	if len(u) != 1 || u[0].Admitted < int64(admitted) {
		t.Fatalf("after SIGKILL: %v, want at least the %d the child had answered", u, admitted)
	}
	// and the month counts them
	d := acquire(t, s, mustPlan(t, "free", "100000000/month"), "killed", now)
	if got := 100000000 - 1 - d.Windows[0].Remaining; got < int64(admitted) {
		t.Errorf("month count %d after reopen, want at least %d", got, admitted)
	}
}

// TestMain runs the child process of TestSurvivesSIGKILL when the test
// binary is started as one (no test of its own then, so none skips).
func TestMain(m *testing.M) {
	if dir := os.Getenv("QUOTA_KILL_CHILD"); dir != "" {
		killChild(dir)
		return
	}
	os.Exit(m.Run())
}

// killChild counts requests forever, printing each admitted one after
// counting it, until it is killed.
func killChild(dir string) {
	s, err := OpenStore(StoreOptions{Dir: dir, SyncInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lim, err := ParseLimit("100000000/month")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	p, err := NewPlan("free", []Limit{lim})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	now, _ := time.Parse(time.RFC3339, "2026-12-01T10:00:00Z")
	for i := 1; ; i++ {
		d, err := s.AcquireAt(p, "killed", now, false)
		if err != nil || !d.Admitted {
			fmt.Fprintln(os.Stderr, "not admitted:", err)
			os.Exit(2)
		}
		fmt.Printf("admitted %d\n", i)
	}
}

func BenchmarkAcquireOneConsumer(b *testing.B) {
	s := openTestStore(b, b.TempDir(), nil)
	p := mustPlan(b, "free", "2000000000/day", "2000000000/month")
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.AcquireAt(p, "hot", now, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAcquireManyConsumers(b *testing.B) {
	s := openTestStore(b, b.TempDir(), nil)
	p := mustPlan(b, "free", "2000000000/day", "2000000000/month", "2000000000/minute")
	now := time.Now()
	names := make([]string, 10000)
	for i := range names {
		names[i] = "consumer-" + strconv.Itoa(i)
		s.AcquireAt(p, names[i], now, false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(n.Add(1)) * 7919
		for pb.Next() {
			i++
			if _, err := s.AcquireAt(p, names[i%len(names)], now, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
