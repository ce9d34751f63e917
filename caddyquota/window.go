package caddyquota

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Unit is the kind of a limit's window: a calendar day or month in the
// configured time zone, or one of a plan's two sliding windows. Minute is
// the shorter sliding window of a plan (60 seconds unless the limit gives
// another length, such as 20/10s), Hour the longer one (60 minutes unless
// given): each has its own counts on disk and in the fleet.
type Unit uint8

// The units, shortest first.
const (
	Minute Unit = iota + 1
	Hour
	Day
	Month
)

var unitNames = [...]string{Minute: "minute", Hour: "hour", Day: "day", Month: "month"}

// String returns the unit as a limit writes it ("day").
func (u Unit) String() string {
	if int(u) < len(unitNames) && u != 0 {
		return unitNames[u]
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// Calendar reports whether the unit is a calendar window (day, month)
// rather than a sliding one.
func (u Unit) Calendar() bool { return u == Day || u == Month }

// ParseUnit reads "minute", "hour", "day" or "month".
func ParseUnit(s string) (Unit, error) {
	for u, name := range unitNames {
		if name != "" && s == name {
			return Unit(u), nil
		}
	}
	return 0, fmt.Errorf("unknown window %q: want minute, hour, day or month", s)
}

// MaxLimit bounds a limit's count (the counters are 32 bits wide per
// second or minute of a sliding window; a calendar window's are 64).
const MaxLimit = 1 << 31

// Limit is N requests per Unit. A sliding limit also has its Window: a
// minute or an hour, or any length from MinWindow to MaxWindow (20/10s,
// 100/5m).
type Limit struct {
	N    int64
	Unit Unit
	// Window is a sliding limit's length (0 for a calendar limit).
	Window time.Duration
}

// The lengths a sliding window may have.
const (
	MinWindow = time.Second
	MaxWindow = 7 * 24 * time.Hour
)

// ParseLimit reads a limit as the Caddyfile writes it: "1000/day",
// "2000000/month", "60/minute", "5000/hour", or a sliding window of any
// length as a Go duration: "20/10s", "100/5m", "1000/2h". Underscores may
// group digits ("2_000_000/month"). A sliding limit's Unit is Minute
// (NewPlan makes the longer of a plan's two sliding windows Hour).
func ParseLimit(s string) (Limit, error) {
	num, unit, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("invalid limit %q: want <count>/<minute|hour|day|month|duration>, e.g. 1000/day or 20/10s", s)
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(num, "_", ""), 10, 64)
	if err != nil || n < 0 {
		return Limit{}, fmt.Errorf("invalid limit %q: the count must be a whole number, 0 or more", s)
	}
	if n > MaxLimit {
		return Limit{}, fmt.Errorf("invalid limit %q: the count must be at most %d", s, int64(MaxLimit))
	}
	u, err := ParseUnit(unit)
	if err == nil {
		l := Limit{N: n, Unit: u}
		switch u {
		case Minute:
			l.Window = time.Minute
		case Hour:
			l.Window = time.Hour
		}
		return l, nil
	}
	w, derr := time.ParseDuration(unit)
	if derr != nil {
		return Limit{}, fmt.Errorf("invalid limit %q: %v, or a sliding window's length (10s, 5m, 2h)", s, err)
	}
	if w < MinWindow || w > MaxWindow {
		return Limit{}, fmt.Errorf("invalid limit %q: a sliding window is %s to %s long", s, MinWindow, windowName(MaxWindow))
	}
	return Limit{N: n, Unit: Minute, Window: w}, nil
}

// String returns the limit as written: "1000/day", "60/minute", "20/10s".
func (l Limit) String() string { return strconv.FormatInt(l.N, 10) + "/" + l.WindowName() }

// WindowName names the limit's window: "day", "month", "minute" and
// "hour" for sliding windows of 60 seconds and 60 minutes, else the
// window's length ("10s", "5m", "1h30m").
func (l Limit) WindowName() string {
	if l.Unit.Calendar() || l.Window == 0 {
		return l.Unit.String()
	}
	return windowName(l.Window)
}

func windowName(w time.Duration) string {
	switch w {
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	s := w.String()
	for _, zero := range []string{"0s", "0m"} {
		if len(s) > len(zero) && strings.HasSuffix(s, zero) && (s[len(s)-len(zero)-1] < '0' || s[len(s)-len(zero)-1] > '9') {
			s = s[:len(s)-len(zero)]
		}
	}
	return s
}

// Period is one instance of a calendar window: a day or a month in the
// calendar's zone, [Start, End). ID numbers the periods of a unit: days
// since 1970-01-01, months since January 1970.
type Period struct {
	ID         int64
	Start, End time.Time
}

// Seconds is the period's length in whole seconds (a day is 82,800 or
// 90,000 on the days the clocks change).
func (p Period) Seconds() int64 { return int64(p.End.Sub(p.Start) / time.Second) }

// Contains reports whether t is in the period.
func (p Period) Contains(t time.Time) bool { return !t.Before(p.Start) && t.Before(p.End) }

// Calendar computes days and months in a time zone.
type Calendar struct {
	loc *time.Location
}

// NewCalendar returns the calendar of loc (UTC when nil).
func NewCalendar(loc *time.Location) *Calendar {
	if loc == nil {
		loc = time.UTC
	}
	return &Calendar{loc: loc}
}

// Location returns the calendar's zone.
func (c *Calendar) Location() *time.Location { return c.loc }

// Day returns the calendar day that t falls in.
func (c *Calendar) Day(t time.Time) Period {
	y, m, d := t.In(c.loc).Date()
	return Period{ID: civilDays(y, m, d), Start: c.startOf(y, m, d), End: c.startOf(y, m, d+1)}
}

// Month returns the calendar month that t falls in.
func (c *Calendar) Month(t time.Time) Period {
	y, m, _ := t.In(c.loc).Date()
	return Period{ID: MonthID(y, m), Start: c.startOf(y, m, 1), End: c.startOf(y, m+1, 1)}
}

// DayOf returns the day with the given ID (days since 1970-01-01).
func (c *Calendar) DayOf(id int64) Period {
	y, m, d := civilDate(id)
	return Period{ID: id, Start: c.startOf(y, m, d), End: c.startOf(y, m, d+1)}
}

// MonthOf returns the month with the given ID (see MonthID).
func (c *Calendar) MonthOf(id int64) Period {
	y, m := monthDate(id)
	return Period{ID: id, Start: c.startOf(y, m, 1), End: c.startOf(y, m+1, 1)}
}

// startOf returns the first instant of the date y-m-d (normalized: day 32
// is the next month's first) in the calendar's zone: local midnight, or,
// where the clocks jump over midnight (a zone that changes to summer time
// at 00:00), the instant they jump.
func (c *Calendar) startOf(y int, m time.Month, d int) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, c.loc)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // the normalized date
	ty, tm, td := t.Date()
	if time.Date(ty, tm, td, 0, 0, 0, 0, time.UTC).Before(want) {
		// midnight does not exist that day and Go placed it before the
		// jump, on the previous date: the date starts when the zone
		// in effect there ends
		_, end := t.ZoneBounds()
		if !end.IsZero() {
			t = end
		}
	}
	return t
}

// MonthID numbers a month: months since January 1970.
func MonthID(y int, m time.Month) int64 { return int64(y-1970)*12 + int64(m-1) }

func monthDate(id int64) (int, time.Month) {
	y := id / 12
	m := id % 12
	if m < 0 {
		m += 12
		y--
	}
	return int(y) + 1970, time.Month(m + 1)
}

// civilDays is the number of days from 1970-01-01 to y-m-d (proleptic
// Gregorian; Howard Hinnant's days_from_civil).
func civilDays(y int, m time.Month, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := yy / 400
	if yy < 0 && yy%400 != 0 {
		era--
	}
	yoe := yy - era*400
	mm := int64(m)
	var mp int64
	if mm > 2 {
		mp = mm - 3
	} else {
		mp = mm + 9
	}
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilDate is the inverse of civilDays.
func civilDate(days int64) (int, time.Month, int) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return int(y), time.Month(m), int(d)
}

// DateString returns a day ID as YYYY-MM-DD.
func DateString(id int64) string {
	y, m, d := civilDate(id)
	var b [10]byte
	return string(appendDate(b[:0], y, m, d))
}

func appendDate(b []byte, y int, m time.Month, d int) []byte {
	b = appendPad(b, y, 4)
	b = append(b, '-')
	b = appendPad(b, int(m), 2)
	b = append(b, '-')
	return appendPad(b, d, 2)
}

func appendPad(b []byte, v, width int) []byte {
	s := strconv.Itoa(v)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// ParseDate reads YYYY-MM-DD and returns its day ID.
func ParseDate(s string) (int64, error) {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return 0, fmt.Errorf("invalid date %q: want YYYY-MM-DD", s)
	}
	y, m, d := t.Date()
	return civilDays(y, m, d), nil
}

// MonthString returns a month ID as YYYY-MM.
func MonthString(id int64) string {
	y, m := monthDate(id)
	var b [7]byte
	out := appendPad(b[:0], y, 4)
	out = append(out, '-')
	return string(appendPad(out, int(m), 2))
}

// MonthOfDay returns the month ID of a day ID.
func MonthOfDay(day int64) int64 {
	y, m, _ := civilDate(day)
	return MonthID(y, m)
}

// Sliding windows count in steps of a 60th of their length: a minute in
// seconds, an hour in minutes, 10 seconds in 1/6 s. A window counts the
// requests of the current step and of the 60 steps before it, so it never
// admits more than its limit in any window's length; a request leaves it
// 60 to 61 steps after it was admitted.
const (
	ringSteps = 60 // steps in a window
	ringSize  = 64 // buckets kept: the window's 61 and spare ones
)

// step returns the length of a sliding limit's step: its window over 60,
// rounded up to the nanosecond (so 60 steps are never shorter than the
// window).
func (l Limit) step() time.Duration {
	w := l.Window
	if w <= 0 {
		w = time.Minute
		if l.Unit == Hour {
			w = time.Hour
		}
	}
	return (w + ringSteps - 1) / ringSteps
}

// stepAt returns the number of the step t falls in: Unix seconds for a
// minute window, Unix minutes for an hour window.
func (l Limit) stepAt(t time.Time) int64 {
	return floorDiv(t.UnixNano(), int64(l.step()))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// errNoPlan is returned for a plan name no plan has.
var errNoPlan = errors.New("no such plan")
