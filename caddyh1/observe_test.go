package caddyh1

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

type seen struct {
	status  int
	err     error
	latency time.Duration
}

type recordingObserver struct{ got []seen }

func (o *recordingObserver) ObserveAnswer(status int, err error, latency time.Duration) {
	o.got = append(o.got, seen{status, err, latency})
}

// TestObserve: an observer set on a request (as the docker selection
// policy sets one) learns the status, the connection failure and the
// latency of each attempt, through RoundTrip (Caddy's reverse_proxy) and
// RoundTripTo (the fast path); a request without one is sent as before.
func TestObserve(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	tr := &Transport{DialTimeout: caddy.Duration(time.Second)}
	if err := tr.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer tr.Cleanup()

	slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ok := newBackend(t, "ok", func(w http.ResponseWriter, r *http.Request) {})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	request := func(addr string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, "http://"+addr+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
	}
	for _, tc := range []struct {
		name       string
		addr       string
		viaCaddy   bool
		wantStatus int
		wantErr    bool
		minLatency time.Duration
	}{
		{name: "5xx after 30ms, fast path", addr: slow.addr(), wantStatus: 503, minLatency: 30 * time.Millisecond},
		{name: "5xx after 30ms, Caddy's path", addr: slow.addr(), viaCaddy: true, wantStatus: 503, minLatency: 30 * time.Millisecond},
		{name: "200, Caddy's path", addr: ok.addr(), viaCaddy: true, wantStatus: 200},
		{name: "connection refused, fast path", addr: deadAddr, wantErr: true},
		{name: "connection refused, Caddy's path", addr: deadAddr, viaCaddy: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.addr)
			o := &recordingObserver{}
			Observe(r, o)
			var res *http.Response
			var err error
			if tc.viaCaddy {
				res, err = tr.RoundTrip(r)
			} else {
				res, err = tr.RoundTripTo(r, "tcp", tc.addr)
			}
			if res != nil {
				res.Body.Close()
			}
			if len(o.got) != 1 {
				t.Fatalf("observed %d answers, want 1", len(o.got))
			}
			g := o.got[0]
			if g.status != tc.wantStatus || (g.err != nil) != tc.wantErr || (err != nil) != tc.wantErr {
				t.Fatalf("observed status %d err %v (round trip err %v), want %d err=%v", g.status, g.err, err, tc.wantStatus, tc.wantErr)
			}
			if tc.wantErr && !errors.As(g.err, new(*DialError)) {
				t.Fatalf("observed %T %v, want the transport's DialError", g.err, g.err)
			}
			if g.latency < tc.minLatency || g.latency > 5*time.Second {
				t.Fatalf("latency %v, want at least %v", g.latency, tc.minLatency)
			}
		})
	}

	t.Run("no observer", func(t *testing.T) {
		res, err := tr.RoundTripTo(request(ok.addr()), "tcp", ok.addr())
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	})
	t.Run("replaced by nil", func(t *testing.T) {
		r := request(ok.addr())
		o := &recordingObserver{}
		Observe(r, o)
		Observe(r, nil)
		res, err := tr.RoundTripTo(r, "tcp", ok.addr())
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if len(o.got) != 0 {
			t.Fatalf("a replaced observer saw %d answers", len(o.got))
		}
	})
}
