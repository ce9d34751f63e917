package caddydocker

// Canary releases: the logic, without Caddy.
//
// A service whose replicas carry gateway.version runs versions; one of
// them may carry gateway.canary.* labels, which makes it the service's
// canary and starts a release: the canary gets the labels' weight in
// percent of the service's requests, the other versions (the stable
// side) the rest. A release is named by its id, a hash of the service,
// the canary version and its canary labels: the same labels are the same
// release (a container restarted keeps its release's state), other labels
// a new one.
//
// State: a release's weight and state (running, rolled_back, complete)
// live in a *release, read per request with atomic loads (the selection
// policy, policy.go); what must survive a restart or be shared with the
// fleet is a CanaryRecord (canaryctl.go).

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/gateway/caddyh1"
)

// The states of a release.
const (
	// CanaryRunning: the canary takes its weight, which promotion raises.
	CanaryRunning = "running"
	// CanaryRolledBack: its answers broke a limit; its weight is 0 until
	// its containers' labels change (a new release).
	CanaryRolledBack = "rolled_back"
	// CanaryComplete: promotion reached 100; the other versions take no
	// requests while the canary version has a replica.
	CanaryComplete = "complete"
)

const (
	stateRunning int32 = iota
	stateRolledBack
	stateComplete
)

var stateNames = [...]string{CanaryRunning, CanaryRolledBack, CanaryComplete}

func stateCode(s string) int32 {
	for i, n := range stateNames {
		if n == s {
			return int32(i)
		}
	}
	return stateRunning
}

// CanaryCookie is the cookie that keeps a client without a subject on one
// version: a random token, hashed with the release into the client's
// bucket (0-99); the canary takes the buckets below its weight.
const CanaryCookie = "gateway_canary"

// canaryCookieMaxAge is the cookie's lifetime (30 days).
const canaryCookieMaxAge = 30 * 24 * 3600

// ReleaseID names a release: the service, the canary version and its
// labels.
func ReleaseID(service, version string, spec *CanarySpec) string {
	b, _ := json.Marshal(spec)
	h := sha256.New()
	h.Write([]byte(service))
	h.Write([]byte{0})
	h.Write([]byte(version))
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// The hash of bucket: deterministic on every gateway of a fleet and
// across versions. Eight bytes at a time (little-endian), each step
// xor-multiply by the 64-bit FNV prime, then a final mix.
const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

// saltHash is the hash state after a release's salt and a zero byte.
func saltHash(salt string) uint64 {
	return hashMore(uint64(fnvOffset), salt) * fnvPrime // the zero byte
}

func hashMore(h uint64, s string) uint64 {
	for len(s) >= 8 {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ w) * fnvPrime
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// bucket maps a client key (a subject, a cookie token) to 0-99, per
// release (salted: saltHash of the release id): each release draws its
// own cohort.
func bucket(salted uint64, key string) int {
	h := hashMore(salted, key)
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return int(h % 100)
}

// canaryClient is what the choice reads of a request.
type canaryClient struct {
	header  http.Header
	subject string // the verified identity's subject, "" without one
	cookie  string // the CanaryCookie token, "" without a valid one
}

// choose decides whether a request goes to the canary at weight. With no
// usable subject or cookie (per Sticky) it needs a new cookie token:
// newToken makes one, and it is returned for the caller to set.
func (s *CanarySpec) choose(weight int, salt uint64, c canaryClient, newToken func() string) (canary bool, token string) {
	if s.Header != "" {
		if vs, ok := c.header[s.Header]; ok {
			if s.HeaderValue == "" {
				return true, ""
			}
			for _, v := range vs {
				if strings.TrimSpace(v) == s.HeaderValue {
					return true, ""
				}
			}
		}
	}
	switch {
	case weight <= 0:
		return false, ""
	case weight >= 100:
		return true, ""
	}
	switch s.Sticky {
	case CanaryStickyNone:
		return mrand.IntN(100) < weight, ""
	case CanaryStickySubject:
		if c.subject != "" {
			return bucket(salt, c.subject) < weight, ""
		}
	}
	if c.cookie != "" {
		return bucket(salt, c.cookie) < weight, ""
	}
	token = newToken()
	return bucket(salt, token) < weight, token
}

// newCookieToken returns a random cookie token (16 hex digits).
func newCookieToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cookieToken finds the CanaryCookie's token in a request's Cookie
// fields without allocating; "" when absent or not 8-64 bytes long. The
// token is only hashed: a client that makes up its own picks a version,
// as it could with the header.
func cookieToken(h http.Header) string {
	const name = CanaryCookie + "="
	for _, line := range h["Cookie"] {
		for from := 0; ; {
			i := strings.Index(line[from:], name)
			if i < 0 {
				break
			}
			i += from
			from = i + len(name)
			if i > 0 && line[i-1] != ' ' && line[i-1] != ';' && line[i-1] != '\t' {
				continue // the end of another cookie's name
			}
			val := line[from:]
			if j := strings.IndexByte(val, ';'); j >= 0 {
				val = val[:j]
			}
			if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
				val = val[1 : len(val)-1]
			}
			if len(val) >= 8 && len(val) <= 64 {
				return val
			}
		}
	}
	return ""
}

// setCookie returns the Set-Cookie value for a new token.
func setCookie(token string, secure bool) string {
	v := CanaryCookie + "=" + token + "; Path=/; Max-Age=" + fmt.Sprint(canaryCookieMaxAge) + "; HttpOnly; SameSite=Lax"
	if secure {
		v += "; Secure"
	}
	return v
}

// CanaryFigures are the window's figures that a rollback (or a
// promotion's last step) was decided on.
type CanaryFigures struct {
	// Canary and Stable are the two sides' windows at the decision.
	Canary WindowStats `json:"canary"`
	Stable WindowStats `json:"stable"`
	// Limit names the limit broken ("error_rate", "p99"), on a rollback.
	Limit string `json:"limit,omitempty"`
	// Weight is the canary's weight when it was decided.
	Weight int `json:"weight"`
}

// release is one canary release as requests see it.
type release struct {
	service string
	id      string
	salt    uint64   // saltHash(id)
	version string   // the canary version
	stable  []string // the versions on the stable side
	spec    CanarySpec

	weight atomic.Int32
	state  atomic.Int32
	win    [2]*window    // [0] stable, [1] canary
	obs    [2]*sideWatch // the answer observers of the two sides
	dials  sync.Map      // dialKey -> *dialWatch: each replica's observer
	// starting counts connection failures of replicas that had not
	// answered yet, within ReplicaStartGrace of joining (not judged)
	starting atomic.Int64
	// events the controller reports (log, audit, fleet): bits below
	pending atomic.Uint32
	kick    func()

	mu        sync.Mutex
	started   time.Time // when this gateway took the release up
	changedAt time.Time // when its weight last changed here: the promotion clock
	ended     time.Time // when it was rolled back or completed
	reason    string    // why it was rolled back, for people
	figures   *CanaryFigures
	by        string // the fleet node that rolled it back or completed it ("": this gateway)
	waiting   string // why the next promotion step waits
	rev       uint64 // revision of the fleet record adopted
	created   bool   // its fleet record exists (or there is no fleet)
	// held is the weight a new release takes once its fleet record is
	// written (-1: not held): until then this gateway sends it nothing
	// but header-routed requests, as another gateway may already have
	// rolled it back.
	held int32
}

// pending event bits
const (
	pendRolledBack uint32 = 1 << iota // rolled back here: log, audit, write
	pendWrite                         // write the record (state file, fleet)
)

func newRelease(service, version string, stable []string, spec CanarySpec, kick func()) *release {
	r := &release{service: service, version: version, stable: stable, spec: spec, kick: kick,
		id: ReleaseID(service, version, &spec), held: -1}
	r.salt = saltHash(r.id)
	for i := range r.win {
		r.win[i] = newWindow(spec.Window, spec.MaxP99)
		r.obs[i] = &sideWatch{rel: r, canary: i == 1}
	}
	r.weight.Store(int32(spec.Weight))
	now := time.Now()
	r.started, r.changedAt = now, now
	return r
}

// State returns the release's state name.
func (r *release) State() string { return stateNames[r.state.Load()] }

// sideWatch observes the answers of one side of a release (it is the
// caddyh1.AnswerObserver the selection policy sets on a request).
type sideWatch struct {
	rel    *release
	canary bool
}

func (o *sideWatch) side() int {
	if o.canary {
		return 1
	}
	return 0
}

// ObserveAnswer counts one answer in its side's window; on the canary's
// side it rolls the release back the moment the window breaks a limit.
func (o *sideWatch) ObserveAnswer(status int, err error, latency time.Duration) {
	if err != nil && errors.Is(err, context.Canceled) {
		return // the client went away: not the upstream's doing
	}
	r := o.rel
	now := time.Now()
	n, fail, slow := r.win[o.side()].add(now, err != nil || status >= 500, latency)
	if !o.canary || r.state.Load() != stateRunning {
		return
	}
	if over, limit := overLimits(&r.spec, n, fail, slow); over {
		r.rollback(now, limit)
	}
}

// ReplicaStartGrace is how long after a replica joins a release its
// connection failures are not counted, until it first answers: a
// container that `podman run` just started may not listen yet (without a
// health check it is routed at once). A replica that never answers is
// judged once the grace is over.
var ReplicaStartGrace = 10 * time.Second

type dialKey struct {
	dial string
	side uint8
}

// dialWatch observes the answers of one replica of a release: what the
// selection policy sets on a request for the replica it chose.
type dialWatch struct {
	side     *sideWatch
	joined   time.Time
	answered atomic.Bool
}

// watchOf returns the observer of a replica on a side (0 stable, 1
// canary, 2 retired: counted on the stable side), made when the replica
// first joins the release.
func (r *release) watchOf(dial string, side uint8) *dialWatch {
	k := dialKey{dial, side}
	if v, ok := r.dials.Load(k); ok {
		return v.(*dialWatch)
	}
	o := r.obs[0]
	if side == 1 {
		o = r.obs[1]
	}
	v, _ := r.dials.LoadOrStore(k, &dialWatch{side: o, joined: time.Now()})
	return v.(*dialWatch)
}

// ObserveAnswer counts the answer on the replica's side, except a
// failure to connect to a replica that has not answered yet and joined
// less than ReplicaStartGrace ago.
func (d *dialWatch) ObserveAnswer(status int, err error, latency time.Duration) {
	if err == nil {
		if !d.answered.Load() {
			d.answered.Store(true)
		}
	} else if !d.answered.Load() && time.Since(d.joined) < ReplicaStartGrace && errors.As(err, new(*caddyh1.DialError)) {
		d.side.rel.starting.Add(1)
		return
	}
	d.side.ObserveAnswer(status, err, latency)
}

// rollback takes the canary out at once: weight 0, state rolled_back.
// The rest (log, audit, metric, fleet) is the controller's, off the
// request path. It reports whether this call rolled it back.
func (r *release) rollback(now time.Time, limit string) bool {
	if !r.state.CompareAndSwap(stateRunning, stateRolledBack) {
		return false
	}
	before := r.weight.Swap(0)
	fig := &CanaryFigures{Canary: r.win[1].stats(now), Stable: r.win[0].stats(now), Limit: limit, Weight: int(before)}
	r.mu.Lock()
	r.ended, r.figures, r.by, r.waiting = now, fig, "", ""
	r.reason = rollbackReason(&r.spec, fig)
	r.mu.Unlock()
	r.pending.Or(pendRolledBack | pendWrite)
	if r.kick != nil {
		r.kick()
	}
	return true
}

// rollbackReason says which limit the figures broke, for people.
func rollbackReason(spec *CanarySpec, fig *CanaryFigures) string {
	c := fig.Canary
	if fig.Limit == "p99" {
		return fmt.Sprintf("p99 %s above max_p99 %s (%d of %d answers slower) in the window",
			c.P99, spec.MaxP99, c.Slow, c.Requests)
	}
	return fmt.Sprintf("error rate %.1f%% above max_error_rate %g%% (%d of %d answers failed) in the window",
		c.ErrorRate, spec.MaxErrorRate, c.Failures, c.Requests)
}

// split is what a service's routes read per request when it runs a
// release: which replicas are the canary's, which are retired (versions a
// completed release replaced, or a canary rolled back while another took
// its place: they take requests only when no other replica can).
type split struct {
	rel     *release
	canary  []string
	retired []string
}

func (s *split) side(dial string) uint8 {
	for _, d := range s.canary {
		if d == dial {
			return 1
		}
	}
	for _, d := range s.retired {
		if d == dial {
			return 2
		}
	}
	return 0
}

func (s *split) equal(o *split) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.rel == o.rel && equalStrings(s.canary, o.canary) && equalStrings(s.retired, o.retired)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
