package fleettest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

// Ports of this package (the natsstore range of the team brief).
var (
	adminPorts = []int{2907, 2917, 2927}
	httpPorts  = []int{19700, 19710, 19720}
	httpsPorts = []int{19701, 19711, 19721}
)

const (
	jwtSecret   = "fleet-test-secret-0123456789abcdef"
	limitEvents = 30 // events of zone per_user in testdata/replica.Caddyfile
)

// repoRoot is the module root (three levels up from this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", "..", ".."))
}

// needModules are the modules the replica and canary configs use.
var needModules = []string{"caddy.storage.nats", "audit", "http.handlers.audit", "http.handlers.gateway_ready",
	"http.handlers.jwt_auth", "http.handlers.rate_limit", "http.handlers.permission",
	"http.reverse_proxy.selection_policies.docker", "quota", "http.handlers.quota"}

// gatewayBinary finds a gateway binary with every module the fleet needs:
// $FLEET_CADDY, else bin/caddy (built by build/build.sh), else it builds
// ./internal/testkit/fleettest/fleetcaddy with go build.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	hasAll := func(bin string) bool {
		out, err := exec.Command(bin, "list-modules").Output()
		if err != nil {
			return false
		}
		have := map[string]bool{}
		for _, l := range strings.Fields(string(out)) {
			have[l] = true
		}
		for _, m := range needModules {
			if !have[m] {
				t.Logf("%s lacks module %s", bin, m)
				return false
			}
		}
		return true
	}
	if b := os.Getenv("FLEET_CADDY"); b != "" {
		if !hasAll(b) {
			t.Fatalf("FLEET_CADDY=%s is not a gateway binary with %v", b, needModules)
		}
		return b
	}
	if b := filepath.Join(root, "bin", "caddy"); hasAll(b) {
		return b
	}
	out := filepath.Join(t.TempDir(), "fleetcaddy")
	t.Logf("building %s (bin/caddy missing or incomplete)", out)
	cmd := exec.Command("go", "build", "-o", out, "./internal/testkit/fleettest/fleetcaddy")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build fleetcaddy: %v\n%s", err, b)
	}
	return out
}

// replica is one gateway process.
type replica struct {
	idx  int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (r *replica) httpURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", httpPorts[r.idx], path)
}

func startReplica(t *testing.T, bin, config string, idx int, env []string) *replica {
	t.Helper()
	dir := t.TempDir()
	r := &replica{idx: idx, log: filepath.Join(dir, "caddy.log"), done: make(chan struct{})}
	logf, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(),
		// Separate data and config dirs: each replica has its own
		// instance id (rate_limit's distributed mode keys state on it).
		"HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		fmt.Sprintf("GATEWAY_ADMIN=127.0.0.1:%d", adminPorts[idx]),
		fmt.Sprintf("GATEWAY_HTTP_PORT=%d", httpPorts[idx]),
		fmt.Sprintf("GATEWAY_HTTPS_PORT=%d", httpsPorts[idx]),
		fmt.Sprintf("GATEWAY_NODE=replica-%d", idx),
		"SHUTDOWN_DELAY=500ms",
		"AUDIT_SPOOL="+filepath.Join(dir, "audit"),
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(r.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(r.log)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("replica %d log (tail):\n%s", idx, b)
		}
	})
	// Ready when the public route answers.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-r.done:
			b, _ := os.ReadFile(r.log)
			t.Fatalf("replica %d exited:\n%s", idx, b)
		default:
		}
		resp, err := http.Get(r.httpURL("/ready"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return r
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(r.log)
			t.Fatalf("replica %d not ready: %v\n%s", idx, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func token(t *testing.T, sub string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func get(url, bearer, reqID string) (int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if reqID != "" {
		req.Header.Set("X-Request-Id", reqID)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// certFingerprint returns the SHA-256 of the leaf certificate served for
// fleet.localhost on the replica's HTTPS port.
func certFingerprint(idx int) (string, error) { return certFingerprintAt(httpsPorts[idx]) }

// certFingerprintAt returns the SHA-256 of the leaf certificate served
// for fleet.localhost on 127.0.0.1:port.
func certFingerprintAt(port int) (string, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", port),
		&tls.Config{ServerName: "fleet.localhost", InsecureSkipVerify: true})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", errors.New("no certificate")
	}
	sum := sha256.Sum256(certs[0].Raw)
	return hex.EncodeToString(sum[:]), nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

// TestFleet runs three gateway replicas (testdata/replica.Caddyfile) on one
// three-node NATS JetStream cluster and checks what the fleet shares.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet test starts 3 NATS servers and 3 gateway processes; not in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the fleet test runs on Linux")
	}
	start := time.Now()
	bin := gatewayBinary(t)
	t.Logf("gateway binary: %s (%v)", bin, time.Since(start).Round(time.Second))

	cluster := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(cluster.URL(), nats.Name("fleet-test"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The audit stream, as docs/fleet.md creates it: 3 replicas, a
	// 2-minute duplicate window (Nats-Msg-Id = request id).
	waitFor(t, "creating the AUDIT stream", 30*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(c, auditStreamConfig)
		return err
	})

	perm := startPermService(t)
	config := filepath.Join("testdata", "replica.Caddyfile")
	env := []string{
		"NATS_URLS=" + cluster.URL(),
		"JWT_SECRET=" + jwtSecret,
		"PERMISSION_URL=" + perm.URL,
	}

	// Replica 0 first: it creates the internal CA and the certificate.
	reps := []*replica{startReplica(t, bin, config, 0, env)}
	var fp0 string
	waitFor(t, "replica 0 serving fleet.localhost", 60*time.Second, func() (err error) {
		fp0, err = certFingerprint(0)
		return err
	})
	reps = append(reps, startReplica(t, bin, config, 1, env), startReplica(t, bin, config, 2, env))
	t.Logf("3 replicas up after %v", time.Since(start).Round(time.Second))

	t.Run("one NATS connection per replica", func(t *testing.T) {
		// storage, the audit sink (and permission invalidation) share
		// natsconn's connection: 3 replicas, 3 connections named apigate.
		waitFor(t, "counting connections", 10*time.Second, func() error {
			n := 0
			for _, s := range cluster.Servers() {
				cz, err := s.Connz(&server.ConnzOptions{})
				if err != nil {
					return err
				}
				for _, c := range cz.Conns {
					if c.Name == "apigate" {
						n++
					}
				}
			}
			if n != 3 {
				return fmt.Errorf("%d connections named apigate, want 3", n)
			}
			return nil
		})
	})

	t.Run("tls internal certificate shared", func(t *testing.T) {
		for i := 1; i < 3; i++ {
			var fp string
			waitFor(t, fmt.Sprintf("replica %d serving fleet.localhost", i), 30*time.Second, func() (err error) {
				fp, err = certFingerprint(i)
				return err
			})
			if fp != fp0 {
				t.Errorf("replica %d serves certificate %s, replica 0 serves %s", i, fp[:16], fp0[:16])
			}
		}
		kv, err := js.KeyValue(ctx, "gateway_storage")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"pki.authorities.local.root=2Ecrt",
			"certificates.local.fleet=2Elocalhost.fleet=2Elocalhost=2Ecrt"} {
			if _, err := kv.Get(ctx, k); err != nil {
				t.Errorf("KV key %s: %v", k, err)
			}
		}
		t.Logf("one certificate (sha256 %s...) served by all 3 replicas", fp0[:16])
	})

	t.Run("rate limit across replicas", func(t *testing.T) {
		// One user, requests spread round robin over the 3 replicas at a
		// steady pace, 3x the limit in all, all within the 1m window.
		tok := token(t, fmt.Sprintf("rl-user-%d", time.Now().UnixNano()))
		const pace = 50 * time.Millisecond
		admitted, limited := 0, 0
		perReplica := make([]int, 3)
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := 0; i < 3*limitEvents; i++ {
			<-tick.C
			code, err := get(reps[i%3].httpURL("/limited/x"), tok, "")
			if err != nil {
				t.Fatal(err)
			}
			switch code {
			case 200:
				admitted++
				perReplica[i%3]++
			case 429:
				limited++
			default:
				t.Fatalf("status %d", code)
			}
		}
		// Bound (docs/fleet.md): limit + fleet rate x sync delay
		// (read_interval + write_interval = 200ms, 20 req/s => 4), with
		// slack for a slow machine; without sharing it would be 90.
		t.Logf("rate limit: %d of %d requests admitted for a limit of %d (%.0f%% of the limit; per replica %v; 429s %d)",
			admitted, 3*limitEvents, limitEvents, 100*float64(admitted)/limitEvents, perReplica, limited)
		if admitted < limitEvents {
			t.Errorf("admitted %d < limit %d", admitted, limitEvents)
		}
		if admitted > limitEvents+limitEvents/2 {
			t.Errorf("admitted %d: the limit of %d is not shared (bound %d)", admitted, limitEvents, limitEvents+limitEvents/2)
		}
	})

	t.Run("permission invalidation reaches every replica", func(t *testing.T) {
		testInvalidation(t, ctx, nc, reps, perm)
	})

	t.Run("NATS node killed under load", func(t *testing.T) {
		// Load on the audited public route with unique request ids; kill
		// the audit stream's leader meanwhile.
		var (
			mu      sync.Mutex
			ids     = map[string]bool{}
			stop    atomic.Bool
			wg      sync.WaitGroup
			failed  atomic.Int64
			counter atomic.Int64
		)
		run := fmt.Sprintf("%d", time.Now().UnixNano())
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for !stop.Load() {
					id := fmt.Sprintf("kill-%s-%d", run, counter.Add(1))
					code, err := get(reps[w%3].httpURL("/public"), "", id)
					if err != nil || code != 200 {
						failed.Add(1)
						continue
					}
					mu.Lock()
					ids[id] = true
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(time.Second)
		si, err := js.Stream(ctx, "AUDIT")
		if err != nil {
			t.Fatal(err)
		}
		info, err := si.Info(ctx)
		if err != nil || info.Cluster == nil {
			t.Fatalf("stream info: %v", err)
		}
		victim := cluster.ByName(info.Cluster.Leader)
		if victim == nil {
			victim = cluster.Server(0)
		}
		killed := time.Now()
		victim.Shutdown()
		t.Logf("killed NATS node %s (AUDIT stream leader) under load", victim.Name())
		time.Sleep(3 * time.Second)
		stop.Store(true)
		wg.Wait()
		mu.Lock()
		sent := len(ids)
		mu.Unlock()
		if sent == 0 {
			t.Fatal("no request succeeded")
		}
		// Losing one NATS node of three costs no request: audit delivery
		// and storage are the cluster's, not the request's.
		if n := failed.Load(); n != 0 {
			t.Errorf("%d requests failed while a NATS node was down (%d succeeded)", n, sent)
		}

		// Every answered request has exactly one audit event.
		got := map[string]int{}
		waitFor(t, "audit events of every request", 90*time.Second, func() error {
			got = map[string]int{}
			cons, err := js.OrderedConsumer(ctx, "AUDIT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"gateway.audit"}})
			if err != nil {
				return err
			}
			c, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			si, err := js.Stream(c, "AUDIT")
			if err != nil {
				return err
			}
			total := si.CachedInfo().State.Msgs
			for n := uint64(0); n < total; {
				batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
				if err != nil {
					return err
				}
				k := 0
				for m := range batch.Messages() {
					k++
					// The client's ids (X-Request-Id) are recorded as
					// client_request_id; request_id is the gateway's.
					var ev struct {
						ClientRequestID string `json:"client_request_id"`
					}
					if json.Unmarshal(m.Data(), &ev) == nil && strings.HasPrefix(ev.ClientRequestID, "kill-"+run+"-") {
						got[ev.ClientRequestID]++
					}
				}
				if k == 0 {
					break
				}
				n += uint64(k)
			}
			missing := 0
			for id := range ids {
				if got[id] == 0 {
					missing++
				}
			}
			if missing > 0 {
				return fmt.Errorf("%d of %d audit events missing", missing, sent)
			}
			return nil
		})
		dups := 0
		for _, n := range got {
			if n > 1 {
				dups++
			}
		}
		if dups > 0 {
			t.Errorf("%d request ids stored more than once", dups)
		}
		t.Logf("node killed under load: %d requests answered (%d failed), %d audit events, none lost, %d duplicates",
			sent, failed.Load(), len(got), dups)

		// Storage keeps working: every replica's rate limit state is
		// written again after the kill.
		kv, err := js.KeyValue(ctx, "gateway_storage")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "rate limit state written after the kill", 30*time.Second, func() error {
			kl, err := kv.ListKeysFiltered(ctx, "rate_limit.instances.*")
			if err != nil {
				return err
			}
			fresh := 0
			for k := range kl.Keys() {
				e, err := kv.Get(ctx, k)
				if err == nil && e.Created().After(killed.Add(time.Second)) {
					fresh++
				}
			}
			if fresh < 3 {
				return fmt.Errorf("%d of 3 replicas wrote their state after the kill", fresh)
			}
			return nil
		})
		code, err := get(reps[1].httpURL("/public"), "", "after-kill-"+run)
		if err != nil || code != 200 {
			t.Fatalf("after the kill: %d, %v", code, err)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		// Caddy's admin endpoint serves the config's metrics registry.
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPorts[0]))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			"gateway_nats_connected{",
			"gateway_nats_reconnects_total{",
			`gateway_permission_invalidations_total{kind="subject"`,
			"gateway_permission_invalidated_decisions_total{",
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Logf("fleet test took %v", time.Since(start).Round(time.Second))
}

var auditStreamConfig = jetstream.StreamConfig{
	Name:       "AUDIT",
	Subjects:   []string{"gateway.audit"},
	Storage:    jetstream.FileStorage,
	Replicas:   3,
	Duplicates: 2 * time.Minute,
	MaxAge:     7 * 24 * time.Hour,
}

func jsonDecode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}
