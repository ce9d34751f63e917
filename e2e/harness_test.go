// Package e2e tests the assembled gateway: the bin/caddy binary that
// build/build.sh makes, started as a process, with every duty on one route
// and real peers around it (a JWKS server, a permission service, an audit
// webhook receiver, a NATS server with JetStream, an upstream).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Ports of this package (see the team's port plan): admin 2906, HTTP 19600-19699.
const (
	adminAddr = "localhost:2906"
	gwPort    = 19600
)

var gwBase = fmt.Sprintf("http://127.0.0.1:%d", gwPort)

// caddyBin finds bin/caddy. Without it the suite fails under CI and skips
// loudly by hand.
func caddyBin(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "..", "bin", "caddy")
	if _, err := os.Stat(bin); err != nil {
		msg := "e2e: bin/caddy not found; build it with build/build.sh (scripts/test does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("!!! SKIPPING END-TO-END TESTS: " + msg)
	}
	return bin
}

// switchable is an HTTP server whose behaviour a test can change, and that
// can be taken down and brought back on the same address.
type switchable struct {
	mu      sync.Mutex
	handler http.HandlerFunc
	addr    string
	srv     *http.Server
	ln      net.Listener
}

func newSwitchable(t testing.TB, h http.HandlerFunc) *switchable {
	t.Helper()
	s := &switchable{handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.down)
	return s
}

func (s *switchable) serve(ln net.Listener) {
	s.ln = ln
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.handler
		s.mu.Unlock()
		h(w, r)
	})}
	go s.srv.Serve(ln)
}

func (s *switchable) URL() string { return "http://" + s.addr }

func (s *switchable) set(h http.HandlerFunc) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// down closes the listener and every connection: the peer is gone.
func (s *switchable) down() {
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// up listens again on the same address.
func (s *switchable) up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", s.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listening again on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

// auditEvent is the contract's event.
type auditEvent struct {
	Time       string   `json:"time"`
	RequestID  string   `json:"request_id"`
	Route      string   `json:"route"`
	Method     string   `json:"method"`
	Host       string   `json:"host"`
	Path       string   `json:"path"`
	Status     int      `json:"status"`
	DurationMS float64  `json:"duration_ms"`
	RemoteIP   string   `json:"remote_ip"`
	Subject    string   `json:"subject"`
	Roles      []string `json:"roles"`
	Decision   string   `json:"decision"`
	Reason     string   `json:"reason"`
	BytesOut   int64    `json:"bytes_out"`
}

// eventLog collects audit events by request id (deliveries are
// at-least-once; duplicates are counted separately).
type eventLog struct {
	mu     sync.Mutex
	byID   map[string]auditEvent
	copies int
}

func newEventLog() *eventLog { return &eventLog{byID: map[string]auditEvent{}} }

func (l *eventLog) add(evs ...auditEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		if _, dup := l.byID[e.RequestID]; dup {
			l.copies++
		}
		l.byID[e.RequestID] = e
	}
}

func (l *eventLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byID)
}

// byPath returns the events whose path starts with prefix.
func (l *eventLog) byPath(prefix string) []auditEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []auditEvent
	for _, e := range l.byID {
		if strings.HasPrefix(e.Path, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// waitPath waits until n events with the path prefix arrived.
func (l *eventLog) waitPath(t testing.TB, prefix string, n int, within time.Duration) []auditEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		evs := l.byPath(prefix)
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit: %d events for %s after %s, want %d", len(evs), prefix, within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stack is everything around one gateway process.
type stack struct {
	t        testing.TB
	dir      string
	key      *rsa.PrivateKey
	kid      string
	jwks     *switchable
	perm     *switchable
	permHits atomic.Int64
	permDeny sync.Map // subject -> true
	receiver *switchable
	recvDown atomic.Bool
	webhook  *eventLog
	natsLog  *eventLog
	nats     *natsserver.Server
	natsOpts *natsserver.Options
	natsPort int
	natsURL  string
	upstream *httptest.Server
	upHeads  chan http.Header
	cmd      *exec.Cmd
	// global is added to the global options (e.g. a docker app block).
	global string
	// transport is the reverse_proxy transport of the routes: "" (Caddy's
	// standard one) or "h1".
	transport string
	// rateEvents is the per-user limit of the /api route (default 5).
	rateEvents int
	rateWindow string
	// durability is the audit app's durability ("" for the default).
	durability string
	// fast puts the gateway server on the fast path (the apigate listener
	// wrapper, docs/fastpath.md); start checks that it is on.
	fast bool
	// mapsOnly runs the fast path in its map mode, with its lanes off
	// (APIGATE_TEST_MAPS_ONLY, docs/testing.md "The map mode"); start
	// checks the log says so.
	mapsOnly bool
	logs     *bytes.Buffer
	logsMu   sync.Mutex
}

func newStack(t *testing.T) *stack {
	t.Helper()
	caddyBin(t)
	s := &stack{t: t, dir: t.TempDir(), webhook: newEventLog(), natsLog: newEventLog(),
		upHeads: make(chan http.Header, 1024), rateEvents: 5, rateWindow: "1m"}
	var err error
	s.key, err = rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.kid = "e2e-key-1"
	jwksBody := s.jwksJSON()
	s.jwks = newSwitchable(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwksBody)
	})
	s.perm = newSwitchable(t, s.permission)
	s.receiver = newSwitchable(t, s.receive)
	s.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.upHeads <- r.Header.Clone():
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"upstream":true,"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(s.upstream.Close)
	s.startNATS()
	return s
}

func (s *stack) jwksJSON() []byte {
	b, _ := json.Marshal(map[string]any{"keys": []any{map[string]string{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": s.kid,
		"n": base64.RawURLEncoding.EncodeToString(s.key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(s.key.E)).Bytes()),
	}}})
	return b
}

func (s *stack) permission(w http.ResponseWriter, r *http.Request) {
	s.permHits.Add(1)
	var body struct {
		Subject string `json:"subject"`
	}
	json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body)
	if _, deny := s.permDeny.Load(body.Subject); deny {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *stack) receive(w http.ResponseWriter, r *http.Request) {
	if s.recvDown.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var evs []auditEvent
	if err := json.NewDecoder(r.Body).Decode(&evs); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.webhook.add(evs...)
	w.WriteHeader(http.StatusNoContent)
}

func (s *stack) startNATS() {
	t := s.t
	opts := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true,
		StoreDir: filepath.Join(s.dir, "nats"), NoLog: true, NoSigs: true}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	s.nats = ns
	s.natsOpts = opts
	s.natsPort = ns.Addr().(*net.TCPAddr).Port
	s.natsURL = ns.ClientURL()
	t.Cleanup(ns.Shutdown)

	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "AUDIT", Subjects: []string{"gateway.audit"}}); err != nil {
		t.Fatal(err)
	}
	sub, err := js.Subscribe("gateway.audit", func(m *nats.Msg) {
		var e auditEvent
		if json.Unmarshal(m.Data, &e) == nil {
			s.natsLog.add(e)
		}
		m.Ack()
	}, nats.Durable("e2e"), nats.DeliverAll(), nats.ManualAck())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
}

// restartNATS starts the NATS server again on the same port and store
// (after s.nats.Shutdown): the stream and the durable consumer come back and
// the clients reconnect.
func (s *stack) restartNATS() {
	t := s.t
	opts := *s.natsOpts
	opts.Port = s.natsPort
	ns, err := natsserver.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready after restart")
	}
	s.nats = ns
	t.Cleanup(ns.Shutdown)
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// token signs an RS256 token with the JWKS key.
func (s *stack) token(sub string, roles []string, ttl time.Duration, extra map[string]any) string {
	claims := jwt.MapClaims{"sub": sub, "iss": "https://idp.e2e", "aud": "orders-api",
		"exp": time.Now().Add(ttl).Unix(), "iat": time.Now().Unix(),
		"realm_access": map[string]any{"roles": roles}}
	for k, v := range extra {
		claims[k] = v
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = s.kid
	signed, err := tok.SignedString(s.key)
	if err != nil {
		s.t.Fatal(err)
	}
	return signed
}

// caddyfile is the gateway's config for this stack: every duty on one route.
func (s *stack) caddyfile() string {
	return fmt.Sprintf(`{
	admin %[1]s
	storage file_system %[2]s/data
	audit {
		queue_size 256
		spool_dir %[2]s/spool%[13]s
		sink http %[3]s/events {
			batch_size 50
			flush_interval 50ms
			timeout 2s
		}
		sink nats %[4]s {
			subject gateway.audit
			jetstream
		}
	}
	servers :%[5]d {
		name gateway%[14]s
	}
%[11]s
}

http://127.0.0.1:%[5]d {
	handle /api/* {
		audit
		jwt_auth {
			jwks_url %[6]s/jwks.json
			jwks_refresh 1m
			algorithms RS256
			issuer https://idp.e2e
			audience orders-api
			forward_claim sub X-User-Id
			forward_claim realm_access.roles X-User-Roles
			strip_token
		}
		rbac {
			roles_claim realm_access.roles
			require any reader admin
		}
		rate_limit {
			zone e2e_api_per_user {
				key {http.auth.user.id}
				events %[9]d
				window %[10]s
			}
		}
		permission {
			url %[7]s/check
			timeout 500ms
			cache_ttl 60s
			negative_ttl 60s
			stale_if_error 5m
			on_error deny
		}
		reverse_proxy %[8]s%[12]s
	}
	handle /bulk/* {
		audit
		jwt_auth {
			jwks_url %[6]s/jwks.json
			algorithms RS256
		}
		reverse_proxy %[8]s%[12]s
	}
	handle {
		respond `+"`"+`{"error":"no_route"}`+"`"+` 404
	}
}
`, adminAddr, s.dir, s.receiver.URL(), s.natsURL, gwPort, s.jwks.URL(), s.perm.URL(),
		strings.TrimPrefix(s.upstream.URL, "http://"), s.rateEvents, s.rateWindow, s.global, s.transportBlock(), s.durabilityLine(), s.wrapperLines())
}

// wrapperLines are the gateway server's listener wrappers: apigate on the
// fast path.
func (s *stack) wrapperLines() string {
	if !s.fast {
		return ""
	}
	return "\n\t\tlistener_wrappers {\n\t\t\tapigate\n\t\t}"
}

// durabilityLine is the audit app's durability option, if set.
func (s *stack) durabilityLine() string {
	if s.durability == "" {
		return ""
	}
	return "\n\t\tdurability " + s.durability
}

// transportBlock is the reverse_proxy block choosing s.transport.
func (s *stack) transportBlock() string {
	if s.transport == "" {
		return ""
	}
	return " {\n\t\ttransport " + s.transport + "\n\t}"
}

// variant is a way the end-to-end tests run the gateway: a reverse_proxy
// transport ("" is Caddy's standard one, "h1" the gateway's), on Caddy's
// request path or the fast path.
type variant struct {
	name      string
	transport string
	fast      bool
	mapsOnly  bool
}

// variants are the ways the end-to-end tests run: Caddy's path with each
// transport, and the fast path (with h1, as Caddyfile.example has it).
// Tests compare what the fast path produced with Caddy's path with the
// same transport.
var variants = []variant{
	{name: "transport http", transport: ""},
	{name: "transport h1", transport: "h1"},
	{name: "fast path", transport: "h1", fast: true},
}

// use sets the stack up for v.
func (s *stack) use(v variant) { s.transport, s.fast, s.mapsOnly = v.transport, v.fast, v.mapsOnly }

// mapsOnlyVariant is the fast path in its map mode: TestDutyChain runs in
// it too, as every duty's requests take the fast path's lanes.
var mapsOnlyVariant = variant{name: "fast path, maps only", transport: "h1", fast: true, mapsOnly: true}

// start runs bin/caddy on the stack's Caddyfile and waits for it to serve.
func (s *stack) start() {
	t := s.t
	t.Helper()
	cfg := filepath.Join(s.dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(s.caddyfile()), 0o644); err != nil {
		t.Fatal(err)
	}
	s.logsMu.Lock()
	s.logs = new(bytes.Buffer)
	s.logsMu.Unlock()
	cmd := exec.Command(caddyBin(t), "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+s.dir, "XDG_DATA_HOME="+s.dir+"/xdg", "XDG_CONFIG_HOME="+s.dir+"/xdg")
	if s.mapsOnly {
		cmd.Env = append(cmd.Env, "APIGATE_TEST_MAPS_ONLY=1")
	}
	cmd.Stdout = &lockedWriter{mu: &s.logsMu, w: func() io.Writer { return s.logs }}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	t.Cleanup(func() { s.stop(false) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(gwBase + "/nothing-here")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				if s.fast {
					s.requireFast()
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not start: %v\n%s", err, s.logText())
		}
		if cmd.ProcessState != nil {
			t.Fatalf("gateway exited:\n%s", s.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requireFast fails the test unless the gateway logged that the fast path
// serves its server.
func (s *stack) requireFast() {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		logs := s.logText()
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"server":"gateway"`) {
				if strings.Contains(line, `"msg":"fast path on"`) {
					if lanes := `"lanes":"off"`; s.mapsOnly != strings.Contains(line, lanes) {
						t.Fatalf("the fast path's map mode is not %v: %s", s.mapsOnly, line)
					}
					return
				}
				if strings.Contains(line, `"msg":"fast path off"`) {
					t.Fatalf("the fast path is off for the gateway server: %s", line)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fast path line for the gateway server in the log:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the gateway: kill=true sends SIGKILL (a crash), else SIGTERM
// and a wait for the graceful shutdown.
func (s *stack) stop(kill bool) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

func (s *stack) logText() string {
	s.logsMu.Lock()
	defer s.logsMu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  func() io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w().Write(p)
}

// rawGet sends a GET with the request target exactly as written (Go's
// client would rewrite "//x" into an absolute URI).
func rawGet(t testing.TB, target, token string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", gwPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", target, gwPort, token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

// do sends a request to the gateway.
func do(t testing.TB, method, path, token string, header http.Header) (*http.Response, string) {
	t.Helper()
	url := gwBase + path
	if strings.HasPrefix(path, "http://") {
		url = path
	}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// loadRun is a closed-loop load of one path from n connections.
type loadRun struct {
	cancel                          context.CancelFunc
	wg                              sync.WaitGroup
	ok, wrong, connErrs, reusedErrs atomic.Int64
	firstErr                        atomic.Value
	firstWrong                      atomic.Value // the first answer other than 200
}

type loadResult struct {
	ok, wrong, connErrs, reusedErrs int64
	firstErr, firstWrong            any
}

func (r loadResult) total() int64 { return r.ok + r.wrong + r.connErrs }

// check applies TestReloadUnderLoad's bounds: no wrong answer, no failure
// on a kept-alive connection, at most 5% connection errors on new ones.
func (r loadResult) check(t testing.TB) {
	t.Helper()
	if r.wrong != 0 {
		t.Errorf("%d wrong answers (first: %v)", r.wrong, r.firstWrong)
	}
	if r.reusedErrs != 0 {
		t.Errorf("%d requests on kept-alive connections failed", r.reusedErrs)
	}
	if r.connErrs*20 > r.total() {
		t.Errorf("%d of %d requests hit connection errors (more than 5%%)", r.connErrs, r.total())
	}
	if r.ok == 0 {
		t.Error("no request succeeded")
	}
}

func startLoad(token, path string, conns int) *loadRun {
	// stop lets each worker finish its request: every request sent is
	// answered (or fails) and counted, so events can be matched exactly.
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadRun{cancel: cancel}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 15 * time.Second}
	for i := 0; i < conns; i++ {
		l.wg.Add(1)
		go func(i int) {
			defer l.wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				// One path, so that the permission decision is cached as in
				// steady state (each request is still distinct by its query).
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s%s?c=%d&n=%d", gwBase, path, i, n), nil)
				req.Header.Set("Authorization", "Bearer "+token)
				var reused bool
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
				}))
				resp, err := client.Do(req)
				if err != nil {
					l.connErrs.Add(1)
					if reused {
						l.reusedErrs.Add(1)
					}
					l.firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.wrong.Add(1)
					l.firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d: %s", resp.StatusCode, body))
					l.firstWrong.CompareAndSwap(nil, fmt.Sprintf("status %d: %s", resp.StatusCode, body))
				} else {
					l.ok.Add(1)
				}
			}
		}(i)
	}
	return l
}

func (l *loadRun) stop() loadResult {
	l.cancel()
	l.wg.Wait()
	return loadResult{ok: l.ok.Load(), wrong: l.wrong.Load(), connErrs: l.connErrs.Load(),
		reusedErrs: l.reusedErrs.Load(), firstErr: l.firstErr.Load(), firstWrong: l.firstWrong.Load()}
}

// clientSaw is what a client saw of a response, for comparing the paths:
// status, the fields but Date, the body.
func clientSaw(resp *http.Response, body string) map[string]any {
	h := resp.Header.Clone()
	h.Del("Date")
	// when a window admits again depends on the moment of the request
	// (a sliding window's reset falls on a step's edge, 60 or 61 s
	// away): a quota refusal's reset (body), Retry-After and the
	// RateLimit field's seconds, on every answer, are not the path's
	if resp.StatusCode == http.StatusTooManyRequests {
		body = resetRe.ReplaceAllString(body, `"reset":"<reset>"`)
		if h.Get("Retry-After") != "" {
			h.Set("Retry-After", "<seconds>")
		}
	}
	for i, v := range h["Ratelimit"] {
		h["Ratelimit"][i] = secondsRe.ReplaceAllString(v, ";t=<seconds>")
	}
	return map[string]any{"status": resp.StatusCode, "header": h, "body": body}
}

var (
	resetRe   = regexp.MustCompile(`"reset":"[^"]*"`)
	secondsRe = regexp.MustCompile(`;t=\d+`)
)
