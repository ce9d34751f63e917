package caddyready

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/apigate/gateway/fastpath" // the apigate listener wrapper
	"github.com/apigate/gateway/internal/testkit/freeport"
)

type fakeApp struct{ ok bool }

func (f fakeApp) Ready() (bool, string) { return f.ok, "routes not loaded" }

func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		notStarted bool
		readiers   []namedReadier
		head       bool
		code       int
		retryAfter string
		body       string
	}{
		{"no app to ask: ready", false, nil, false, 200, "", `{"status":"ready"}` + "\n"},
		{"every app ready", false, []namedReadier{{"docker", fakeApp{true}}}, false, 200, "", `{"status":"ready"}` + "\n"},
		{"an app not ready: starting", false, []namedReadier{{"docker", fakeApp{false}}}, false, 503, "1", `{"status":"starting","reason":"docker: routes not loaded"}` + "\n"},
		{"the config not started: starting", true, []namedReadier{{"docker", fakeApp{true}}}, false, 503, "1", `{"status":"starting","reason":"the config has not finished starting"}` + "\n"},
		{"HEAD: the status alone", false, []namedReadier{{"docker", fakeApp{false}}}, true, 503, "1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Ready{readiers: tc.readiers, started: func() bool { return !tc.notStarted }}
			method := http.MethodGet
			if tc.head {
				method = http.MethodHead
			}
			req, _ := http.NewRequest(method, "/ready", nil)
			rec := &recorder{header: http.Header{}}
			if err := h.ServeHTTP(rec, req, nil); err != nil {
				t.Fatal(err)
			}
			if rec.code != tc.code || rec.header.Get("Retry-After") != tc.retryAfter || rec.body.String() != tc.body {
				t.Errorf("got %d Retry-After %q %q, want %d %q %q", rec.code, rec.header.Get("Retry-After"), rec.body.String(), tc.code, tc.retryAfter, tc.body)
			}
			if ct := rec.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func TestCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"gateway_ready", ""},
		{"gateway_ready extra", "wrong argument count"},
		{"gateway_ready {\n\tcheck docker\n}", "unrecognized subdirective 'check'"},
	} {
		var h Ready
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		}
	}
}

// TestStartingUntilTheConfigStarted: a server takes requests as soon as
// its http app has started, before Caddy has started the config's other
// apps and made it the running config; until then the readiness route
// answers 503 starting, then 200. The test holds the config there with a
// config loader (admin.config.load), which Caddy runs after every app has
// started and before the config becomes the running one. On Caddy's path
// and on the fast path.
func TestStartingUntilTheConfigStarted(t *testing.T) {
	for _, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			ports := freeport.Ports(t, 2)
			cfg := config(ports[0], ports[1], wrapper, "readytest_hold")
			held.entered, held.release = make(chan struct{}), make(chan struct{})
			var loadErr error
			loaded := make(chan struct{})
			go func() { loadErr = caddy.Load(cfg, true); close(loaded) }()
			release := sync.OnceFunc(func() { close(held.release) })
			t.Cleanup(func() { release(); <-loaded; _ = caddy.Stop() })
			select {
			case <-held.entered:
			case <-loaded:
				t.Fatalf("the config loaded (%v) without running its config loader", loadErr)
			case <-time.After(30 * time.Second):
				t.Fatal("the config's apps did not start within 30s")
			}
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			want := `{"status":"starting","reason":"the config has not finished starting"}` + "\n"
			if code, retry, body := get(t, base+"/ready"); code != 503 || retry != "1" || body != want {
				t.Errorf("while the config starts: /ready %d Retry-After %q %q, want 503 %q", code, retry, body, want)
			}
			if code, _, body := get(t, base+"/api"); code != 200 || body != "api" {
				t.Errorf("while the config starts: /api %d %q, want the server serving", code, body)
			}
			release()
			<-loaded
			if loadErr != nil {
				t.Fatal(loadErr)
			}
			if code, _, body := get(t, base+"/ready"); code != 200 || body != `{"status":"ready"}`+"\n" {
				t.Errorf("once the config runs: /ready %d %q, want 200 ready", code, body)
			}
		})
	}
}

// held is the state of the readytest_hold config loader of the running
// test: it closes entered and waits for release.
var held struct{ entered, release chan struct{} }

type holdLoader struct{}

func (holdLoader) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.config_loaders.readytest_hold",
		New: func() caddy.Module { return new(holdLoader) },
	}
}

// LoadConfig returns what is not JSON: Caddy applies a loaded config in a
// goroutine of its own, which then fails before it changes anything,
// whenever it runs (an error would fail the config's start instead).
func (holdLoader) LoadConfig(caddy.Context) ([]byte, error) {
	close(held.entered)
	<-held.release
	return []byte("not a config: the test only holds the start"), nil
}

func init() { caddy.RegisterModule(holdLoader{}) }

// TestShuttingDownOnReload: a config reload that closes a server's
// listener, with shutdown_delay, keeps that server serving for the delay
// while its readiness route answers 503 shutting_down (with Retry-After),
// on Caddy's path and on the fast path (the apigate listener wrapper).
// The SIGTERM case runs the gateway binary (internal/testkit/fleettest,
// TestDrainOnSIGTERM).
func TestShuttingDownOnReload(t *testing.T) {
	for _, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			ports := freeport.Ports(t, 3)
			old := config(ports[0], ports[1], wrapper, "")
			if err := caddy.Load(old, true); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = caddy.Stop() })
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			if code, _, body := get(t, base+"/ready"); code != 200 || body != `{"status":"ready"}`+"\n" {
				t.Fatalf("before the reload: /ready %d %q", code, body)
			}
			// The next config has no server on that port: the old server's
			// listener closes after the delay.
			next := config(ports[0], ports[2], wrapper, "")
			loaded := make(chan error, 1)
			reloadAt := time.Now()
			go func() { loaded <- caddy.Load(next, true) }()
			var sawDown time.Time
			served := 0
			for {
				select {
				case err := <-loaded:
					if err != nil {
						t.Fatal(err)
					}
					if sawDown.IsZero() {
						t.Fatal("the readiness route never answered 503 during the shutdown delay")
					}
					if served == 0 {
						t.Fatal("no request served during the shutdown delay")
					}
					t.Logf("503 %v after the reload began; %d requests served during the delay", sawDown.Sub(reloadAt).Round(time.Millisecond), served)
					return
				default:
				}
				code, retry, body := get(t, base+"/ready")
				switch {
				case code == 503:
					var st state
					if err := json.Unmarshal([]byte(body), &st); err != nil || st.Status != statusShuttingDown || retry == "" {
						t.Fatalf("503 with Retry-After %q %q, want status shutting_down", retry, body)
					}
					if sawDown.IsZero() {
						sawDown = time.Now()
					}
				case code == 200 && sawDown.IsZero():
				case code == 0:
					// the listener closed: the delay is over
				default:
					t.Fatalf("/ready after turning 503: %d %q", code, body)
				}
				if code, _, body := get(t, base+"/api"); code == 200 && body == "api" {
					served++
				} else if code != 0 && !sawDown.IsZero() {
					t.Fatalf("during the delay, /api: %d %q", code, body)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// config is a JSON config with the admin API on admin and one server on
// port with a readiness route and /api, with a 1.5 s shutdown_delay;
// loader, if not empty, is the module of the admin API's config loader.
func config(admin, port int, wrapper bool, loader string) []byte {
	wrappers := ""
	if wrapper {
		wrappers = `"listener_wrappers": [{"wrapper": "apigate"}],`
	}
	load := ""
	if loader != "" {
		load = fmt.Sprintf(`, "config": {"load": {"module": %q}}`, loader)
	}
	return fmt.Appendf(nil, `{
	"admin": {"listen": "127.0.0.1:%d"%s},
	"apps": {"http": {
		"shutdown_delay": "1500ms",
		"grace_period": "2s",
		"servers": {"srv%d": {
			"listen": ["127.0.0.1:%d"], %s
			"routes": [
				{"match": [{"path": ["/ready"]}], "handle": [{"handler": "gateway_ready"}]},
				{"handle": [{"handler": "static_response", "body": "api"}]}
			]
		}}
	}}
}`, admin, load, port, port, wrappers)
}

// get sends GET url on a new connection; code 0 when it failed.
func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}
