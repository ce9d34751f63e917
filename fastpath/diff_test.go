package fastpath

import (
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyh1"
	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// Ports of this package: admin 2960, listeners 20400-20499.
const (
	adminPort = 2960
	plainPort = 20402 // a server on Caddy's path
	fastPort  = 20403 // the same server with the apigate wrapper
)

// twinOpts vary the twin config.
type twinOpts struct {
	globals    string // inside the global options block
	serverOpts string // inside both servers' options
	https      bool   // sites over TLS (tls internal)
	extra      string // more sites
}

// twin returns a config of two servers with the same site body: one on
// Caddy's path (plainPort, server "plain") and one with apigate (fastPort,
// server "fast").
func twin(o twinOpts, site string) string {
	addr, tls := "http://", ""
	if o.https {
		addr, tls = "https://127.0.0.1", "\ttls internal\n"
		o.globals += "\n\tskip_install_trust"
	}
	return fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20400
	https_port 20401
	grace_period 1ms
	log {
		level ERROR
	}
	servers :%[2]d {
		name plain
%[6]s
	}
	servers :%[3]d {
		name fast
		listener_wrappers {
			apigate
		}
%[6]s
	}
%[4]s
}
%[7]s:%[2]d {
%[8]s%[5]s
}
%[7]s:%[3]d {
%[8]s%[5]s
}
%[9]s
`, adminPort, plainPort, fastPort, o.globals, site, o.serverOpts, addr, tls, o.extra)
}

// loadTwin loads a twin config and checks that the fast path serves the
// "fast" server: a differential test that compared Caddy with itself would
// pass whatever the plan did.
func loadTwin(t *testing.T, globals, site string) {
	t.Helper()
	loadTwinOpts(t, twinOpts{globals: globals}, site)
}

func loadTwinOpts(t *testing.T, o twinOpts, site string) {
	t.Helper()
	caddytester.StopServers(t, adminPort)
	caddytester.Load(t, adminPort, twin(o, site))
	requireFast(t, "fast")
}

func requireFast(t *testing.T, server string) {
	t.Helper()
	for _, s := range Status() {
		if s.Server == server {
			if !s.On {
				t.Fatalf("the fast path is off for server %q: %s", server, s.Reason)
			}
			return
		}
	}
	t.Fatalf("no fast path status for server %q: %+v", server, Status())
}

// TestDifferential sends caddyh1's differential table (upstream behaviours
// of every kind) through a server on Caddy's path and the same server on
// the fast path, and expects the client to see the same thing.
func TestDifferential(t *testing.T) {
	u := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		h := difftest.Behaviours[req.URL.Path]
		if h == nil {
			return difftest.Reply(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
		}
		return h(c, req, body)
	})
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1 {
			response_header_timeout 1s
			max_response_header 256KB
		}
	}`, u.Addr()))
	before := servedCount(t, "fast")
	lanes := lanesCounted(t)
	for _, tc := range difftest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			compareSeq(t, tc.Seq)
		})
	}
	after := servedCount(t, "fast")
	t.Logf("fast path served %v requests", after-before)
	if after <= before {
		t.Fatalf("the fast path served no request (%v before, %v after)", before, after)
	}
	// the comparison with the map mode means something only if the
	// other fast run took the lanes
	if plain, take, lazy := lanes(); plain == 0 || take == 0 || lazy == 0 {
		t.Fatalf("the fast path took the plain lane %d times, the upstream's header %d times and the lazy map %d times: the map mode compared nothing", plain, take, lazy)
	}
}

// compareSeq sends seq on one client to each server and compares.
func compareSeq(t *testing.T, seq []difftest.Request) {
	t.Helper()
	compareSeqWith(t, seq, nil)
}

// compareSeqWith is compareSeq with clients newClient makes (nil: HTTP/1.1).
func compareSeqWith(t *testing.T, seq []difftest.Request, newClient func() *http.Client) {
	t.Helper()
	got := make([][]difftest.ClientResult, len(diffRuns))
	for i, run := range diffRuns {
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 20 * time.Second}
		if newClient != nil {
			client = newClient()
		}
		run.do(func() {
			for _, rq := range seq {
				got[i] = append(got[i], difftest.Do(client, run.port, rq))
			}
		})
		client.CloseIdleConnections()
	}
	for j := range seq {
		normPorts(&got[0][j])
		for i := 1; i < len(diffRuns); i++ {
			normPorts(&got[i][j])
			if !reflect.DeepEqual(got[0][j], got[i][j]) {
				t.Errorf("request %d (%s %s) differs\n%s: %v\n%s: %v",
					j, seq[j].Method, seq[j].Path, diffRuns[0].name, got[0][j], diffRuns[i].name, got[i][j])
			}
		}
	}
}

// diffRun is one way a differential test sends its requests: to Caddy's
// path, to the fast path, or to the fast path in the map mode, with its
// lanes off (lanes.go): a case a lane misses shows as a difference from
// both of the others.
type diffRun struct {
	name     string
	port     int
	mapsOnly bool
}

var diffRuns = []diffRun{
	{"Caddy's path", plainPort, false},
	{"fast path", fastPort, false},
	{"fast path, maps only", fastPort, true},
}

// do runs fn in the run's mode.
func (r diffRun) do(fn func()) {
	prev := mapsOnly.Swap(r.mapsOnly)
	defer mapsOnly.Store(prev)
	fn()
}

// lanesCounted counts, for the rest of the test, the requests that take
// each lane, and returns a function that reads the counts since the call.
func lanesCounted(t *testing.T) func() (plain, take, lazy int64) {
	countLanes.Store(true)
	t.Cleanup(func() { countLanes.Store(false) })
	p0, t0, l0 := lanesTaken.plain.Load(), lanesTaken.take.Load(), lanesTaken.lazy.Load()
	return func() (int64, int64, int64) {
		return lanesTaken.plain.Load() - p0, lanesTaken.take.Load() - t0, lanesTaken.lazy.Load() - l0
	}
}

func servedCount(t *testing.T, server string) float64 {
	for _, s := range Status() {
		if s.Server == server {
			return s.Requests
		}
	}
	t.Fatalf("no status for server %q", server)
	return 0
}

// normPorts replaces each server's own port in what a client saw (an
// Alt-Svc field names it) by "PORT".
func normPorts(r *difftest.ClientResult) {
	rp := strings.NewReplacer(fmt.Sprint(plainPort), "PORT", fmt.Sprint(fastPort), "PORT")
	for k, vv := range r.Header {
		for i, v := range vv {
			vv[i] = rp.Replace(v)
		}
		r.Header[k] = vv
	}
	r.Body = rp.Replace(r.Body)
}
