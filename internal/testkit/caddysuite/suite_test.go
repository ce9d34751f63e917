package caddysuite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway" // every module of the gateway binary
	"github.com/apigate/gateway/fastpath"
	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/testoutput"
)

// suiteTests are the tests of Caddy's integration suite the fast path must
// pass as Caddy does (issue 30 names these files: caddyfile, reverseproxy,
// forwardauth, intercept, handler, map, try_files, stream,
// rewrite_security, logging and request_body_timeout; all their tests).
var suiteTests = []string{
	// caddyfile_test.go
	"TestRespond", "TestRedirect", "TestDuplicateHosts", "TestReadCookie", "TestReplIndex",
	"TestInvalidPrefix", "TestValidPrefix", "TestUriReplace", "TestUriOps",
	"TestHttpRequestLocalPortPlaceholder", "TestSetThenAddQueryParams", "TestSetThenDeleteParams",
	"TestRenameAndOtherOps", "TestReplaceOps", "TestReplaceWithReplacementPlaceholder",
	"TestReplaceWithKeyPlaceholder", "TestPartialReplacement", "TestNonExistingSearch",
	"TestReplaceAllOps", "TestUriOpsBlock", "TestHandleErrorSimpleCodes", "TestHandleErrorRange",
	"TestHandleErrorSort", "TestHandleErrorRangeAndCodes", "TestHandleErrorOverlappingCodesKeepOrder",
	"TestHandleErrorSubHandlers", "TestHeaderDefaults", "TestHeaderDefaultMatcherSameField",
	"TestInvalidSiteAddressesAsDirectives",
	// reverseproxy_test.go
	"TestSRVReverseProxy", "TestDialWithPlaceholderUnix", "TestReverseProxyWithPlaceholderDialAddress",
	"TestReverseProxyWithPlaceholderTCPDialAddress", "TestReverseProxyHealthCheck",
	"TestReverseProxyHealthCheckPortUsed", "TestReverseProxyHealthCheckUnixSocket",
	"TestReverseProxyHealthCheckUnixSocketWithoutPort", "TestReverseProxyRetryMatchStatusCode",
	"TestReverseProxyRetryMatchHeader", "TestReverseProxyRetryMatchCombined",
	"TestReverseProxyRetryMatchIsTransportError", "TestReverseProxySNIPlaceHolder",
	"TestReverseProxyNormalizeWebSocketHeaders", "TestWeightedRoundRobinSelectionValidation",
	"TestReverseProxyResponseHandling", "TestReverseProxyUnlimitedRequestBuffersRespectMaxSize",
	// forwardauth_test.go
	"TestForwardAuthCopyHeadersStripsClientHeaders", "TestForwardAuthCopyHeadersAuthResponseWins",
	"TestForwardAuthCopyHeadersUnderscoreAlias",
	// intercept_test.go
	"TestIntercept", "TestInterceptReplaceStatusWithMatcher", "TestInterceptReplaceStatusWithoutMatcher",
	"TestInterceptReplaceStatusNotMatched",
	// handler_test.go
	"TestBrowse", "TestRespondWithJSON", "TestRequestBodyPlaceholderRespectsMaxSizeInTemplate",
	"TestRequestBodyPlaceholderRespectsMaxSizeInVarsRegexp", "TestRequestBodyPlaceholderDirectRespondExpansion",
	"TestRequestBodyMaxSizeLimitsErrorRoute",
	// map_test.go
	"TestMap", "TestMapRespondWithDefault", "TestMapInvalidDestination", "TestMapAsJSON",
	// try_files_test.go
	"TestTryFilesErrorCodeAfterQueryItem", "TestSkippedGroupedRouteKeepsRegexpCapture",
	// stream_test.go
	"TestH2ToH2CStream", "TestH2ToH1ChunkedResponse",
	// rewrite_security_test.go
	"TestStripRewritePreservesPathAuthorization",
	// logging_test.go
	"TestLoggerNamesCaseInsensitive",
	// request_body_timeout_test.go
	"TestReverseProxyRequestBodyTimeout",
}

// suiteAdmin is where caddytest looks for a running Caddy.
const suiteAdmin = "localhost:2999"

// TestCaddyIntegrationSuite runs Caddy's integration tests twice against
// the gateway: as the configs are (the baseline), and with the apigate
// wrapper in every server. Every test that passes on the baseline must
// pass with the wrapper; every server of every config must run on the fast
// path (docs/fastpath.md lists the exceptions, none today). It reports the
// share of the suite's requests the plan served.
func TestCaddyIntegrationSuite(t *testing.T) {
	p := suiteProxy(t)
	base := p.runSuite(t, false)
	p.resetStats()
	with := p.runSuite(t, true)
	p.againAlone(t, true, base, with)

	var passedBase []string
	for _, name := range suiteTests {
		if base[name] == "pass" {
			passedBase = append(passedBase, name)
			if with[name] != "pass" {
				t.Errorf("%s passes on Caddy's path and is %q with the fast path", name, with[name])
			}
		}
	}
	var failedBase []string
	for _, name := range suiteTests {
		if base[name] != "pass" {
			failedBase = append(failedBase, name+" ("+base[name]+")")
		}
	}
	loads, off := p.loadSummary()
	fast, total := p.requestShare()
	t.Logf("Caddy's integration suite, %d tests: %d pass on the baseline (not passing there: %v), %d with the wrapper",
		len(suiteTests), len(passedBase), failedBase, countPass(with))
	t.Logf("server loads with the wrapper: %d, on the fast path %d; off: %v", loads, loads-len(off), off)
	if total > 0 {
		t.Logf("requests with the wrapper: %.0f (access log records), %.0f served by the plan (%.1f%%)", total, fast, 100*fast/total)
	}
	for _, o := range off {
		t.Errorf("a server load stayed on Caddy's path: %s", o)
	}
	if len(passedBase) < 60 {
		t.Errorf("only %d of %d tests pass on the baseline: the harness is broken", len(passedBase), len(suiteTests))
	}
}

// suiteProxy starts the gateway in process, with its admin API at a free
// address and the admin proxy in front of it at suiteAdmin, where
// caddytest looks (skipped in -short runs: the suite takes minutes).
func suiteProxy(t *testing.T) *adminProxy {
	if testing.Short() {
		t.Skip("runs Caddy's integration suite (minutes)")
	}
	ln, err := net.Listen("tcp", suiteAdmin)
	if err != nil {
		msg := "caddysuite: " + suiteAdmin + " is taken: " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("!!! SKIPPING CADDY'S INTEGRATION SUITE: " + msg)
	}
	realAdmin := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	if err := caddy.Load([]byte(fmt.Sprintf(`{"admin":{"listen":%q}}`, realAdmin)), true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { caddy.Stop() })
	p := newAdminProxy(t, realAdmin)
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

// refusedByDesign are the suite's tests that send what path_guard
// refuses (reject, its default), with why; each must fail with it, so
// that this list stays true.
var refusedByDesign = map[string]string{
	// a traversal attempt Caddy's basic_auth answers with 401 once the
	// path is stripped; path_guard refuses it first (encoded slash)
	"TestStripRewritePreservesPathAuthorization": `"/api..%2fsecret" gets 400 ambiguous_path (encoded slash) where the test expects basic_auth's 401`,
}

// TestCaddyIntegrationSuitePathGuard runs Caddy's integration suite with
// path_guard (reject) first in every server of every config and the fast
// path on: every test that passes on Caddy as the configs are passes
// with it, but for refusedByDesign. Caddy's own tests are paths nobody
// here chose: what path_guard refuses of them is a legitimate request it
// would break.
func TestCaddyIntegrationSuitePathGuard(t *testing.T) {
	p := suiteProxy(t)
	base := p.runSuite(t, false)
	p.mu.Lock()
	p.guard = true
	p.mu.Unlock()
	guarded := p.runSuite(t, true)
	p.againAlone(t, true, base, guarded)
	passed := 0
	for _, name := range suiteTests {
		if base[name] != "pass" {
			continue
		}
		why, refused := refusedByDesign[name]
		switch {
		case guarded[name] == "pass" && !refused:
			passed++
		case guarded[name] == "pass":
			t.Errorf("%s passes with path_guard; it is listed as refused (%s): take it off refusedByDesign", name, why)
		case !refused:
			t.Errorf("%s passes on Caddy's path and is %q with path_guard", name, guarded[name])
		}
	}
	t.Logf("Caddy's integration suite with path_guard first in every server: %d of the %d tests that pass without it pass, %d refused by design",
		passed, countPass(base), len(refusedByDesign))
	if passed < 60 {
		t.Errorf("only %d tests pass: the harness is broken", passed)
	}
}

func countPass(m map[string]string) int {
	n := 0
	for _, v := range m {
		if v == "pass" {
			n++
		}
	}
	return n
}

// adminProxy answers caddytest at localhost:2999 for the gateway's admin
// API at real: it injects the wrapper into loaded configs and takes it out
// of configs read back.
type adminProxy struct {
	t    *testing.T
	real string
	rp   *httputil.ReverseProxy

	mu       sync.Mutex
	wrap     bool
	guard    bool // path_guard in front of every config (AddPathGuard)
	last     *Injection
	loads    int
	off      []string
	prevM    map[string]float64
	fast     float64
	reqBase  int64
	loadErrs int
}

func newAdminProxy(t *testing.T, real string) *adminProxy {
	u, _ := url.Parse("http://" + real)
	rp := httputil.NewSingleHostReverseProxy(u)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		r.Host = real // (the admin API checks the Host it is asked by)
	}
	return &adminProxy{t: t, real: real, rp: rp, prevM: map[string]float64{}}
}

func (p *adminProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/load":
		p.load(w, r)
	case r.Method == http.MethodGet && (r.URL.Path == "/config/" || r.URL.Path == "/config"):
		p.config(w, r)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// load adapts the config, injects, loads it into the gateway and records
// which servers the fast path serves.
func (p *adminProxy) load(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ct := r.Header.Get("Content-Type")
	cfg := body
	if i := strings.IndexByte(ct, '/'); i >= 0 && !strings.HasSuffix(ct, "/json") {
		adapter := caddyconfig.GetAdapter(strings.TrimPrefix(ct[i+1:], "x-"))
		if adapter == nil {
			http.Error(w, "unknown adapter "+ct, http.StatusBadRequest)
			return
		}
		var err error
		if cfg, _, err = adapter.Adapt(body, nil); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scrape()
	out, in, err := Inject(cfg, p.real, p.wrap)
	if err == nil && p.guard {
		out, err = in.AddPathGuard(out)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res, err := http.Post("http://"+p.real+"/load", "application/json", bytes.NewReader(out))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusOK {
		p.last = in
		if p.wrap {
			p.recordLoad(in)
		}
		// answer once the previous config's servers stopped listening on
		// the new one's ports: until then the kernel spreads connections
		// over both (a wrapper run answered TestUriOpsBlock from the
		// previous test's server, beside a busy loop)
		if ports, err := caddytester.ServerPorts(out); err != nil {
			rb = []byte(err.Error())
			res.StatusCode = http.StatusInternalServerError
		} else if err := caddytester.WaitListeners(ports, 30*time.Second); err != nil {
			rb = []byte(err.Error())
			res.StatusCode = http.StatusInternalServerError
		}
	} else {
		p.loadErrs++
	}
	w.WriteHeader(res.StatusCode)
	w.Write(rb)
}

// recordLoad notes each server of the config just loaded: on the fast path
// or off, with the reason.
func (p *adminProxy) recordLoad(in *Injection) {
	st := map[string]fastpath.ServerStatus{}
	for _, s := range fastpath.Status() {
		st[s.Server] = s
	}
	for name := range in.wrappers {
		p.loads++
		s, ok := st[name]
		switch {
		case !ok:
			p.off = append(p.off, name+": no status (never listened)")
		case !s.On:
			p.off = append(p.off, name+": "+s.Reason)
		}
	}
}

func (p *adminProxy) config(w http.ResponseWriter, r *http.Request) {
	res, err := http.Get("http://" + p.real + r.URL.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	p.mu.Lock()
	in := p.last
	p.mu.Unlock()
	if in != nil && res.StatusCode == http.StatusOK {
		if u, err := in.Undo(b); err == nil {
			b = u
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.StatusCode)
	w.Write(b)
}

// scrape adds the requests the plan served since the last scrape
// (gateway_fastpath_requests_total, a process-wide counter per server).
func (p *adminProxy) scrape() {
	res, err := http.Get("http://" + p.real + "/metrics")
	if err != nil {
		return
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gateway_fastpath_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		key := line[:i]
		p.fast += v - p.prevM[key]
		p.prevM[key] = v
	}
}

func (p *adminProxy) resetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scrape()
	p.fast, p.loads, p.off = 0, 0, nil
	p.reqBase = Requests.Load()
}

func (p *adminProxy) loadSummary() (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	off := append([]string(nil), p.off...)
	sort.Strings(off)
	return p.loads, off
}

func (p *adminProxy) requestShare() (fast, total float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scrape()
	return p.fast, float64(Requests.Load() - p.reqBase)
}

// runSuite runs the integration tests (go test, in the repository's
// module) and returns each test's outcome: pass, fail or skip.
func (p *adminProxy) runSuite(t *testing.T, wrap bool) map[string]string {
	run := "^(" + strings.Join(suiteTests, "|") + ")$"
	if r := os.Getenv("CADDYSUITE_RUN"); r != "" {
		run = r // (to look at some tests by hand)
	}
	return p.runTests(t, wrap, run, suiteTests)
}

// timingSensitive are Caddy's own integration tests that time a request
// or a background check in milliseconds, with why: on a loaded 2-core
// machine they fail now and then on Caddy's path as well as with the
// gateway. Only these get a second run (againAlone); any other test that
// passes on the baseline and fails in the wrapped run fails the suite, as
// a fast-path bug that shows only under concurrency would.
var timingSensitive = map[string]string{
	"TestReverseProxyRequestBodyTimeout": "read timeouts of 300ms and a body trickled every 25ms, " +
		"all inside a 3s deadline; seen failing on the baseline and with the wrapper under load",
	"TestRespondWithJSON": "its first request is HTTPS to localhost a few ms after the config load, and Caddy's " +
		"tls app issues that certificate in the background (ManageAsync): a handshake that comes first gets " +
		"\"tls: internal error\" on either path; seen with the wrapper in a fresh-clone run beside a busy loop",
}

// againAlone runs once more, alone, each timingSensitive test that passed
// on the baseline but not in run (with the wrapper or path_guard), and
// records its new result there. Each second run is logged; a test the
// gateway breaks fails it too.
func (p *adminProxy) againAlone(t *testing.T, wrap bool, base, run map[string]string) {
	for _, name := range suiteTests {
		why, sensitive := timingSensitive[name]
		if !sensitive || base[name] != "pass" || run[name] == "pass" {
			continue
		}
		again := p.runTests(t, wrap, "^"+name+"$", []string{name})[name]
		t.Logf("%s was %q in the whole run (timing-sensitive: %s); alone again: %q", name, run[name], why, again)
		run[name] = again
	}
}

func (p *adminProxy) runTests(t *testing.T, wrap bool, run string, names []string) map[string]string {
	p.mu.Lock()
	p.wrap = wrap
	p.mu.Unlock()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	cmd := exec.Command("go", "test", "github.com/caddyserver/caddy/v2/caddytest/integration",
		"-run", run, "-count=1", "-json", "-timeout", "15m")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	cmd.Run() // (a failing test makes it exit non-zero)
	if f := os.Getenv("CADDYSUITE_OUT"); f != "" {
		os.WriteFile(fmt.Sprintf("%s.%v", f, wrap), out.Bytes(), 0o644)
	}
	res, outs := outcomes(out.Bytes())
	if len(res) == 0 {
		t.Fatalf("the integration suite did not run:\n%s", tail(out.String(), 4000))
	}
	p.mu.Lock()
	how := "on Caddy's path"
	if wrap {
		how = "with the wrapper"
		if p.guard {
			how = "with the wrapper and path_guard"
		}
	}
	p.mu.Unlock()
	notRun := false
	for _, name := range names {
		if res[name] == "" {
			res[name] = "not run"
			notRun = true
		}
		if o := outs[name]; o != nil && (res[name] == "fail" || os.Getenv("CADDYSUITE_RUN") != "") {
			t.Logf("%s, %s: %s; its output:\n%s", how, name, res[name], o)
		}
	}
	if o := outs[""]; notRun && o != nil {
		t.Logf("%s, tests did not run; the suite's output outside its tests:\n%s", how, o)
	}
	t.Logf("suite run (wrapper %v) took %v", wrap, time.Since(start).Round(time.Second))
	return res
}

// outcomes reads the suite's `go test -json` output: each top-level
// test's result (pass, fail or skip) and what a log shows of its output,
// its subtests' included (testoutput: a failed test's own lines and panic
// however long Caddy's logs around them); key "" holds the output outside
// the tests.
func outcomes(jsonOut []byte) (map[string]string, map[string]*testoutput.Output) {
	res := map[string]string{}
	outs := map[string]*testoutput.Output{}
	for _, line := range bytes.Split(jsonOut, []byte("\n")) {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		top, sub, _ := strings.Cut(ev.Test, "/")
		switch ev.Action {
		case "pass", "fail", "skip":
			if sub == "" && top != "" {
				res[top] = ev.Action
			}
		case "output":
			o := outs[top]
			if o == nil {
				o = &testoutput.Output{HeadMax: 4 << 10, TailMax: 4 << 10, WhyMax: 32 << 10}
				outs[top] = o
			}
			o.Add(ev.Output)
		}
	}
	return res, outs
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestOutcomes: the suite's result per test, and a failed test's own
// lines (its subtests' too) and panic in what is logged of it, however
// long Caddy's logs before and after them.
func TestOutcomes(t *testing.T) {
	var in bytes.Buffer
	ev := func(action, test, output string) {
		b, _ := json.Marshal(map[string]string{"Action": action, "Test": test, "Output": output})
		in.Write(append(b, '\n'))
	}
	logs := func(test string) {
		for i := 0; i < 500; i++ {
			ev("output", test, fmt.Sprintf(`{"level":"info","logger":"http.log","msg":"caddy log line %d"}`+"\n", i))
		}
	}
	ev("output", "TestRespond", "=== RUN   TestRespond\n")
	ev("pass", "TestRespond", "")
	ev("output", "TestMap", "=== RUN   TestMap\n")
	logs("TestMap")
	ev("output", "TestMap", "    caddyfile_test.go:50: requesting \"http://localhost:9080/\" expected status code: 200 but got 502\n")
	logs("TestMap")
	ev("output", "TestMap/sub", "    map_test.go:77: sub: body \"a\" want \"b\"\n")
	logs("TestMap/sub")
	ev("fail", "TestMap/sub", "")
	ev("fail", "TestMap", "")
	ev("output", "TestIntercept", "=== RUN   TestIntercept\n")
	logs("TestIntercept")
	ev("output", "TestIntercept", "panic: runtime error: invalid memory address or nil pointer dereference\n")
	ev("output", "TestIntercept", "goroutine 9 [running]:\n")
	logs("TestIntercept")
	ev("fail", "TestIntercept", "")
	ev("output", "", "FAIL\tgithub.com/caddyserver/caddy/v2/caddytest/integration\t1.0s\n")

	res, outs := outcomes(in.Bytes())
	if got := fmt.Sprint(res); got != "map[TestIntercept:fail TestMap:fail TestRespond:pass]" {
		t.Errorf("results %s", got)
	}
	for name, want := range map[string][]string{
		"TestMap":       {"caddyfile_test.go:50: requesting", "map_test.go:77: sub:"},
		"TestIntercept": {"panic: runtime error", "goroutine 9 [running]:"},
		"":              {"FAIL\tgithub.com/caddyserver/caddy/v2/caddytest/integration"},
	} {
		o := outs[name]
		if o == nil {
			t.Errorf("%q: no output kept", name)
			continue
		}
		s := o.String()
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("%q: the output logged lacks %q", name, w)
			}
		}
		if len(s) > 64<<10 {
			t.Errorf("%q: %d bytes logged", name, len(s))
		}
	}
}

// TestTimingSensitiveListed: each test given a second run is one of the
// suite's, with its reason, so that the list stays short and true.
func TestTimingSensitiveListed(t *testing.T) {
	in := map[string]bool{}
	for _, name := range suiteTests {
		in[name] = true
	}
	for name, why := range timingSensitive {
		if !in[name] {
			t.Errorf("timingSensitive names %s, which is not in suiteTests", name)
		}
		if strings.TrimSpace(why) == "" {
			t.Errorf("timingSensitive gives %s no reason", name)
		}
	}
}
