// Package pathtest runs an end-to-end test on both request paths of the
// gateway, Caddy's own and the fast path (the apigate listener wrapper,
// docs/fastpath.md), and compares what each produced: responses, audit
// events, whatever the test records. A difference fails the test; so does
// a server the fast path does not serve when the test runs on it.
package pathtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile" // the caddyfile adapter
	"github.com/caddyserver/caddy/v2/caddytest"
	"golang.org/x/net/http2"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/fastpath"
	"github.com/apigate/gateway/internal/testkit/caddytester"
)

// Path is one of the request paths.
type Path struct {
	Name string
	Fast bool
	// H2: the servers take HTTP/2 without TLS (protocols h1 h2 h2c) and
	// the tester's client speaks it (prior knowledge): the test runs over
	// HTTP/2 (RunH2)
	H2 bool
	// MapsOnly: the fast path in its map mode, with its lanes off
	// (fastpath.SetMapsOnly, docs/testing.md "The map mode")
	MapsOnly bool
}

// Both are the two paths, Caddy's first.
var Both = []Path{{Name: "caddy"}, {Name: "fastpath", Fast: true}}

// MapsOnly is the fast path in its map mode: Run runs a test on it too
// when the test's requests took a lane on the fast path.
var MapsOnly = Path{Name: "fastpath-maps-only", Fast: true, MapsOnly: true}

// RunH2 is Run over HTTP/2: each path's servers take h2c, and the
// tester's client (caddytest.Tester.Client, from Load) speaks HTTP/2 with
// prior knowledge. The fast path serves HTTP/2 on the plan
// (docs/fastpath.md, "HTTP/2"); this compares it with Caddy's.
func RunH2(t *testing.T, test func(t *testing.T, p Path, rec *Recorder)) {
	t.Helper()
	run(t, true, test)
}

// H2CTransport is an HTTP/2 transport without TLS (prior knowledge).
func H2CTransport() *http2.Transport {
	return &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
}

// Run runs test once on each path, as a subtest named after the path
// (Caddy's first: one after the other, on the same ports), then compares
// what the two recorded in rec. When the fast path's run took a lane (a
// header map it skips), the test runs a third time, on MapsOnly, which
// rec compares with Caddy's path too.
func Run(t *testing.T, test func(t *testing.T, p Path, rec *Recorder)) {
	t.Helper()
	run(t, false, test)
}

func run(t *testing.T, h2 bool, test func(t *testing.T, p Path, rec *Recorder)) {
	t.Helper()
	rec := &Recorder{}
	paths := Both
	taken, stop := fastpath.CountLanes()
	defer stop()
	for i := 0; i < len(paths); i++ {
		p := paths[i]
		if i > 0 {
			stopServers(t)
		}
		p.H2 = h2
		was := fastpath.SetMapsOnly(p.MapsOnly)
		t.Run(p.Name, func(t *testing.T) { test(t, p, rec) })
		fastpath.SetMapsOnly(was)
		if p.Fast && !p.MapsOnly && taken() > 0 {
			// the fast path skipped a map Caddy builds: the same test
			// with the maps, compared with Caddy's path as well
			paths = append(paths[:len(paths):len(paths)], MapsOnly)
		}
	}
	for _, p := range paths[1:] {
		rec.CompareNamed(t, paths[0].Name, p.Name)
	}
}

// loadedAdmin is the admin port of the last config Load loaded.
var loadedAdmin atomic.Int32

// stopServers stops the servers of the config the previous path loaded
// (the admin API stays) before the next path loads its own on the same
// ports, so that no state of one path's servers carries into the other's.
func stopServers(t *testing.T) {
	t.Helper()
	if port := loadedAdmin.Load(); port != 0 {
		caddytester.StopServers(t, int(port))
	}
}

// JSON adapts a Caddyfile; on the fast path it adds the apigate listener
// wrapper to every HTTP server (a Caddyfile's `servers` options do not
// merge, so this is done on the JSON).
func (p Path) JSON(t testing.TB, caddyfile string) []byte {
	t.Helper()
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v", err)
	}
	if !p.Fast && !p.H2 {
		return js
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	apps, _ := cfg["apps"].(map[string]any)
	httpApp, _ := apps["http"].(map[string]any)
	servers, _ := httpApp["servers"].(map[string]any)
	for _, s := range servers {
		srv := s.(map[string]any)
		if p.H2 {
			srv["protocols"] = []string{"h1", "h2", "h2c"}
		}
		if p.Fast {
			ws, _ := srv["listener_wrappers"].([]any)
			srv["listener_wrappers"] = append(ws, map[string]any{"wrapper": "apigate"})
		}
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Load loads a Caddyfile into the test binary's Caddy (admin API on
// adminPort) on this path; on the fast path, each named server must be
// served by it (servers are named as Caddy names them: srv0, srv1, ... or
// by the `servers { name }` option), and must have served requests by
// the end of t (a test whose client is handed to Caddy, HTTP/2 say, would
// otherwise compare Caddy's path with itself).
func (p Path) Load(t *testing.T, adminPort int, caddyfile string, servers ...string) *caddytest.Tester {
	t.Helper()
	tester := caddytester.LoadJSON(t, adminPort, string(p.JSON(t, caddyfile)))
	loadedAdmin.Store(int32(adminPort))
	if p.H2 {
		tester.Client.Transport = H2CTransport()
	}
	if p.Fast {
		RequireFast(t, servers...)
		before := map[string]float64{}
		for _, s := range fastpath.Status() {
			before[s.Server] = s.Requests
		}
		t.Cleanup(func() {
			after := map[string]float64{}
			for _, s := range fastpath.Status() {
				after[s.Server] = s.Requests
			}
			for _, name := range servers {
				if after[name] <= before[name] {
					t.Errorf("the fast path served no request of server %q", name)
				}
			}
		})
	}
	return tester
}

// Reload loads another Caddyfile into the running test binary's Caddy
// (the admin API on the port Load was given), as Load does (on the fast
// path, each named server must be served by it), for a test of what a
// reload keeps.
func (p Path) Reload(t *testing.T, caddyfile string, servers ...string) {
	t.Helper()
	caddytester.LoadJSON(t, int(loadedAdmin.Load()), string(p.JSON(t, caddyfile)))
	if p.Fast {
		RequireFast(t, servers...)
	}
}

// RequireFast fails t unless the fast path serves each server (of the
// test binary's Caddy).
func RequireFast(t testing.TB, servers ...string) {
	t.Helper()
	st := map[string]fastpath.ServerStatus{}
	for _, s := range fastpath.Status() {
		st[s.Server] = s
	}
	for _, name := range servers {
		s, ok := st[name]
		if !ok {
			t.Fatalf("server %q has no fast path status (servers: %v)", name, st)
		}
		if !s.On {
			t.Fatalf("the fast path is off for server %q: %s", name, s.Reason)
		}
	}
}

// Key is t's name without the path's own subtest level: the same on both
// paths, for a record's key ("TestX/fastpath/case" is "TestX/case").
func (p Path) Key(t testing.TB) string {
	parts := strings.Split(t.Name(), "/")
	for i, s := range parts {
		if s == p.Name {
			parts = append(parts[:i], parts[i+1:]...)
			break
		}
	}
	return strings.Join(parts, "/")
}

// Recorder collects what each path produced, by key, for Compare.
type Recorder struct {
	mu   sync.Mutex
	got  map[string]map[string]string // path -> key -> value
	next map[string]map[string]int    // path -> key -> values AddNext recorded
}

// AddNext records value under key followed by " #n", the n-th value p
// recorded so under key: for a test that sends a request several times.
func (r *Recorder) AddNext(p Path, key string, value any) {
	r.mu.Lock()
	if r.next == nil {
		r.next = map[string]map[string]int{}
	}
	if r.next[p.Name] == nil {
		r.next[p.Name] = map[string]int{}
	}
	r.next[p.Name][key]++
	n := r.next[p.Name][key]
	r.mu.Unlock()
	r.Add(p, fmt.Sprintf("%s #%d", key, n), value)
}

// Add records value (compared as JSON) under key for path p.
func (r *Recorder) Add(p Path, key string, value any) { r.AddNamed(p.Name, key, value) }

// AddNamed records value under key for a run named name (a test with more
// runs than the two paths names them itself and compares two with
// CompareNamed).
func (r *Recorder) AddNamed(name, key string, value any) {
	b, err := json.Marshal(value)
	if err != nil {
		b = []byte(fmt.Sprintf("%#v", value))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]map[string]string{}
	}
	if r.got[name] == nil {
		r.got[name] = map[string]string{}
	}
	r.got[name][key] = string(b)
}

// Compare fails t for each key whose values differ between the paths, or
// that only one path recorded. It fails too when nothing was recorded on
// both paths (a comparison of nothing proves nothing).
func (r *Recorder) Compare(t testing.TB) {
	t.Helper()
	r.CompareNamed(t, Both[0].Name, Both[1].Name)
}

// CompareNamed is Compare for the runs named caddyRun (on Caddy's path) and
// fastRun (on the fast path).
func (r *Recorder) CompareNamed(t testing.TB, caddyRun, fastRun string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	a, b := r.got[caddyRun], r.got[fastRun]
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("nothing to compare: %d records on Caddy's path (%s), %d on the fast path (%s)", len(a), caddyRun, len(b), fastRun)
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var diffs []string
	for _, k := range sorted {
		va, oka := a[k]
		vb, okb := b[k]
		if !oka || !okb || !reflect.DeepEqual(va, vb) {
			diffs = append(diffs, fmt.Sprintf("%s:\n  Caddy's path: %s\n  fast path:    %s", k, orMissing(va, oka), orMissing(vb, okb)))
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("the paths differ in %d of %d records:\n%s", len(diffs), len(sorted), strings.Join(diffs, "\n"))
	}
}

func orMissing(v string, ok bool) string {
	if !ok {
		return "(not recorded)"
	}
	return v
}

// Event returns ev with what differs from request to request (time,
// request id, duration, the chain's id, position and hash) cleared, and
// each old string of replace turned into its new one in the request's
// strings (a test's per-path ids): what the two paths must agree on.
func Event(ev caddyaudit.Event, replace ...string) caddyaudit.Event {
	ev.Time, ev.RequestID, ev.DurationMS = time.Time{}, "", 0
	ev.Chain, ev.Seq, ev.Hash = "", 0, ""
	if len(replace) > 0 {
		r := strings.NewReplacer(replace...)
		ev.Route, ev.Host, ev.Path, ev.Subject, ev.Reason, ev.DecidedBy, ev.CredentialID, ev.ClientRequestID =
			r.Replace(ev.Route), r.Replace(ev.Host), r.Replace(ev.Path), r.Replace(ev.Subject),
			r.Replace(ev.Reason), r.Replace(ev.DecidedBy), r.Replace(ev.CredentialID), r.Replace(ev.ClientRequestID)
		for i := range ev.Extra {
			ev.Extra[i].Value = r.Replace(ev.Extra[i].Value)
		}
	}
	return ev
}

// Response is what a test records of a response: its status, its header
// fields but Date, and its body.
type Response struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   string              `json:"body"`
}

// Resp returns what the paths must agree on of a response: its status,
// its header fields but Date, and its body, with each old string of
// replace turned into its new one (a test's per-path ids) in field values
// and body. A Retry-After in seconds and the seconds to a window's reset
// in a RateLimit field (`;t=57499`), which depend on the moment, are
// recorded as "<seconds>" (a test checks their range itself).
// resetSeconds is a RateLimit field's seconds to the reset
// (draft-ietf-httpapi-ratelimit-headers).
var resetSeconds = regexp.MustCompile(`;t=\d+`)

func Resp(status int, header http.Header, body string, replace ...string) Response {
	r := strings.NewReplacer(replace...)
	out := Response{Status: status, Body: r.Replace(body)}
	for k, vs := range header {
		if k == "Date" {
			continue
		}
		if out.Header == nil {
			out.Header = map[string][]string{}
		}
		for _, v := range vs {
			if _, err := strconv.Atoi(v); err == nil && k == "Retry-After" {
				v = "<seconds>"
			}
			if k == "Ratelimit" {
				v = resetSeconds.ReplaceAllString(v, ";t=<seconds>")
			}
			out.Header[k] = append(out.Header[k], r.Replace(v))
		}
	}
	return out
}

// Series returns the samples of a Prometheus text page whose lines start
// with prefix (`gateway_rbac_decisions_total{`), by series.
func Series(page, prefix string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// Grew returns how much each series of after grew since before, for the
// series that changed: what a path counted, to compare between the paths
// (the counters are the process's, so their values are not).
func Grew(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if v != before[k] {
			out[k] = v - before[k]
		}
	}
	return out
}

// Metrics returns the samples of the test binary's Caddy metrics (the
// admin API's /metrics on adminPort) whose lines start with prefix.
func Metrics(t testing.TB, adminPort int, prefix string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://localhost:%d/metrics", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Series(string(b), prefix)
}

// ReadEvents returns the events of an audit file sink's file (JSON lines;
// none while there is no file), but a last line still being written.
func ReadEvents(t testing.TB, file string) []caddyaudit.Event {
	t.Helper()
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var out []caddyaudit.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev caddyaudit.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: bad line %q: %v", file, sc.Bytes(), err)
		}
		out = append(out, ev)
	}
	return out
}

// WaitEvents waits (10s at most) until the audit file holds n events, and
// returns them all.
func WaitEvents(t testing.TB, file string, n int) []caddyaudit.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := ReadEvents(t, file)
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d events after 10s, want %d", file, len(evs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
