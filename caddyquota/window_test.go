package caddyquota

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Limit
		err  bool
	}{
		{in: "1000/day", want: Limit{N: 1000, Unit: Day}},
		{in: "2_000_000/month", want: Limit{N: 2000000, Unit: Month}},
		{in: "60/minute", want: Limit{N: 60, Unit: Minute, Window: time.Minute}},
		{in: "0/hour", want: Limit{N: 0, Unit: Hour, Window: time.Hour}},
		{in: "20/10s", want: Limit{N: 20, Unit: Minute, Window: 10 * time.Second}},
		{in: "100/5m", want: Limit{N: 100, Unit: Minute, Window: 5 * time.Minute}},
		{in: "1000/1h30m", want: Limit{N: 1000, Unit: Minute, Window: 90 * time.Minute}},
		{in: "5/168h", want: Limit{N: 5, Unit: Minute, Window: 168 * time.Hour}},
		{in: "5/500ms", err: true},
		{in: "5/169h", err: true},
		{in: "5/-10s", err: true},
		{in: "1000", err: true},
		{in: "1000/week", err: true},
		{in: "-1/day", err: true},
		{in: "1.5/day", err: true},
		{in: "/day", err: true},
		{in: "99999999999/day", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLimit(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("ParseLimit(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseLimit(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if got.String() != tc.in && tc.in != "2_000_000/month" {
				t.Errorf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

// TestCalendarDays: day boundaries in several zones, across the changes
// to and from summer time, month ends and a leap day. Each case gives an
// instant and the local day it must fall in, with that day's start, end
// and length.
func TestCalendarDays(t *testing.T) {
	for _, tc := range []struct {
		name       string
		zone       string
		at         string // RFC 3339
		date       string
		start, end string // RFC 3339 in the zone
		hours      float64
	}{
		{"utc midday", "UTC", "2026-12-01T12:00:00Z", "2026-12-01", "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", 24},
		{"berlin just before midnight", "Europe/Berlin", "2026-12-01T22:59:59Z", "2026-12-01", "2026-12-01T00:00:00+01:00", "2026-12-02T00:00:00+01:00", 24},
		{"berlin at midnight", "Europe/Berlin", "2026-12-01T23:00:00Z", "2026-12-02", "2026-12-02T00:00:00+01:00", "2026-12-03T00:00:00+01:00", 24},
		{"berlin spring forward is 23h", "Europe/Berlin", "2026-03-29T12:00:00Z", "2026-03-29", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23},
		{"berlin fall back is 25h", "Europe/Berlin", "2026-10-25T01:30:00Z", "2026-10-25", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25},
		{"new york fall back", "America/New_York", "2026-11-01T05:30:00Z", "2026-11-01", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25},
		{"tokyo month end", "Asia/Tokyo", "2026-04-30T15:00:00Z", "2026-05-01", "2026-05-01T00:00:00+09:00", "2026-05-02T00:00:00+09:00", 24},
		{"kolkata half hour", "Asia/Kolkata", "2026-06-30T18:29:59Z", "2026-06-30", "2026-06-30T00:00:00+05:30", "2026-07-01T00:00:00+05:30", 24},
		{"leap day", "America/Los_Angeles", "2028-02-29T23:00:00Z", "2028-02-29", "2028-02-29T00:00:00-08:00", "2028-03-01T00:00:00-08:00", 24},
		{"day after leap day", "America/Los_Angeles", "2028-03-01T08:00:00Z", "2028-03-01", "2028-03-01T00:00:00-08:00", "2028-03-02T00:00:00-08:00", 24},
		// Cuba moves its clocks from 00:00 to 01:00: the day has no
		// midnight and starts when the clocks jump
		{"havana day without midnight", "America/Havana", "2026-03-08T12:00:00Z", "2026-03-08", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00", 23},
		{"havana day before the jump", "America/Havana", "2026-03-08T04:59:59Z", "2026-03-07", "2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := mustZone(t, tc.zone)
			c := NewCalendar(loc)
			at, _ := time.Parse(time.RFC3339, tc.at)
			p := c.Day(at)
			if got := DateString(p.ID); got != tc.date {
				t.Errorf("date = %s, want %s", got, tc.date)
			}
			start, _ := time.Parse(time.RFC3339, tc.start)
			end, _ := time.Parse(time.RFC3339, tc.end)
			if !p.Start.Equal(start) || !p.End.Equal(end) {
				t.Errorf("day = [%s, %s), want [%s, %s)", p.Start.In(loc).Format(time.RFC3339), p.End.In(loc).Format(time.RFC3339), tc.start, tc.end)
			}
			if got := p.End.Sub(p.Start).Hours(); got != tc.hours {
				t.Errorf("length %vh, want %vh", got, tc.hours)
			}
			if !p.Contains(at) {
				t.Errorf("the day does not contain %s", tc.at)
			}
			if q := c.DayOf(p.ID); q != p {
				t.Errorf("DayOf(%d) = %+v, want %+v", p.ID, q, p)
			}
			// the day before ends where this one starts
			if prev := c.Day(p.Start.Add(-time.Nanosecond)); !prev.End.Equal(p.Start) || prev.ID != p.ID-1 {
				t.Errorf("previous day %s ends %s, want %s", DateString(prev.ID), prev.End, p.Start)
			}
		})
	}
}

func TestCalendarMonths(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zone  string
		at    string
		month string
		start string
		days  int
	}{
		{"december utc", "UTC", "2026-12-31T23:59:59Z", "2026-12", "2026-12-01T00:00:00Z", 31},
		{"new year in sydney", "Australia/Sydney", "2026-12-31T13:00:00Z", "2027-01", "2027-01-01T00:00:00+11:00", 31},
		{"february leap year", "Europe/Berlin", "2028-02-15T00:00:00Z", "2028-02", "2028-02-01T00:00:00+01:00", 29},
		{"february common year", "Europe/Berlin", "2027-02-15T00:00:00Z", "2027-02", "2027-02-01T00:00:00+01:00", 28},
		{"february 2100 is common", "UTC", "2100-02-15T00:00:00Z", "2100-02", "2100-02-01T00:00:00Z", 28},
		{"february 2000 is leap", "UTC", "2000-02-15T00:00:00Z", "2000-02", "2000-02-01T00:00:00Z", 29},
		{"april ends on the 30th in new york", "America/New_York", "2026-05-01T03:59:59Z", "2026-04", "2026-04-01T00:00:00-04:00", 30},
		{"march with the spring change", "Europe/Berlin", "2026-03-31T21:59:59Z", "2026-03", "2026-03-01T00:00:00+01:00", 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := mustZone(t, tc.zone)
			c := NewCalendar(loc)
			at, _ := time.Parse(time.RFC3339, tc.at)
			p := c.Month(at)
			if got := MonthString(p.ID); got != tc.month {
				t.Errorf("month = %s, want %s", got, tc.month)
			}
			start, _ := time.Parse(time.RFC3339, tc.start)
			if !p.Start.Equal(start) {
				t.Errorf("start %s, want %s", p.Start.In(loc).Format(time.RFC3339), tc.start)
			}
			// count the days of the month through Day
			n := 0
			for d := c.Day(p.Start); d.Start.Before(p.End); d = c.DayOf(d.ID + 1) {
				n++
				if MonthOfDay(d.ID) != p.ID {
					t.Errorf("day %s is not in month %s", DateString(d.ID), MonthString(p.ID))
				}
			}
			if n != tc.days {
				t.Errorf("%d days, want %d", n, tc.days)
			}
			if c.MonthOf(p.ID) != p {
				t.Errorf("MonthOf(%d) differs", p.ID)
			}
		})
	}
}

func TestCivilDays(t *testing.T) {
	for _, s := range []string{"1970-01-01", "1969-12-31", "2000-02-29", "2026-12-01", "2100-03-01", "1600-01-01"} {
		tm, _ := time.Parse("2006-01-02", s)
		y, m, d := tm.Date()
		id := civilDays(y, m, d)
		if want := tm.Unix() / 86400; tm.Unix() >= 0 && id != want {
			t.Errorf("%s: %d, want %d", s, id, want)
		}
		if got := DateString(id); got != s {
			t.Errorf("%s: round trip %s", s, got)
		}
		if p, err := ParseDate(s); err != nil || p != id {
			t.Errorf("ParseDate(%s) = %d, %v", s, p, err)
		}
	}
	// every day for 30 years round-trips and follows its predecessor
	base := civilDays(2000, 1, 1)
	for i := int64(0); i < 365*30; i++ {
		y, m, d := civilDate(base + i)
		if civilDays(y, m, d) != base+i {
			t.Fatalf("day %d does not round-trip (%d-%d-%d)", base+i, y, m, d)
		}
	}
}

func TestPolicyAndRateLimitFields(t *testing.T) {
	p, err := NewPlan("pro", []Limit{{N: 2000000, Unit: Month}, {N: 100000, Unit: Day}, {N: 100, Unit: Minute}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCalendar(mustZone(t, "Europe/Berlin"))
	now, _ := time.Parse(time.RFC3339, "2026-03-29T10:00:00Z") // a 23-hour day in a 31-day month
	day, month := c.Day(now), c.Month(now)
	got := p.PolicyField(day, month)[0]
	want := `"pro-minute";q=100;w=60, "pro-day";q=100000;w=82800, "pro-month";q=2000000;w=2674800`
	if got != want {
		t.Errorf("RateLimit-Policy = %s\nwant %s", got, want)
	}
	d := Decision{Admitted: true, N: 3, Binding: -1}
	d.Windows[0] = WindowState{Remaining: 99, Reset: now.Add(60 * time.Second).UnixNano()}
	d.Windows[1] = WindowState{Remaining: 99999, Reset: day.End.UnixNano()}
	d.Windows[2] = WindowState{Remaining: 1999999, Reset: month.End.UnixNano()}
	field := string(p.AppendRateLimitField(nil, &d, now))
	want = `"pro-minute";r=99;t=60, "pro-day";r=99999;t=43200, "pro-month";r=1999999;t=216000`
	if field != want {
		t.Errorf("RateLimit = %s\nwant %s", field, want)
	}
	// the header map's value: the same, in its buffer (this one) or
	// beyond it (a long plan name), and for a Plan not made by NewPlan
	long, err := NewPlan(strings.Repeat("p", 60), p.Limits)
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range []*Plan{p, long, {Name: "pro", Limits: p.Limits}} {
		want := string(pl.AppendRateLimitField(nil, &d, now))
		if got := pl.RateLimitField(&d, now); len(got) != 1 || got[0] != want {
			t.Errorf("plan %.10s...: RateLimitField = %q\nwant [%s]", pl.Name, got, want)
		}
	}
	var full [MaxLimits]bool
	full[0], full[1] = true, true
	d.bind(full)
	if d.Binding != 1 || !d.Over || d.RetryAfter(now) != 43200 {
		t.Errorf("binding %d over %v retry %d; want the day (1), true, 43200", d.Binding, d.Over, d.RetryAfter(now))
	}
	if _, err := NewPlan("x", []Limit{{N: 1, Unit: Day}, {N: 2, Unit: Day}}); err == nil {
		t.Error("two limits per day accepted")
	}
	// sliding windows of any length: the shorter of two is Minute, and
	// the fields name them by their length
	ls := []Limit{{N: 500, Unit: Minute, Window: 5 * time.Minute}, {N: 20, Unit: Minute, Window: 10 * time.Second}}
	p2, err := NewPlan("api", ls)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Limits[0].Window != 10*time.Second || p2.Limits[0].Unit != Minute || p2.Limits[1].Unit != Hour {
		t.Errorf("limits %+v: want 20/10s as Minute, 500/5m as Hour", p2.Limits)
	}
	if got, want := p2.PolicyField(day, month)[0], `"api-10s";q=20;w=10, "api-5m";q=500;w=300`; got != want {
		t.Errorf("RateLimit-Policy = %s\nwant %s", got, want)
	}
	for _, bad := range [][]Limit{
		{{N: 1, Unit: Minute, Window: time.Minute}, {N: 2, Unit: Minute, Window: time.Minute}},
		{{N: 1, Unit: Minute, Window: time.Second}, {N: 2, Unit: Minute, Window: time.Minute}, {N: 3, Unit: Hour, Window: time.Hour}},
	} {
		if _, err := NewPlan("x", bad); err == nil {
			t.Errorf("plan %v accepted", bad)
		}
	}
	if _, err := NewPlan("bad name", nil); err == nil {
		t.Error("a plan name with a space accepted")
	}
}
