package caddydocker

// The canary controller: one per watcher. It turns the plan's versions
// into releases and splits (which the routes read per request), raises
// weights step by step, reports rollbacks (log, audit, metric), keeps each
// release's record in a file beside the state file, so that a restarted
// gateway keeps a rolled-back canary at 0, and, with a fleet, in the
// fleet's KV bucket, so that every gateway applies the same weights and
// the same rollback.
//
// Requests never wait on it: a rollback is decided on the request path
// (release.rollback: two atomic stores) and the controller does the rest
// from its own goroutine.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/atomicfile"
)

// CanaryRecord is what outlives a release's in-memory state: its weight
// and state, and why it ended. It is the value of the release's key in
// the fleet's bucket and an entry of the canary state file.
type CanaryRecord struct {
	// V is the format version (1).
	V int `json:"v"`
	// Service, Release and Version name the release (Version is the
	// canary version); Stable are the versions on the other side.
	Service string   `json:"service"`
	Release string   `json:"release"`
	Version string   `json:"version"`
	Stable  []string `json:"stable,omitempty"`
	// Weight is the canary's share in percent; State is running,
	// rolled_back or complete.
	Weight int    `json:"weight"`
	State  string `json:"state"`
	// Node is the fleet node that wrote the state ("" without a fleet).
	Node string `json:"node,omitempty"`
	// Updated is when the writer wrote it (its clock).
	Updated time.Time `json:"updated"`
	// Since is when the release began: when the first gateway took it
	// up (its clock).
	Since time.Time `json:"since,omitzero"`
	// Ended is when it was rolled back or completed; Reason and Figures
	// say why it was rolled back.
	Ended   time.Time      `json:"ended,omitzero"`
	Reason  string         `json:"reason,omitempty"`
	Figures *CanaryFigures `json:"figures,omitempty"`
}

// Auditor records audit events that no request caused. The audit app
// (caddyaudit.App) is one; the docker app hands its config's audit app to
// the watcher at Start.
type Auditor interface {
	RecordNotice(kind, id string, at time.Time, fields map[string]any) error
}

// The audit event kinds of releases.
const (
	AuditCanaryRollback = "canary_rollback"
	AuditCanaryPromoted = "canary_promoted"
)

// canaryStore is what the controller needs of the fleet (*Fleet).
type canaryStore interface {
	// CanaryRecord returns the record of a release as the bucket watch
	// last delivered it, its revision and when it arrived (local time).
	CanaryRecord(service, release string) (CanaryRecord, uint64, time.Time, bool)
	// PutCanary writes a record: created when rev is 0 (failing if it
	// exists), else replaced if its revision is still rev.
	PutCanary(ctx context.Context, rec CanaryRecord, rev uint64) (uint64, error)
	// GetCanary reads a record from the bucket.
	GetCanary(ctx context.Context, service, release string) (CanaryRecord, uint64, bool, error)
	// CanaryChanged is signalled when a record arrived.
	CanaryChanged() <-chan struct{}
	// CanaryRefresh is how often a record is re-put (the bucket drops
	// keys after its max age).
	CanaryRefresh() time.Duration
	// Node is this gateway's node name.
	Node() string
	// CanaryWritable reports whether records can be written now (the
	// bucket is bound and NATS connected): while not, the controller
	// neither writes nor promotes, and writes what changed when it can.
	CanaryWritable() bool
}

// canaryTick is how often the controller checks promotions.
var canaryTick = 200 * time.Millisecond

// canaryForget is how long the record of a release that is no longer
// running stays in the state file.
const canaryForget = 7 * 24 * time.Hour

type canaries struct {
	server string
	log    *zap.Logger
	m      *metrics
	store  canaryStore
	file   string
	kickCh chan struct{}
	audit  atomic.Pointer[auditorBox]

	loadOnce sync.Once
	mu       sync.Mutex
	active   map[string]*release     // service -> its current release
	records  map[string]CanaryRecord // release id -> last record
	warned   map[string]bool
	dirty    bool // records changed since the file was written
}

type auditorBox struct{ Auditor }

func newCanaries(server, file string, store canaryStore, m *metrics, log *zap.Logger) *canaries {
	return &canaries{server: server, file: file, store: store, m: m, log: log,
		kickCh: make(chan struct{}, 1), active: map[string]*release{}, records: map[string]CanaryRecord{}, warned: map[string]bool{}}
}

func (c *canaries) kick() {
	select {
	case c.kickCh <- struct{}{}:
	default:
	}
}

// setAuditor sets where audit events go (nil: nowhere).
func (c *canaries) setAuditor(a Auditor) {
	if a == nil {
		c.audit.Store(nil)
		return
	}
	c.audit.Store(&auditorBox{a})
}

// canaryFile is the canary state file beside the route state file.
func canaryFile(stateFile string) string {
	if stateFile == "" {
		return ""
	}
	return strings.TrimSuffix(stateFile, ".json") + "-canary.json"
}

type canaryFileContent struct {
	Version  int            `json:"version"`
	Written  time.Time      `json:"written"`
	Releases []CanaryRecord `json:"releases"`
}

func (c *canaries) loadFile() {
	if c.file == "" {
		return
	}
	b, err := os.ReadFile(c.file)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Error("reading the canary state file", zap.String("path", c.file), zap.Error(err))
		}
		return
	}
	var f canaryFileContent
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
		c.log.Error("reading the canary state file", zap.String("path", c.file), zap.Error(err), zap.Int("version", f.Version))
		return
	}
	c.mu.Lock()
	for _, r := range f.Releases {
		c.records[r.Release] = r
	}
	c.mu.Unlock()
}

func (c *canaries) writeFile() {
	c.mu.Lock()
	if !c.dirty || c.file == "" {
		c.mu.Unlock()
		return
	}
	c.dirty = false
	now := time.Now()
	f := canaryFileContent{Version: 1, Written: now.UTC()}
	for id, r := range c.records {
		if c.isActive(id) || now.Sub(r.Updated) < canaryForget {
			f.Releases = append(f.Releases, r)
		}
	}
	c.mu.Unlock()
	sort.Slice(f.Releases, func(i, j int) bool { return f.Releases[i].Release < f.Releases[j].Release })
	b, _ := json.MarshalIndent(f, "", "  ")
	err := os.MkdirAll(filepath.Dir(c.file), 0o700)
	if err == nil {
		err = atomicfile.Write(c.file, append(b, '\n'), 0o600)
	}
	if err != nil {
		c.log.Error("writing the canary state file", zap.String("path", c.file), zap.Error(err))
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
	}
}

// isActive reports whether a release id is in use (c.mu held).
func (c *canaries) isActive(id string) bool {
	for _, r := range c.active {
		if r.id == id {
			return true
		}
	}
	return false
}

// stateOf returns a release's state as far as this gateway knows it
// ("" for a release never seen).
func (c *canaries) stateOf(svc, id string) (string, time.Time) {
	if r := c.active[svc]; r != nil && r.id == id {
		r.mu.Lock()
		ended := r.ended
		r.mu.Unlock()
		return r.State(), ended
	}
	if c.store != nil {
		if rec, _, _, ok := c.store.CanaryRecord(svc, id); ok {
			return rec.State, rec.Ended
		}
	}
	if rec, ok := c.records[id]; ok {
		return rec.State, rec.Ended
	}
	return "", time.Time{}
}

// recordOf returns the best record of a release: the fleet's, else the
// file's.
func (c *canaries) recordOf(svc, id string) (CanaryRecord, uint64, bool) {
	if c.store != nil {
		if rec, rev, _, ok := c.store.CanaryRecord(svc, id); ok {
			return rec, rev, true
		}
	}
	rec, ok := c.records[id]
	return rec, 0, ok
}

// splits turns the plan's versions into each service's split, taking up
// new releases and dropping those whose canary has no replica left. It
// returns warnings about services with several canary versions.
func (c *canaries) splits(versions map[string][]VersionGroup) (map[string]*split, []string) {
	c.loadOnce.Do(c.loadFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*split{}
	var warnings []string
	now := time.Now()
	seen := map[string]bool{}
	for svc, groups := range versions {
		sp, warn := c.splitFor(svc, groups, now)
		if warn != "" {
			warnings = append(warnings, warn)
		}
		if sp != nil {
			out[svc] = sp
			seen[svc] = true
		}
	}
	for svc, r := range c.active {
		if !seen[svc] {
			delete(c.active, svc)
			c.m.canaryWeight.DeleteLabelValues(svc)
			c.log.Info("canary release no longer in use: its version has no routed replica",
				zap.String("service", svc), zap.String("version", r.version), zap.String("release", r.id),
				zap.String("state", r.State()))
		}
	}
	sort.Strings(warnings)
	for _, w := range warnings {
		if !c.warned[w] {
			c.log.Warn("canary conflict", zap.String("detail", w))
		}
	}
	c.warned = map[string]bool{}
	for _, w := range warnings {
		c.warned[w] = true
	}
	return out, warnings
}

// splitFor resolves one service's versions (c.mu held).
func (c *canaries) splitFor(svc string, groups []VersionGroup, now time.Time) (*split, string) {
	type cand struct {
		g     VersionGroup
		id    string
		state string
		ended time.Time
	}
	var fresh, rolled, done []cand
	for _, g := range groups {
		if g.Canary == nil {
			continue
		}
		id := ReleaseID(svc, g.Version, g.Canary)
		st, ended := c.stateOf(svc, id)
		x := cand{g, id, st, ended}
		switch st {
		case CanaryComplete:
			done = append(done, x)
		case CanaryRolledBack:
			rolled = append(rolled, x)
		default:
			fresh = append(fresh, x)
		}
	}
	// pick: the active release if it is among them, else the last
	// version (groups are sorted by version)
	pick := func(cs []cand) (cand, []cand) {
		i := len(cs) - 1
		if cur := c.active[svc]; cur != nil {
			for j, x := range cs {
				if x.id == cur.id {
					i = j
				}
			}
		}
		rest := slices.Clone(cs)
		return cs[i], slices.Delete(rest, i, i+1)
	}
	var cur cand
	var retired []cand
	warn := ""
	switch {
	case len(fresh) > 0:
		var others []cand
		cur, others = pick(fresh)
		retired = append(append(retired, others...), rolled...)
		if len(others) > 0 {
			names := make([]string, 0, len(others))
			for _, o := range others {
				names = append(names, o.g.Version)
			}
			warn = fmt.Sprintf("service %s: versions %s and %s both carry gateway.canary.* labels; %s is the canary, %s take requests only when no other replica can",
				svc, strings.Join(names, ", "), cur.g.Version, cur.g.Version, strings.Join(names, ", "))
		}
	case len(done)+len(rolled) > 0:
		// No release runs: the one that ended last is the service's
		// release (a canary completed after an older one was rolled back
		// stays the release, at 100, while the rolled-back version's
		// containers still run; a rollback after a completed release is
		// the news). The other rolled-back versions step aside; the
		// versions the other completed releases replaced are retired.
		ended := append(slices.Clone(done), rolled...)
		sort.SliceStable(ended, func(i, j int) bool {
			if !ended[i].ended.Equal(ended[j].ended) {
				return ended[i].ended.Before(ended[j].ended)
			}
			return ended[i].state == CanaryRolledBack && ended[j].state == CanaryComplete
		})
		if act := c.active[svc]; act != nil {
			// the one in use stays when it ended as late as any
			last := ended[len(ended)-1].ended
			for i, x := range ended {
				if x.id == act.id && x.ended.Equal(last) {
					ended = append(slices.Delete(ended, i, i+1), x)
					break
				}
			}
		}
		cur = ended[len(ended)-1]
		done = done[:0]
		for _, x := range ended[:len(ended)-1] {
			if x.state == CanaryComplete {
				done = append(done, x)
			} else {
				retired = append(retired, x)
			}
		}
	default:
		return nil, ""
	}
	// Versions a completed release replaced are retired, as are the
	// versions of releases that lost their place.
	retiredVersions := map[string]bool{}
	for _, x := range retired {
		retiredVersions[x.g.Version] = true
	}
	for _, x := range done {
		if x.g.Version != cur.g.Version {
			if rec, _, ok := c.recordOf(svc, x.id); ok {
				for _, v := range rec.Stable {
					retiredVersions[v] = true
				}
			}
		}
	}
	delete(retiredVersions, cur.g.Version)
	sp := &split{}
	var stable []string
	for _, g := range groups {
		switch {
		case g.Version == cur.g.Version:
			sp.canary = append(sp.canary, g.Dials...)
		case retiredVersions[g.Version]:
			sp.retired = append(sp.retired, g.Dials...)
		default:
			stable = append(stable, g.Version)
		}
	}
	sort.Strings(sp.canary)
	sort.Strings(sp.retired)

	r := c.active[svc]
	if r == nil || r.id != cur.id {
		r = newRelease(svc, cur.g.Version, stable, *cur.g.Canary, c.kick)
		if rec, rev, ok := c.recordOf(svc, cur.id); ok {
			r.adopt(rec, rev, now)
			r.created = c.store == nil || rev > 0
		} else {
			r.created = c.store == nil
			r.pending.Or(pendWrite)
			if r.spec.Weight >= 100 {
				r.state.Store(stateComplete)
				r.ended = now
			} else if c.store != nil {
				r.held = r.weight.Swap(0)
				r.waiting = "waiting for the release's record in the fleet bucket"
			}
		}
		c.active[svc] = r
		c.m.canaryWeight.WithLabelValues(svc).Set(float64(r.weight.Load()))
		c.log.Info("canary release", zap.String("service", svc), zap.String("version", r.version),
			zap.Strings("stable", stable), zap.String("release", r.id), zap.String("state", r.State()),
			zap.Int32("weight", r.weight.Load()), zap.Int("step", r.spec.Step), zap.String("interval", r.spec.Interval.String()))
		c.kick()
	} else {
		r.mu.Lock()
		r.stable = stable
		r.mu.Unlock()
	}
	sp.rel = r
	return sp, warn
}

// adopt applies a record of this release that another gateway (or an
// earlier run of this one) wrote. A rollback known here is never undone.
func (r *release) adopt(rec CanaryRecord, rev uint64, now time.Time) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev > 0 && rev <= r.rev {
		return false
	}
	if rev > 0 {
		r.rev = rev
	}
	r.created = true
	if r.held >= 0 {
		r.held, r.waiting = -1, ""
	}
	// The release began when its first gateway took it up, not when
	// this one (or this run) did; a record without it began at the
	// latest when it ended.
	if !rec.Since.IsZero() && rec.Since.Before(r.started) {
		r.started = rec.Since
	}
	if !rec.Ended.IsZero() && rec.Ended.Before(r.started) {
		r.started = rec.Ended
	}
	cur := r.state.Load()
	switch stateCode(rec.State) {
	case stateRolledBack:
		if cur == stateRolledBack {
			return false
		}
		r.state.Store(stateRolledBack)
		r.weight.Store(0)
		r.ended, r.reason, r.figures, r.by, r.waiting = rec.Ended, rec.Reason, rec.Figures, rec.Node, ""
		return true
	case stateComplete:
		if cur != stateRunning {
			return false
		}
		r.state.Store(stateComplete)
		r.weight.Store(100)
		r.ended, r.by, r.waiting, r.changedAt = rec.Ended, rec.Node, "", now
		return true
	default:
		if cur != stateRunning || int(r.weight.Load()) == rec.Weight {
			return false
		}
		r.weight.Store(int32(rec.Weight))
		r.changedAt = now
		return true
	}
}

// record returns the release's record as this gateway knows it.
func (r *release) record(node string) CanaryRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := CanaryRecord{V: 1, Service: r.service, Release: r.id, Version: r.version, Stable: r.stable,
		Weight: int(r.weight.Load()), State: r.State(), Node: node, Updated: time.Now().UTC(),
		Since: r.started.UTC(), Ended: r.ended, Reason: r.reason, Figures: r.figures}
	if r.by != "" {
		rec.Node = r.by
	}
	if r.held >= 0 {
		rec.Weight = int(r.held)
	}
	return rec
}

// run is the controller's goroutine.
func (c *canaries) run(ctx context.Context) {
	tick := time.NewTicker(canaryTick)
	defer tick.Stop()
	var changed <-chan struct{}
	if c.store != nil {
		changed = c.store.CanaryChanged()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kickCh:
		case <-tick.C:
		case <-changed:
			c.adoptAll(time.Now())
		}
		c.work(ctx, time.Now())
	}
}

func (c *canaries) releases() []*release {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*release, 0, len(c.active))
	for _, r := range c.active {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].service < out[j].service })
	return out
}

// adoptAll applies the fleet's records to the releases in use.
func (c *canaries) adoptAll(now time.Time) {
	for _, r := range c.releases() {
		rec, rev, _, ok := c.store.CanaryRecord(r.service, r.id)
		if !ok {
			continue
		}
		before := r.State()
		if r.adopt(rec, rev, now) {
			c.m.canaryWeight.WithLabelValues(r.service).Set(float64(r.weight.Load()))
			c.remember(rec)
			switch after := r.State(); {
			case after == CanaryRolledBack && before != after:
				c.log.Warn("canary rolled back by another gateway of the fleet", zap.String("service", r.service),
					zap.String("version", r.version), zap.String("release", r.id), zap.String("by", rec.Node), zap.String("reason", rec.Reason))
			case after == CanaryComplete && before != after:
				c.log.Info("canary release complete (promoted by another gateway of the fleet)", zap.String("service", r.service),
					zap.String("version", r.version), zap.String("release", r.id), zap.String("by", rec.Node))
			default:
				c.log.Info("canary weight changed by another gateway of the fleet", zap.String("service", r.service),
					zap.String("version", r.version), zap.Int("weight", rec.Weight), zap.String("by", rec.Node))
			}
		}
	}
}

// remember keeps a record for the state file.
func (c *canaries) remember(rec CanaryRecord) {
	c.mu.Lock()
	c.records[rec.Release] = rec
	c.dirty = true
	c.mu.Unlock()
}

// work reports rollbacks, takes promotion steps that are due and writes
// records that changed.
func (c *canaries) work(ctx context.Context, now time.Time) {
	writable := c.store == nil || c.store.CanaryWritable()
	for _, r := range c.releases() {
		p := r.pending.Swap(0)
		if p&pendRolledBack != 0 {
			c.reportRollback(r)
		}
		if !writable {
			// NATS is away: the fleet cannot agree on a step, and a
			// write would only wait for its timeout
			r.pending.Or(p & pendWrite)
			continue
		}
		if c.promote(ctx, r, now) {
			p |= pendWrite
		}
		if p&pendWrite != 0 || !r.created {
			if !c.write(ctx, r) {
				r.pending.Or(pendWrite) // again at the next tick
			}
		} else if c.store != nil {
			c.refresh(ctx, r, now)
		}
	}
	c.writeFile()
}

// reportRollback logs, audits and counts a rollback decided here.
func (c *canaries) reportRollback(r *release) {
	r.mu.Lock()
	fig, reason, stable := r.figures, r.reason, slices.Clone(r.stable)
	at := r.ended
	r.mu.Unlock()
	c.m.canaryRollbacks.WithLabelValues(r.service).Inc()
	c.m.canaryWeight.WithLabelValues(r.service).Set(0)
	fields := []zap.Field{zap.String("service", r.service), zap.String("version", r.version),
		zap.Strings("stable", stable), zap.String("release", r.id), zap.String("reason", reason)}
	if fig != nil {
		fields = append(fields, zap.Int("requests", fig.Canary.Requests), zap.Int("failures", fig.Canary.Failures),
			zap.Float64("error_rate", fig.Canary.ErrorRate), zap.Float64("p99_ms", fig.Canary.P99MS),
			zap.Float64("stable_error_rate", fig.Stable.ErrorRate), zap.Float64("stable_p99_ms", fig.Stable.P99MS))
	}
	c.log.Error("canary rolled back", fields...)
	c.notice(AuditCanaryRollback, r, at, fig, reason, stable)
}

// notice writes an audit event of a release.
func (c *canaries) notice(kind string, r *release, at time.Time, fig *CanaryFigures, reason string, stable []string) {
	box := c.audit.Load()
	if box == nil {
		return
	}
	if stable == nil {
		stable = []string{}
	}
	f := map[string]any{
		"service": r.service, "release": r.id, "canary_version": r.version, "stable_versions": stable,
		"weight": int(r.weight.Load()),
	}
	if fig != nil && kind == AuditCanaryRollback {
		f["weight_before"] = fig.Weight
	}
	if c.store != nil {
		f["node"] = c.store.Node()
	}
	if reason != "" {
		f["reason"] = reason
	}
	if fig != nil {
		f["requests"], f["failures"] = fig.Canary.Requests, fig.Canary.Failures
		f["error_rate"], f["p99_ms"] = fig.Canary.ErrorRate, fig.Canary.P99MS
		f["stable_requests"], f["stable_error_rate"] = fig.Stable.Requests, fig.Stable.ErrorRate
		f["stable_p99_ms"] = fig.Stable.P99MS
		if fig.Limit != "" {
			f["limit"] = fig.Limit
		}
	}
	if err := box.RecordNotice(kind, kind+"-"+r.id, at, f); err != nil {
		c.log.Error("audit event of a canary release not recorded", zap.String("kind", kind),
			zap.String("service", r.service), zap.Error(err))
	}
}

// promote raises a running release's weight by its step when the
// interval has passed and the canary's window is within its limits with
// enough answers. It reports whether the weight changed.
func (c *canaries) promote(ctx context.Context, r *release, now time.Time) bool {
	spec := &r.spec
	if spec.Step <= 0 || r.state.Load() != stateRunning {
		return false
	}
	r.mu.Lock()
	due := r.changedAt.Add(spec.Interval)
	held := r.held >= 0
	r.mu.Unlock()
	if held {
		return false
	}
	if now.Before(due) {
		return false
	}
	cs := r.win[1].stats(now)
	if cs.Requests < spec.MinRequests {
		c.wait(r, fmt.Sprintf("the window holds %d of the canary's answers; min_requests is %d", cs.Requests, spec.MinRequests))
		return false
	}
	if over, limit := overLimits(spec, uint32(cs.Requests), uint32(cs.Failures), uint32(cs.Slow)); over {
		r.rollback(now, limit)
		return false
	}
	next := min(int(r.weight.Load())+spec.Step, 100)
	if c.store != nil {
		// One gateway of the fleet takes the step: the first whose
		// write finds the record as it knows it.
		rec := r.record(c.store.Node())
		rec.Weight = next
		if next >= 100 {
			rec.State, rec.Ended = CanaryComplete, now.UTC()
		}
		r.mu.Lock()
		rev := r.rev
		r.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		newRev, err := c.store.PutCanary(wctx, rec, rev)
		cancel()
		if err != nil {
			// another gateway stepped first (or NATS is away): take
			// what the bucket says, and try again at the next interval
			c.refetch(ctx, r, now)
			return false
		}
		r.mu.Lock()
		r.rev = newRev
		r.mu.Unlock()
		c.remember(rec)
	}
	c.step(r, next, now)
	return c.store == nil
}

// step applies a promotion step here.
func (c *canaries) step(r *release, next int, now time.Time) {
	st := r.win[1].stats(now)
	r.mu.Lock()
	r.changedAt, r.waiting = now, ""
	r.weight.Store(int32(next))
	complete := next >= 100
	if complete {
		r.state.Store(stateComplete)
		r.ended = now
	}
	stable := slices.Clone(r.stable)
	r.mu.Unlock()
	c.m.canaryWeight.WithLabelValues(r.service).Set(float64(next))
	if !complete {
		c.log.Info("canary weight raised", zap.String("service", r.service), zap.String("version", r.version),
			zap.Int("weight", next), zap.Int("requests", st.Requests), zap.Float64("error_rate", st.ErrorRate), zap.Float64("p99_ms", st.P99MS))
		return
	}
	c.log.Info("canary release complete: the canary takes every request", zap.String("service", r.service),
		zap.String("version", r.version), zap.Strings("stable", stable), zap.String("release", r.id),
		zap.Int("requests", st.Requests), zap.Float64("error_rate", st.ErrorRate), zap.Float64("p99_ms", st.P99MS))
	c.notice(AuditCanaryPromoted, r, now, &CanaryFigures{Canary: st, Stable: r.win[0].stats(now)}, "", stable)
}

// wait records (and logs once) why a promotion step waits.
func (c *canaries) wait(r *release, why string) {
	r.mu.Lock()
	same := r.waiting == why
	r.waiting = why
	r.mu.Unlock()
	if !same && !strings.HasPrefix(why, "the window holds 0") {
		c.log.Debug("canary promotion waits", zap.String("service", r.service), zap.String("version", r.version), zap.String("why", why))
	}
}

// write stores a release's record: in the fleet (created, or replaced at
// the revision this gateway knows; on a conflict the bucket's record is
// taken and the write retried, so a rollback always lands) and for the
// state file. It reports whether it is done.
func (c *canaries) write(ctx context.Context, r *release) bool {
	if c.store == nil {
		c.remember(r.record(""))
		return true
	}
	for range 3 {
		rec := r.record(c.store.Node())
		r.mu.Lock()
		rev := r.rev
		created := r.created
		r.mu.Unlock()
		if !created {
			rev = 0
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		newRev, err := c.store.PutCanary(wctx, rec, rev)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.rev, r.created = newRev, true
			if r.held >= 0 {
				if r.state.Load() == stateRunning {
					r.weight.Store(r.held)
				}
				r.held, r.waiting, r.changedAt = -1, "", time.Now()
			}
			r.mu.Unlock()
			c.remember(rec)
			return true
		}
		if ctx.Err() != nil || !c.refetch(ctx, r, time.Now()) {
			return false
		}
		if !created && r.State() == CanaryRunning {
			// another gateway created it first: what it says is the
			// state now (adopted by refetch)
			return true
		}
	}
	return false
}

// refetch reads a release's record from the bucket and adopts it; false
// when it cannot be read.
func (c *canaries) refetch(ctx context.Context, r *release, now time.Time) bool {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rec, rev, ok, err := c.store.GetCanary(wctx, r.service, r.id)
	cancel()
	if err != nil {
		c.log.Debug("reading a canary record from the fleet bucket", zap.String("service", r.service), zap.Error(err))
		return false
	}
	if !ok {
		r.mu.Lock()
		r.created = false
		r.mu.Unlock()
		return true
	}
	if r.adopt(rec, rev, now) {
		c.m.canaryWeight.WithLabelValues(r.service).Set(float64(r.weight.Load()))
	}
	r.mu.Lock()
	r.rev, r.created = max(r.rev, rev), true
	r.mu.Unlock()
	c.remember(rec)
	return true
}

// refresh re-puts a release's record when the bucket has not delivered
// it for CanaryRefresh, so that the bucket's max age does not drop it
// while the release runs.
func (c *canaries) refresh(ctx context.Context, r *release, now time.Time) {
	_, _, at, ok := c.store.CanaryRecord(r.service, r.id)
	if ok && now.Sub(at) < c.store.CanaryRefresh() {
		return
	}
	if !c.write(ctx, r) {
		r.pending.Or(pendWrite)
	}
}

// CanaryStatus is a release as the dashboard shows it.
type CanaryStatus struct {
	Service string `json:"service"`
	Release string `json:"release"`
	// Version is the canary version; Stable the versions on the other side.
	Version string   `json:"version"`
	Stable  []string `json:"stable"`
	// State is running, rolled_back or complete; Weight the canary's
	// share in percent.
	State  string `json:"state"`
	Weight int    `json:"weight"`
	// Spec is what the labels ask for.
	Spec CanarySpec `json:"spec"`
	// NextStep is when the next promotion step is due (running with a
	// step); Waiting says why a due step waits.
	NextStep time.Time `json:"next_step,omitzero"`
	Waiting  string    `json:"waiting,omitempty"`
	// Since is when the release began (its first gateway took it up;
	// never after Ended); Ended when it was rolled back or completed;
	// Reason why it was rolled back; By the fleet node that did it (""
	// for this gateway).
	Since  time.Time `json:"since"`
	Ended  time.Time `json:"ended,omitzero"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	// Sides are the stable and the canary side's windows now, with each
	// one's share of the answers in the window (percent).
	Sides []CanarySide `json:"sides"`
	// Starting counts the failed connections to replicas that had not
	// answered yet, not judged (ReplicaStartGrace), since the release
	// was taken up.
	Starting int64 `json:"starting,omitempty"`
}

// CanarySide is one side of a release in its window.
type CanarySide struct {
	Side     string   `json:"side"` // stable or canary
	Versions []string `json:"versions"`
	// Share is the side's part of the answers in the window, in percent.
	Share float64 `json:"share"`
	WindowStats
}

// status returns every release in use, sorted by service.
func (c *canaries) status(now time.Time) []CanaryStatus {
	var out []CanaryStatus
	for _, r := range c.releases() {
		st := [2]WindowStats{r.win[0].stats(now), r.win[1].stats(now)}
		r.mu.Lock()
		cs := CanaryStatus{Service: r.service, Release: r.id, Version: r.version, Stable: slices.Clone(r.stable),
			State: r.State(), Weight: int(r.weight.Load()), Spec: r.spec, Waiting: r.waiting,
			Since: r.started, Ended: r.ended, Reason: r.reason, By: r.by, Starting: r.starting.Load()}
		if cs.State == CanaryRunning && r.spec.Step > 0 {
			cs.NextStep = r.changedAt.Add(r.spec.Interval)
		}
		r.mu.Unlock()
		if cs.Stable == nil {
			cs.Stable = []string{}
		}
		total := st[0].Requests + st[1].Requests
		for i, name := range []string{"stable", "canary"} {
			side := CanarySide{Side: name, WindowStats: st[i], Versions: cs.Stable}
			if i == 1 {
				side.Versions = []string{r.version}
			}
			if total > 0 {
				side.Share = 100 * float64(st[i].Requests) / float64(total)
			}
			cs.Sides = append(cs.Sides, side)
		}
		out = append(out, cs)
	}
	return out
}
