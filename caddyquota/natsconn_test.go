package caddyquota_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/natstest"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestFleetOverTLS: the quota fleet reaches a server that requires TLS and
// a client certificate through the connection block's tls options: the
// gateway leases from the fleet's bucket (its fleet is available, a lease
// operation succeeded) and the bucket holds its counts.
func TestFleetOverTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	adminPort, httpPort := ports[0], ports[1]
	tester := caddytester.Load(t, adminPort, fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port %[3]d
	https_port %[4]d
	quota {
		plan metered {
			limit 1000/day
		}
		on_unavailable fail_closed
		dir %[5]s
		fleet {
			servers %[6]s
			%[7]s
			bucket quota_tls
			sync_interval 100ms
		}
	}
}

:%[2]d {
	quota {
		key {http.request.header.X-Consumer}
		plan metered
	}
	respond "ok"
}
`, adminPort, httpPort, ports[3], ports[4], t.TempDir(), s.URL, s.Caddyfile()))
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", httpPort), nil)
		req.Header.Set("X-Consumer", "tls-consumer")
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		m := pathtest.Metrics(t, adminPort, "gateway_quota_fleet")
		if resp.StatusCode == 200 && m["gateway_quota_fleet_available"] == 1 && m[`gateway_quota_fleet_operations_total{result="ok"}`] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not lease over TLS: last answer %d, metrics %v", resp.StatusCode, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, js := s.Connect(t)
	if _, err := js.KeyValue(t.Context(), "quota_tls"); err != nil {
		t.Fatalf("the fleet's bucket, read over TLS: %v", err)
	}
}
