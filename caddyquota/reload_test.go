package caddyquota_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/natstest"
)

func init() { caddy.RegisterModule(gate{}) }

// gate holds a request marked X-Gate before the next handler until the
// test lets it on: a request of the old config still under way when a
// reload has cleaned that config up (Caddy's reload does not wait for
// the old config's requests).
type gate struct{}

var (
	gateArrived = make(chan struct{}, 1)
	gateOpen    = make(chan struct{})
)

func (gate) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.quota_test_gate", New: func() caddy.Module { return gate{} }}
}

func (gate) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.Header.Get("X-Gate") != "" {
		gateArrived <- struct{}{}
		<-gateOpen
	}
	return next.ServeHTTP(w, r)
}

// TestCountsThroughReload: a handler with counts of its own (a rate
// limit of a discovered route) decides the requests of its config that
// are still under way when a reload has cleaned that config up (the
// docker app's route changes reload the config under load), whether the
// new config still counts in the store (a route change) or not (the
// route removed), alone and with a fleet, and nothing it admitted is
// lost: the next config refuses the consumer at its limit. Before, the
// old config's cleanup closed the store when no request had reached the
// new config yet, and the request got 503 quota_unavailable.
func TestCountsThroughReload(t *testing.T) {
	nc := natstest.StartCluster(t, 1)
	for _, tc := range []struct {
		name  string
		fleet string
	}{
		{"alone", ""},
		{"fleet", fmt.Sprintf(`,"fleet":{"servers":[%q],"node":"gw1","sync_interval":"50ms"}`, nc.URL())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", t.TempDir())
			ports := freeport.Ports(t, 1)
			dir := filepath.Join(t.TempDir(), "counts")
			base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
			config := func(body string, limited bool) []byte {
				handle := fmt.Sprintf(`{"handler":"quota_test_gate"},`+
					`{"handler":"quota","key":"{http.request.header.X-Client}","plan":"per_client","limits":["3/1m"],"counts":{"dir":%q%s}},`+
					`{"handler":"static_response","body":%q}`, dir, tc.fleet, body)
				if !limited {
					handle = fmt.Sprintf(`{"handler":"static_response","body":%q}`, body)
				}
				return []byte(fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"http":{"grace_period":"1ms","servers":{"srv0":{"listen":["127.0.0.1:%d"],"routes":[{"handle":[%s]}]}}}}}`, ports[0], handle))
			}
			get := func(client string, gated bool) (int, string) {
				req, _ := http.NewRequest("GET", base+"/", nil)
				req.Header.Set("X-Client", client)
				if gated {
					req.Header.Set("X-Gate", "1")
				}
				// a connection of its own: an old config's keep-alive
				// connection is closed by the reload
				resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			// holdThrough sends a request of client that the gate holds
			// while next is loaded, then lets it on; its answer
			holdThrough := func(client string, next []byte) (int, string) {
				type answer struct {
					code int
					body string
				}
				got := make(chan answer, 1)
				go func() {
					code, body := get(client, true)
					got <- answer{code, body}
				}()
				select {
				case <-gateArrived:
				case <-time.After(10 * time.Second):
					t.Fatal("the held request did not reach the gate")
				}
				if err := caddy.Load(next, true); err != nil {
					t.Fatal(err)
				}
				gateOpen <- struct{}{}
				a := <-got
				return a.code, a.body
			}
			if err := caddy.Load(config("one", true), true); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = caddy.Stop() })
			if code, body := get("a", false); code != 200 || body != "one" {
				t.Fatalf("first request: %d %q", code, body)
			}

			// a route change: the new config counts in the same store,
			// and no request has reached it yet
			if code, body := holdThrough("b", config("two", true)); code != 200 || body != "one" {
				t.Fatalf("a request of the old config under way through a route change: %d %q, want 200 \"one\"", code, body)
			}
			// the route removed: no config counts there any more
			if code, body := holdThrough("c", config("three", false)); code != 200 || body != "two" {
				t.Fatalf("a request of the old config under way while its route is removed: %d %q, want 200 \"two\"", code, body)
			}

			// the route back: b and c each have 1 of 3 counted
			if err := caddy.Load(config("four", true), true); err != nil {
				t.Fatal(err)
			}
			for _, client := range []string{"b", "c"} {
				var codes []int
				for i := 0; i < 3; i++ {
					code, _ := get(client, false)
					codes = append(codes, code)
				}
				if got, _ := json.Marshal(codes); string(got) != "[200,200,429]" {
					t.Errorf("client %s after the reloads: %s, want [200,200,429] (its held request counted)", client, got)
				}
			}
		})
	}
}
