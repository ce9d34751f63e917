package fleettest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// drainConfig is a gateway with a readiness route and an API route, a
// shutdown_delay of delay, with or without the fast path's apigate
// listener wrapper.
func drainConfig(admin, port int, delay time.Duration, wrapper bool, bind string) func(string) string {
	return drainConfigAPI(admin, port, delay, wrapper, bind, `respond "api"`)
}

// drainConfigAPI is drainConfig with api as the API route's handler.
func drainConfigAPI(admin, port int, delay time.Duration, wrapper bool, bind, api string) func(string) string {
	return func(string) string {
		wrap := ""
		if wrapper {
			wrap = "listener_wrappers {\n\t\t\tapigate\n\t\t}"
		}
		// (a site bound to a socket the process inherits listens on
		// that address, fd/N, which names its server's options)
		serverKey := fmt.Sprintf(":%d", port)
		if strings.HasPrefix(bind, "fd/") {
			serverKey = bind
		}
		if bind != "" {
			bind = "bind " + bind
		}
		return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	shutdown_delay %s
	grace_period 10s
	servers %s {
		%s
	}
}

http://:%d {
	%s
	handle /ready {
		gateway_ready
	}
	handle {
		%s
	}
}
`, admin, delay, serverKey, wrap, port, bind, api)
	}
}

// TestDrainOnSIGTERM: a gateway told to stop (SIGTERM) with a
// shutdown_delay answers 503 on its readiness route at once (the test
// logs how soon: tens of ms on a quiet machine; it fails past a quarter
// of the delay, which a loaded machine stays well within) and until it
// exits, while every other request (on new connections) is
// answered for the whole delay; then the listener closes. The same with
// the fast path's apigate listener wrapper.
func TestDrainOnSIGTERM(t *testing.T) {
	bin := gatewayBinary(t)
	const delay = 2 * time.Second
	for _, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			ports := freeport.Ports(t, 2)
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			p := runGateway(t, bin, "drain", drainConfig(ports[0], ports[1], delay, wrapper, ""), base+"/ready")
			api := startRate(base+"/api", 100, false, func(code int, body string) bool { return code == 200 && body == "api" })
			time.Sleep(200 * time.Millisecond) // load before the signal
			term := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var first503, lastReady time.Time
			for {
				select {
				case <-p.done:
				default:
					code, body, err := podmantest.Get(base + "/ready")
					switch {
					case err != nil:
						// the listener closed (the delay is over), or the
						// process is gone
					case code == 503:
						if first503.IsZero() {
							first503 = time.Now()
						}
						lastReady = time.Now()
					case first503.IsZero():
						// still 200: the signal is on its way
					default:
						t.Fatalf("/ready answered %d %q after it had answered 503", code, body)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				break
			}
			api.stop()
			exited := time.Since(term)
			if first503.IsZero() {
				t.Fatal("/ready never answered 503 after SIGTERM")
			}
			turned := first503.Sub(term)
			t.Logf("/ready 503 %v after SIGTERM, last 503 %v after; exit %v after; API on new connections: %s",
				turned.Round(time.Millisecond), lastReady.Sub(term).Round(time.Millisecond), exited.Round(time.Millisecond), api.summary())
			// a bound a loaded machine keeps (a 100ms one failed at 137ms
			// under load); it still tells "at once" from "late in the
			// delay", which would let a balancer send to a closing gateway
			if turned > delay/4 {
				t.Errorf("/ready turned 503 %v after SIGTERM, want within a quarter of the shutdown_delay (%v)", turned, delay/4)
			}
			if lastReady.Sub(term) < delay*9/10 {
				t.Errorf("the last readiness answer came %v after SIGTERM: the listener closed before shutdown_delay (%v)", lastReady.Sub(term), delay)
			}
			// every API request sent before the listener closed was
			// answered; those after it are refused (nothing else).
			// A connection still in the kernel's accept queue when
			// the listener closes is reset (EOF) without its request
			// being read, on Caddy's server as on the fast path: a
			// request sent within closeRace of the close (the first
			// refused connection, else the exit) races it and is
			// not counted as failed during the delay.
			const closeRace = 100 * time.Millisecond
			api.mu.Lock()
			defer api.mu.Unlock()
			closed := api.firstRefused
			if closed.IsZero() {
				closed = term.Add(exited)
			}
			if n := api.failedBefore(closed.Add(-closeRace)); n+len(api.wrong) > 0 {
				t.Errorf("API requests failed during the delay: %d failed, %d wrong", n, len(api.wrong))
			}
			if api.ok < int(delay.Seconds())*100*8/10 {
				t.Errorf("%d API requests answered, want most of the %v delay's at 100/s", api.ok, delay)
			}
		})
	}
}

// TestShutdownFinishesRequests: a request in flight when the gateway is
// told to stop (SIGTERM, shutdown_delay 0, grace_period 10s) is answered
// before the process exits, although its upstream answers only after the
// listener has closed: Caddy's server waits for its connections for the
// grace period, and so does the fast path for the connections it serves.
func TestShutdownFinishesRequests(t *testing.T) {
	bin := gatewayBinary(t)
	for _, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("apigate wrapper %v", wrapper), func(t *testing.T) {
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
				io.WriteString(w, "done")
			}))
			defer up.Close()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			ports := freeport.Ports(t, 2)
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			// (no shutdown_delay: the listener closes at SIGTERM)
			p := runGateway(t, bin, "shutdown", drainConfigAPI(ports[0], ports[1], 0, wrapper, "", "reverse_proxy "+up.Listener.Addr().String()), base+"/ready")

			type answer struct {
				code int
				body string
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				res, err := (&http.Client{Timeout: 20 * time.Second}).Get(base + "/slow")
				if err != nil {
					got <- answer{err: err}
					return
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				got <- answer{res.StatusCode, string(b), err}
			}()
			select {
			case <-arrived:
			case a := <-got:
				t.Fatalf("the request ended before it reached the upstream: %+v", a)
			case <-time.After(10 * time.Second):
				t.Fatal("the request did not reach the upstream within 10s")
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// the listener closes (the shutdown has begun) while the
			// upstream still holds the request
			podmantest.Eventually(t, "the listener closed after SIGTERM", 10*time.Second, func() string {
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[1]), time.Second)
				if err != nil {
					return ""
				}
				c.Close()
				return "still accepting"
			})
			close(release)
			a := <-got
			if a.err != nil || a.code != 200 || a.body != "done" {
				t.Fatalf("the request in flight at shutdown got %d %q %v; want 200 \"done\"", a.code, a.body, a.err)
			}
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the gateway did not exit within 10s of its last request")
			}
		})
	}
}
