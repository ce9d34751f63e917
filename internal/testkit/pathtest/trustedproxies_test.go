package pathtest_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// behindLBPort is the gateway's port behind a (simulated) load balancer.
const behindLBPort = 20520

// TestBehindLoadBalancer: a gateway behind a load balancer, as
// docs/caddyrbac.md recommends: trusted_proxies, audit, a rate limit keyed
// on {client_ip}. Two clients reach it through the same proxy address
// (127.0.0.1), told apart by X-Forwarded-For: each has its own bucket, the
// audit events carry each client's address, {client_ip} names it; the
// same on both paths. (On the fast path trusted_proxies was once ignored:
// one bucket for everyone, the proxy's address in every event.)
func TestBehindLoadBalancer(t *testing.T) {
	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		dir := t.TempDir()
		events := filepath.Join(dir, "audit.jsonl")
		p.Load(t, adminPort, fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20521
	grace_period 1s
	servers {
		trusted_proxies static private_ranges
	}
	audit {
		sink file %[2]s
	}
}

http://127.0.0.1:%[3]d {
	route /api/* {
		audit
		rate_limit {
			zone lb_%[4]s {
				key {client_ip}
				events 3
				window 1m
			}
		}
		respond "hello {client_ip}"
	}
}
`, adminPort, events, behindLBPort, p.Name), "srv0")

		client := &http.Client{Timeout: 10 * time.Second}
		defer client.CloseIdleConnections()
		n := 0
		for round := 0; round < 4; round++ {
			for _, ip := range []string{"203.0.113.1", "203.0.113.2"} {
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/api/x", behindLBPort), nil)
				req.Header.Set("X-Forwarded-For", ip)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				n++
				rec.Add(p, fmt.Sprintf("%s round %d", ip, round), pathtest.Resp(resp.StatusCode, resp.Header, string(body)))
				want := 200
				if round == 3 {
					want = 429
				}
				if resp.StatusCode != want || want == 200 && string(body) != "hello "+ip {
					t.Errorf("client %s, request %d: %d %q; want %d (a bucket per client, 3 each)", ip, round+1, resp.StatusCode, body, want)
				}
			}
		}
		for i, ev := range pathtest.WaitEvents(t, events, n) {
			rec.Add(p, fmt.Sprintf("event %d", i), pathtest.Event(ev))
			if ev.RemoteIP != "203.0.113.1" && ev.RemoteIP != "203.0.113.2" {
				t.Errorf("event %d: remote_ip %q, want the client's address from X-Forwarded-For", i, ev.RemoteIP)
			}
		}
	})
}
