package caddyquota

import (
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apigate/gateway/internal/planname"
)

// MaxLimits is the most limits a plan has: one per unit (two sliding
// windows, a day and a month).
const MaxLimits = 4

// Plan is a named set of limits, at most one per unit, shortest unit
// first. A plan without limits meters its consumers without refusing.
type Plan struct {
	Name   string
	Limits []Limit

	// policy caches the RateLimit-Policy field value for one day: a
	// calendar window's w is the length of the current period (a month
	// of 28 to 31 days, a day of 23 to 25 hours).
	policy atomic.Pointer[policyField]

	// nameValue is Name as an interface value, made once: the replacer's
	// http.quota.plan without an allocation per request.
	nameValue any

	// rateLimitPrefix is, per limit, what its part of the RateLimit
	// field has before the number of requests left: `"free-day";r=`
	// (with ", " before all but the first)
	rateLimitPrefix []string
}

type policyField struct {
	day   int64
	value []string // one element, cap 1: safe to share between responses
}

// NewPlan checks and orders the limits of a plan: at most one per
// calendar window and two sliding windows of different lengths; of two
// sliding windows the shorter counts as Minute and the longer as Hour.
func NewPlan(name string, limits []Limit) (*Plan, error) {
	if err := planname.Check(name); err != nil {
		return nil, err
	}
	ls := append([]Limit(nil), limits...)
	var sliding []int
	for i, l := range ls {
		if l.Unit < Minute || l.Unit > Month {
			return nil, fmt.Errorf("plan %s: invalid window %v", name, l.Unit)
		}
		if l.N < 0 || l.N > MaxLimit {
			return nil, fmt.Errorf("plan %s: invalid limit %s", name, l)
		}
		if !l.Unit.Calendar() {
			if l.Window == 0 {
				ls[i].Window = Limit{Unit: l.Unit}.step() * ringSteps
			}
			if ls[i].Window < MinWindow || ls[i].Window > MaxWindow {
				return nil, fmt.Errorf("plan %s: invalid limit %s: a sliding window is %s to %s long", name, l, MinWindow, windowName(MaxWindow))
			}
			sliding = append(sliding, i)
		}
	}
	switch {
	case len(sliding) > 2:
		return nil, fmt.Errorf("plan %s: %d sliding windows (%s, %s, %s...): give at most two", name, len(sliding), ls[sliding[0]], ls[sliding[1]], ls[sliding[2]])
	case len(sliding) == 2:
		a, b := &ls[sliding[0]], &ls[sliding[1]]
		if a.Window == b.Window {
			return nil, fmt.Errorf("plan %s: two limits per %s (%s and %s): give one", name, a.WindowName(), *a, *b)
		}
		if a.Window > b.Window {
			a, b = b, a
		}
		a.Unit, b.Unit = Minute, Hour
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Unit < ls[j].Unit })
	for i := 1; i < len(ls); i++ {
		if ls[i-1].Unit == ls[i].Unit {
			return nil, fmt.Errorf("plan %s: two limits per %s (%s and %s): give one", name, ls[i].WindowName(), ls[i-1], ls[i])
		}
	}
	p := &Plan{Name: name, Limits: ls, nameValue: name}
	for i := range ls {
		sep := ""
		if i > 0 {
			sep = ", "
		}
		p.rateLimitPrefix = append(p.rateLimitPrefix, sep+`"`+p.policyName(i)+`";r=`)
	}
	return p, nil
}

// Limit returns the plan's limit for a unit, if it has one.
func (p *Plan) Limit(u Unit) (Limit, bool) {
	for _, l := range p.Limits {
		if l.Unit == u {
			return l, true
		}
	}
	return Limit{}, false
}

// String returns the plan as configured: "free 1000/day 20000/month".
func (p *Plan) String() string {
	s := p.Name
	for _, l := range p.Limits {
		s += " " + l.String()
	}
	return s
}

// Decision is the outcome of one request against its plan's limits.
type Decision struct {
	// Admitted is false when a limit refused the request (never in dry
	// run).
	Admitted bool
	// Over is true when a limit was reached: the request was refused, or
	// (dry run) would have been.
	Over bool
	// Windows are the limits' states after the request, in the plan's
	// order (N of them).
	Windows [MaxLimits]WindowState
	N       int
	// Binding is the index of the window that refused (the one that
	// resets last), or -1.
	Binding int
	// Share is set when the fleet's counts could not be reached and the
	// gateway decided on its share of the quota alone.
	Share bool
	// Late is set when a window refused because its lease waited for
	// another gateway's read of the fleet's counts for longer than
	// lease_wait: the request may be sent again in a moment (the
	// window's reset is a sync interval away).
	Late bool
}

// WindowState is one limit's state for a consumer after a request.
type WindowState struct {
	// Remaining is how many more requests the window admits now.
	Remaining int64
	// Reset is when (Unix nanoseconds) the window next admits more: a
	// calendar window's end; for a sliding window, when its oldest
	// counted step leaves it (now plus the window when it counts
	// nothing).
	Reset int64
}

// Reset returns when the binding window resets, the one that refused.
func (d *Decision) Reset() time.Time {
	if d.Binding < 0 || d.Binding >= d.N {
		return time.Time{}
	}
	return time.Unix(0, d.Windows[d.Binding].Reset)
}

// bind sets Binding to the window, among the full ones, that resets last
// (Retry-After must not point before any of them), and Over.
func (d *Decision) bind(full [MaxLimits]bool) {
	d.Binding = -1
	for i := 0; i < d.N; i++ {
		if full[i] && (d.Binding < 0 || d.Windows[i].Reset > d.Windows[d.Binding].Reset) {
			d.Binding = i
		}
	}
	d.Over = d.Binding >= 0
}

// policyName is a limit's name in the RateLimit fields:
// "<plan>-<window>" ("free-day", "api-minute", "login-10s").
func (p *Plan) policyName(i int) string { return p.Name + "-" + p.Limits[i].WindowName() }

// PolicyField returns the RateLimit-Policy field value for the plan, as
// a one-element slice that may be shared between responses (do not
// modify it): `"free-day";q=1000;w=86400, "free-month";q=20000;w=2678400`.
// w is the current period's length for calendar windows. It is cached for
// the day.
func (p *Plan) PolicyField(day, month Period) []string {
	if f := p.policy.Load(); f != nil && f.day == day.ID {
		return f.value
	}
	var b []byte
	for i, l := range p.Limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, p.policyName(i)...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, l.N, 10)
		b = append(b, ";w="...)
		var w int64
		switch l.Unit {
		case Day:
			w = day.Seconds()
		case Month:
			w = month.Seconds()
		default:
			w = int64((l.Window + time.Second - 1) / time.Second)
		}
		b = strconv.AppendInt(b, w, 10)
	}
	f := &policyField{day: day.ID, value: []string{string(b)}}
	p.policy.Store(f)
	return f.value
}

// AppendRateLimitField appends the RateLimit field value for a decision
// at now: `"free-day";r=999;t=43200, "free-month";r=19999;t=1234567`,
// r the requests left, t the seconds until the window resets (rounded
// up).
func (p *Plan) AppendRateLimitField(b []byte, d *Decision, now time.Time) []byte {
	for i := 0; i < d.N && i < len(p.Limits); i++ {
		if i < len(p.rateLimitPrefix) {
			b = append(b, p.rateLimitPrefix[i]...)
		} else { // a Plan not made by NewPlan
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = append(b, p.policyName(i)...)
			b = append(b, `";r=`...)
		}
		b = strconv.AppendInt(b, d.Windows[i].Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, secondsUntil(d.Windows[i].Reset, now), 10)
	}
	return b
}

// rateLimitValue is a RateLimit field's value with the bytes it is made
// of, in one allocation: the header map's one-element slice and the
// string, whose bytes are buf's (never written after).
type rateLimitValue struct {
	values [1]string
	buf    [112]byte
}

// RateLimitField returns the RateLimit field's value for a decision at
// now (AppendRateLimitField) as a header map's value, in one allocation
// for the usual plan (two for a value longer than 112 bytes).
func (p *Plan) RateLimitField(d *Decision, now time.Time) []string {
	v := new(rateLimitValue)
	b := p.AppendRateLimitField(v.buf[:0], d, now)
	if len(b) > 0 && unsafe.SliceData(b) == &v.buf[0] {
		v.values[0] = unsafe.String(&v.buf[0], len(b))
	} else {
		v.values[0] = string(b)
	}
	return v.values[:]
}

// secondsUntil is the whole seconds from now until the Unix nanosecond
// instant at, rounded up, never negative.
func secondsUntil(at int64, now time.Time) int64 {
	d := at - now.UnixNano()
	if d <= 0 {
		return 0
	}
	return (d + int64(time.Second) - 1) / int64(time.Second)
}

// RetryAfter is the Retry-After value of a refusal: the seconds until the
// binding window resets, at least 1.
func (d *Decision) RetryAfter(now time.Time) int64 {
	if d.Binding < 0 {
		return 0
	}
	s := secondsUntil(d.Windows[d.Binding].Reset, now)
	if s < 1 {
		s = 1
	}
	return s
}
