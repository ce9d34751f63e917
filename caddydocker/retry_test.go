package caddydocker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// upstream is a real TCP upstream on loopback that records the requests it
// gets (by the X-Seq header). A good one answers 200 "good"; the others
// read the request head and then, before answering anything, close the
// connection ("close"), reset it ("reset"), or close it before reading
// ("close-at-once").
type upstream struct {
	kind string
	ln   net.Listener
	mu   sync.Mutex
	seqs []string
}

func startUpstream(t *testing.T, kind string) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{kind: kind, ln: ln}
	t.Cleanup(func() { ln.Close() })
	if kind == "good" {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.record(r.Header.Get("X-Seq"))
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, "good")
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		return u
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.fail(c)
		}
	}()
	return u
}

func (u *upstream) fail(c net.Conn) {
	defer c.Close()
	if u.kind == "close-at-once" {
		u.record("?")
		return
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	u.record(req.Header.Get("X-Seq"))
	if u.kind == "reset" {
		_ = c.(*net.TCPConn).SetLinger(0) // close sends a RST
	}
}

func (u *upstream) record(seq string) {
	u.mu.Lock()
	u.seqs = append(u.seqs, seq)
	u.mu.Unlock()
}

func (u *upstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seqs...)
}

func (u *upstream) port() int { return u.ln.Addr().(*net.TCPAddr).Port }

// TestRetryOnAnotherReplica loads discovered routes, as BuildRoutes makes
// them (h1 transport, the docker upstream source), into a real Caddy and
// sends requests to a service whose first replicas close or reset the
// connection before answering. A GET, HEAD or OPTIONS is retried once, on
// another replica (caddyh1.RetryOnAnother); other methods are never sent
// twice, and fail with 502.
func TestRetryOnAnotherReplica(t *testing.T) {
	const listen = "127.0.0.1:19597"
	load := func(t *testing.T, ups ...*upstream) {
		t.Helper()
		var cs []Container
		for i, u := range ups {
			cs = append(cs, Container{ID: fmt.Sprintf("id-%d", i), Name: fmt.Sprintf("svc-%d-%s", i, u.kind), HostNetwork: true,
				Labels: map[string]string{"gateway.enable": "true", "gateway.name": "svc", "gateway.port": fmt.Sprint(u.port()),
					"gateway.router.api.path_prefix": "/svc", "gateway.router.api.auth.required": "false", "gateway.router.api.audit": "false"}})
		}
		plan, err := BuildRoutes(Discover(cs, LabelOptions{}), BuildOptions{Server: "retrytest"})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := json.Marshal(map[string]any{
			"admin": map[string]any{"disabled": true},
			"apps": map[string]any{"http": map[string]any{"servers": map[string]any{
				"retrytest": map[string]any{"listen": []string{listen}, "routes": plan.Routes},
			}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Load(caddy.RemoveMetaFields(cfg), true); err != nil {
			t.Fatalf("load: %v", err)
		}
		t.Cleanup(func() { _ = caddy.Stop() })
		setPools("retrytest", plan.Pools, nil, nil)
		if got := PoolOf("retrytest", "svc"); len(got) != len(ups) {
			t.Fatalf("pool %v", got)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(t *testing.T, method string, seq int) int {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
			body = strings.NewReader("order")
		}
		req, _ := http.NewRequest(method, "http://"+listen+"/svc/x", body)
		req.Header.Set("X-Seq", fmt.Sprint(seq))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	count := func(seqs []string, seq int) int {
		n := 0
		for _, s := range seqs {
			if s == fmt.Sprint(seq) {
				n++
			}
		}
		return n
	}

	for _, kind := range []string{"close", "reset", "close-at-once"} {
		t.Run(kind+": retried for GET, HEAD, OPTIONS only", func(t *testing.T) {
			bad, good := startUpstream(t, kind), startUpstream(t, "good")
			load(t, bad, good)
			seq := 0
			for _, method := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"} {
				safe := method == "GET" || method == "HEAD" || method == "OPTIONS"
				var failed, toBad int
				for range 6 { // round robin: half start on the bad replica
					seq++
					before := len(bad.got())
					code := send(t, method, seq)
					hitBad := len(bad.got()) > before
					onGood := count(good.got(), seq)
					if hitBad {
						toBad++
					}
					switch {
					case safe && (code != 200 || onGood != 1):
						t.Errorf("%s #%d: %d, %d times on the good replica; want 200, once", method, seq, code, onGood)
					case !safe && hitBad && (code != 502 || onGood != 0):
						t.Errorf("%s #%d: %d, sent %d times to the good replica after the bad one; want 502, never", method, seq, code, onGood)
					case !safe && hitBad:
						failed++
					}
				}
				if toBad == 0 {
					t.Errorf("%s: no request went to the bad replica first; the test shows nothing", method)
				}
				t.Logf("%s: %d of 6 started on the %s replica, %d failed", method, toBad, kind, failed)
			}
		})
	}

	t.Run("a reset is retried once", func(t *testing.T) {
		bad1, bad2, good := startUpstream(t, "reset"), startUpstream(t, "close"), startUpstream(t, "good")
		load(t, bad1, bad2, good)
		twice := 0
		for seq := 1; seq <= 12; seq++ {
			code := send(t, "GET", seq)
			onBad := count(bad1.got(), seq) + count(bad2.got(), seq)
			onGood := count(good.got(), seq)
			switch onBad {
			case 0, 1:
				if code != 200 || onGood != 1 {
					t.Errorf("GET #%d: %d after %d resets, %d times on the good replica; want 200, once", seq, code, onBad, onGood)
				}
			case 2:
				twice++
				if code != 502 || onGood != 0 {
					t.Errorf("GET #%d: %d after two resets, %d times on the good replica; want 502, never (one retry)", seq, code, onGood)
				}
			default:
				t.Errorf("GET #%d: sent to resetting replicas %d times", seq, onBad)
			}
		}
		if twice == 0 {
			t.Errorf("no GET met both resetting replicas; the test shows nothing")
		}
	})
}
