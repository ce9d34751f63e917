package caddydocker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/apigate/gateway/caddyh1"
	"github.com/apigate/gateway/identity"
)

func defaultSpec(weight int) CanarySpec {
	return CanarySpec{Weight: weight, Sticky: CanaryStickySubject, MinRequests: DefaultCanaryMinRequests,
		MaxErrorRate: DefaultCanaryMaxErrorRate, Window: DefaultCanaryWindow}
}

func TestWindow(t *testing.T) {
	t0 := monoBase.Add(time.Hour)
	w := newWindow(10*time.Second, 100*time.Millisecond) // slots of 1s
	for i := range 90 {
		w.add(t0, false, time.Duration(i+1)*time.Millisecond)
	}
	for range 10 {
		w.add(t0.Add(500*time.Millisecond), true, 200*time.Millisecond)
	}
	st := w.stats(t0.Add(time.Second))
	if st.Requests != 100 || st.Failures != 10 || st.Slow != 10 || st.ErrorRate != 10 {
		t.Fatalf("totals %+v", st)
	}
	// the 99th of 100 answers is one of the 200ms ones, within a bin
	if st.P99 < 200*time.Millisecond || st.P99 > 225*time.Millisecond {
		t.Fatalf("p99 %v, want 200ms within 12.5%%", st.P99)
	}
	// 9.5 s later the first slot is still in; at 10 s it has left
	if st := w.stats(t0.Add(9500 * time.Millisecond)); st.Requests != 100 {
		t.Fatalf("at 9.5s: %d answers, want 100", st.Requests)
	}
	if st := w.stats(t0.Add(10 * time.Second)); st.Requests != 0 || st.P99 != 0 {
		t.Fatalf("at 10s: %+v, want an empty window", st)
	}
	// long silence, then new answers
	n, fail, _ := w.add(t0.Add(time.Hour), true, time.Millisecond)
	if n != 1 || fail != 1 {
		t.Fatalf("after an hour: n=%d fail=%d", n, fail)
	}
}

func TestHistBins(t *testing.T) {
	prev := -1
	for us := int64(0); us < 1<<32; us = us*9/8 + 1 {
		d := time.Duration(us) * time.Microsecond
		b := histBin(d)
		if b < prev || b >= histBins {
			t.Fatalf("bin of %v: %d after %d", d, b, prev)
		}
		prev = b
		if us < 1<<31 && (histUpper(b) < d || float64(histUpper(b)) > float64(d)*1.125+float64(time.Microsecond)) {
			t.Fatalf("bin %d of %v has upper bound %v", b, d, histUpper(b))
		}
	}
}

// TestOverLimits: the P99 test by counting slow answers is exactly the
// nearest-rank P99 compared with max_p99.
func TestOverLimits(t *testing.T) {
	spec := defaultSpec(10)
	spec.MaxP99 = 100 * time.Millisecond
	for _, tc := range []struct {
		name          string
		n, fail, slow uint32
		want          string
	}{
		{"too few answers", 99, 99, 99, ""},
		{"5% exactly is within", 100, 5, 0, ""},
		{"above 5%", 100, 6, 0, "error_rate"},
		{"one slow of 100: p99 is fast", 100, 0, 1, ""},
		{"two slow of 100: p99 is slow", 100, 0, 2, "p99"},
		{"ten slow of 1000", 1000, 0, 10, ""},
		{"eleven slow of 1000", 1000, 0, 11, "p99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := overLimits(&spec, tc.n, tc.fail, tc.slow)
			if got != tc.want {
				t.Fatalf("got %q want %q", got, tc.want)
			}
			// brute force for the p99 cases
			if tc.fail == 0 && tc.n >= 100 {
				lat := make([]int, tc.n)
				for i := range lat {
					lat[i] = 1
					if i < int(tc.slow) {
						lat[i] = 1000
					}
				}
				sort.Ints(lat)
				p99 := lat[int(math.Ceil(0.99*float64(tc.n)))-1]
				if (p99 > 100) != (got == "p99") {
					t.Fatalf("nearest-rank p99 %d disagrees", p99)
				}
			}
		})
	}
}

func TestCookieToken(t *testing.T) {
	for _, tc := range []struct{ cookie, want string }{
		{"gateway_canary=0123456789abcdef", "0123456789abcdef"},
		{"a=b; gateway_canary=0123456789abcdef; c=d", "0123456789abcdef"},
		{`gateway_canary="0123456789abcdef"`, "0123456789abcdef"},
		{"gateway_canary=short", ""},
		{"gateway_canary=" + strings.Repeat("x", 65), ""},
		{"other_gateway_canary=0123456789abcdef", ""},
		{"", ""},
	} {
		h := http.Header{"Cookie": {tc.cookie}}
		if got := cookieToken(h); got != tc.want {
			t.Errorf("%q: got %q want %q", tc.cookie, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { cookieToken(http.Header{"Cookie": {"a=b; gateway_canary=0123456789abcdef"}}) }); n > 1 {
		t.Errorf("cookieToken allocates %v times", n)
	}
}

func TestChoose(t *testing.T) {
	tokens := 0
	newTok := func() string { tokens++; return fmt.Sprintf("token%08d", tokens) }
	spec := defaultSpec(10)
	spec.Header, spec.HeaderValue = "X-Canary", "yes"

	t.Run("header override, with its value only", func(t *testing.T) {
		if c, _ := spec.choose(0, saltHash("r"), canaryClient{header: http.Header{"X-Canary": {"yes"}}, subject: "a"}, newTok); !c {
			t.Fatal("X-Canary: yes at weight 0 did not go to the canary")
		}
		if c, _ := spec.choose(0, saltHash("r"), canaryClient{header: http.Header{"X-Canary": {"no"}}, subject: "a"}, newTok); c {
			t.Fatal("X-Canary: no went to the canary")
		}
		any := spec
		any.HeaderValue = ""
		if c, _ := any.choose(0, saltHash("r"), canaryClient{header: http.Header{"X-Canary": {"whatever"}}, subject: "a"}, newTok); !c {
			t.Fatal("any value did not go to the canary")
		}
	})
	t.Run("weights 0 and 100", func(t *testing.T) {
		if c, tok := spec.choose(0, saltHash("r"), canaryClient{}, newTok); c || tok != "" {
			t.Fatal("weight 0")
		}
		if c, tok := spec.choose(100, saltHash("r"), canaryClient{}, newTok); !c || tok != "" {
			t.Fatal("weight 100")
		}
	})
	t.Run("subject: sticky, about weight percent, monotonic in weight", func(t *testing.T) {
		in := 0
		for i := range 10000 {
			sub := fmt.Sprintf("user-%d", i)
			c, tok := spec.choose(10, saltHash("r"), canaryClient{subject: sub}, newTok)
			if tok != "" {
				t.Fatal("a subject got a cookie")
			}
			for range 3 {
				if again, _ := spec.choose(10, saltHash("r"), canaryClient{subject: sub}, newTok); again != c {
					t.Fatal("not sticky")
				}
			}
			if more, _ := spec.choose(30, saltHash("r"), canaryClient{subject: sub}, newTok); c && !more {
				t.Fatal("a canary client went back to stable when the weight rose")
			}
			if c {
				in++
			}
		}
		if in < 900 || in > 1100 {
			t.Fatalf("%d of 10000 subjects on the canary at weight 10", in)
		}
	})
	t.Run("no subject: a cookie token, then sticky by it", func(t *testing.T) {
		c, tok := spec.choose(50, saltHash("r"), canaryClient{}, newTok)
		if tok == "" {
			t.Fatal("no token")
		}
		for range 5 {
			if again, tok2 := spec.choose(50, saltHash("r"), canaryClient{cookie: tok}, newTok); again != c || tok2 != "" {
				t.Fatal("not sticky by cookie")
			}
		}
	})
	t.Run("sticky cookie ignores the subject", func(t *testing.T) {
		ck := spec
		ck.Sticky = CanaryStickyCookie
		if _, tok := ck.choose(50, saltHash("r"), canaryClient{subject: "alice"}, newTok); tok == "" {
			t.Fatal("sticky=cookie did not ask for a cookie")
		}
	})
	t.Run("none: drawn per request", func(t *testing.T) {
		none := spec
		none.Sticky = CanaryStickyNone
		in := 0
		for range 10000 {
			c, tok := none.choose(10, saltHash("r"), canaryClient{subject: "alice"}, newTok)
			if tok != "" {
				t.Fatal("none set a cookie")
			}
			if c {
				in++
			}
		}
		if in < 850 || in > 1150 {
			t.Fatalf("%d of 10000 on the canary at weight 10", in)
		}
	})
}

// testRequest is a request as Caddy's path hands it to the selection
// policy: with the variables table and a replacer.
func testRequest(sub string, header http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://gw/orders", nil)
	for k, v := range header {
		r.Header[k] = v
	}
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())
	r = r.WithContext(ctx)
	if sub != "" {
		identity.Set(r, &identity.Identity{Subject: sub})
	}
	return r
}

func upstreamPool(dials ...string) reverseproxy.UpstreamPool {
	var p reverseproxy.UpstreamPool
	for _, d := range dials {
		p = append(p, &reverseproxy.Upstream{Dial: d, Host: new(reverseproxy.Host)})
	}
	return p
}

// testSplit publishes a pool with a release for server/service.
func testSplit(t testing.TB, server, service string, spec CanarySpec, stable, canary []string) (*Selection, *release) {
	t.Helper()
	rel := newRelease(service, "v2", []string{"v1"}, spec, nil)
	setPools(server, map[string][]string{service: append(append([]string{}, stable...), canary...)},
		map[string]*split{service: {rel: rel, canary: canary}}, nil)
	s := &Selection{Server: server, Service: service}
	if err := s.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	return s, rel
}

func TestSelection(t *testing.T) {
	stable := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	canary := []string{"10.0.0.9:80"}
	pool := upstreamPool(append(append([]string{}, stable...), canary...)...)
	isCanary := func(u *reverseproxy.Upstream) bool { return u.Dial == canary[0] }

	t.Run("without a release: round robin over every replica", func(t *testing.T) {
		setPools("sel", map[string][]string{"plain": stable}, nil, nil)
		s := &Selection{Server: "sel", Service: "plain"}
		_ = s.Provision(caddy.Context{})
		p := upstreamPool(stable...)
		seen := map[string]int{}
		for range 30 {
			seen[s.Select(p, testRequest("", nil), httptest.NewRecorder()).Dial]++
		}
		if len(seen) != 3 || seen[stable[0]] != 10 {
			t.Fatalf("round robin: %v", seen)
		}
	})
	t.Run("weight 10 with sticky none", func(t *testing.T) {
		spec := defaultSpec(10)
		spec.Sticky = CanaryStickyNone
		s, _ := testSplit(t, "sel", "w10", spec, stable, canary)
		in := 0
		perStable := map[string]int{}
		for range 10000 {
			r := testRequest("", nil)
			u := s.Select(pool, r, httptest.NewRecorder())
			if isCanary(u) {
				in++
			} else {
				perStable[u.Dial]++
			}
		}
		if in < 850 || in > 1150 {
			t.Fatalf("%d of 10000 to the canary at weight 10", in)
		}
		for _, d := range stable {
			if perStable[d] < 2700 || perStable[d] > 3300 {
				t.Fatalf("stable replicas unevenly used: %v", perStable)
			}
		}
	})
	t.Run("cookie: set once, then sticky", func(t *testing.T) {
		spec := defaultSpec(50)
		s, _ := testSplit(t, "sel", "ck", spec, stable, canary)
		w := httptest.NewRecorder()
		first := isCanary(s.Select(pool, testRequest("", nil), w))
		set := w.Header().Values("Set-Cookie")
		if len(set) != 1 || !strings.HasPrefix(set[0], CanaryCookie+"=") || !strings.Contains(set[0], "HttpOnly") {
			t.Fatalf("Set-Cookie %q", set)
		}
		cookie := strings.SplitN(set[0], ";", 2)[0]
		for range 20 {
			w := httptest.NewRecorder()
			if isCanary(s.Select(pool, testRequest("", http.Header{"Cookie": {cookie}}), w)) != first {
				t.Fatal("not sticky by the cookie")
			}
			if len(w.Header().Values("Set-Cookie")) != 0 {
				t.Fatal("a second cookie")
			}
		}
	})
	t.Run("sticky by the verified subject, no cookie", func(t *testing.T) {
		s, _ := testSplit(t, "sel", "subj", defaultSpec(30), stable, canary)
		in := 0
		for i := range 300 {
			sub := fmt.Sprintf("user-%d", i)
			w := httptest.NewRecorder()
			first := isCanary(s.Select(pool, testRequest(sub, nil), w))
			if len(w.Header().Values("Set-Cookie")) != 0 {
				t.Fatal("a subject got a cookie")
			}
			for range 3 {
				if isCanary(s.Select(pool, testRequest(sub, nil), httptest.NewRecorder())) != first {
					t.Fatalf("%s moved", sub)
				}
			}
			if first {
				in++
			}
		}
		if in < 60 || in > 120 {
			t.Fatalf("%d of 300 subjects on the canary at weight 30", in)
		}
	})
	t.Run("a retry stays on its side and avoids what failed", func(t *testing.T) {
		spec := defaultSpec(100)
		s, _ := testSplit(t, "sel", "retry", spec, stable, canary)
		r := testRequest("alice", nil)
		if !isCanary(s.Select(pool, r, httptest.NewRecorder())) {
			t.Fatal("weight 100 not on the canary")
		}
		// the canary failed; the source leaves it out of the next pool
		if u := s.Select(upstreamPool(stable...), r, httptest.NewRecorder()); u == nil || isCanary(u) {
			t.Fatalf("retry: %v", u)
		}
		// with no stable replica available, the canary takes the stable side
		spec0 := defaultSpec(0)
		s0, _ := testSplit(t, "sel", "nostable", spec0, stable, canary)
		if u := s0.Select(upstreamPool(canary...), testRequest("bob", nil), httptest.NewRecorder()); u == nil || !isCanary(u) {
			t.Fatalf("fallback: %v", u)
		}
	})
	t.Run("the observer counts the side that answered", func(t *testing.T) {
		spec := defaultSpec(100)
		spec.MinRequests = 10
		s, rel := testSplit(t, "sel", "obs", spec, stable, canary)
		for range 10 {
			r := testRequest("alice", nil)
			s.Select(pool, r, httptest.NewRecorder())
			// what the h1 transport does after the round trip
			o, _ := caddyhttp.GetVar(r.Context(), "gateway.h1_observer").(caddyh1.AnswerObserver)
			if o == nil {
				t.Fatal("no observer set")
			}
			o.ObserveAnswer(500, nil, time.Millisecond)
		}
		if rel.State() != CanaryRolledBack || rel.weight.Load() != 0 {
			t.Fatalf("after 10 failures of 10 with min_requests 10: %s at %d", rel.State(), rel.weight.Load())
		}
		if u := s.Select(pool, testRequest("alice", nil), httptest.NewRecorder()); isCanary(u) {
			t.Fatal("a rolled back canary still chosen")
		}
		// a client that went away does not count
		o := rel.obs[0]
		before := rel.win[0].stats(time.Now()).Requests
		o.ObserveAnswer(0, fmt.Errorf("x: %w", context.Canceled), 0)
		o.ObserveAnswer(0, errors.New("dial"), 0)
		if got := rel.win[0].stats(time.Now()); got.Requests != before+1 || got.Failures != 1 {
			t.Fatalf("stable window %+v", got)
		}
	})
}

// TestReplicaStarting: a replica's failures to connect before it first
// answered, within ReplicaStartGrace of joining, are not judged (a
// container just started may not listen yet); once it answered, or once
// the grace is over, they are.
func TestReplicaStarting(t *testing.T) {
	rel := newRelease("starting", "v2", []string{"v1"}, defaultSpec(10), nil)
	dialErr := &caddyh1.DialError{Err: errors.New("connection refused")}
	w := rel.watchOf("10.0.0.9:80", 1)
	w.ObserveAnswer(0, dialErr, 0)
	if n := rel.win[1].stats(time.Now()).Requests; n != 0 || rel.starting.Load() != 1 {
		t.Fatalf("a starting replica's refusal counted: %d answers, %d starting", n, rel.starting.Load())
	}
	w.ObserveAnswer(200, nil, time.Millisecond)
	w.ObserveAnswer(0, dialErr, 0)
	if st := rel.win[1].stats(time.Now()); st.Requests != 2 || st.Failures != 1 {
		t.Fatalf("after its first answer: %+v", st)
	}
	old := rel.watchOf("10.0.0.10:80", 1)
	old.joined = time.Now().Add(-ReplicaStartGrace)
	old.ObserveAnswer(0, dialErr, 0)
	if st := rel.win[1].stats(time.Now()); st.Failures != 2 {
		t.Fatalf("a replica silent past the grace: %+v", st)
	}
	if rel.watchOf("10.0.0.9:80", 1) != w || rel.watchOf("10.0.0.9:80", 0) == w {
		t.Fatal("one observer per replica and side")
	}
}

// BenchmarkCanarySelect is the weighted choice per request: the docker
// selection policy choosing a side and a replica for a service running a
// release, as both request paths call it (goal: at most 0.2 µs).
func BenchmarkCanarySelect(b *testing.B) {
	stable := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	canary := []string{"10.0.0.9:80"}
	pool := upstreamPool(append(append([]string{}, stable...), canary...)...)
	for _, bc := range []struct {
		name, sub string
		header    http.Header
		sticky    string
	}{
		{name: "subject", sub: "user-1234", sticky: CanaryStickySubject},
		{name: "cookie", header: http.Header{"Cookie": {"session=x; gateway_canary=0123456789abcdef"}}, sticky: CanaryStickyCookie},
		{name: "none", sticky: CanaryStickyNone},
	} {
		b.Run(bc.name, func(b *testing.B) {
			spec := defaultSpec(10)
			spec.Sticky = bc.sticky
			spec.Header = "X-Canary"
			s, _ := testSplit(b, "bench", "svc-"+bc.name, spec, stable, canary)
			// requests as the paths hand them over, each with its own
			// variables table, used in turn (a request's observer left in
			// its table from the turn before is not read: its pool is
			// whole, so it is not a retry)
			const n = 64
			reqs := make([]*http.Request, n)
			for i := range reqs {
				reqs[i] = testRequest(bc.sub, bc.header)
			}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if s.Select(pool, reqs[i%n], w) == nil {
					b.Fatal("nil")
				}
				i++
			}
		})
	}
	b.Run("no release (round robin)", func(b *testing.B) {
		setPools("bench", map[string][]string{"plain": stable}, nil, nil)
		s := &Selection{Server: "bench", Service: "plain"}
		_ = s.Provision(caddy.Context{})
		p := upstreamPool(stable...)
		r := testRequest("", nil)
		w := httptest.NewRecorder()
		b.ReportAllocs()
		for b.Loop() {
			if s.Select(p, r, w) == nil {
				b.Fatal("nil")
			}
		}
	})
}
