package caddyh1

import (
	"fmt"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// Ports of this package: admin 2909, listeners 20100-20199 (bench/ uses
// 2910-2919 and 19900-19999; the other packages 2901-2908 and 2917-2927).
const (
	adminPort = 2909
	httpPort  = 20102 // reverse_proxy with transport http
	h1Port    = 20103 // reverse_proxy with transport h1
)

// startCaddy loads config into the in-process Caddy of this test binary.
func startCaddy(t *testing.T, config string) { caddytester.Load(t, adminPort, config) }

func globalOptions() string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port 20100
	https_port 20101
	grace_period 1ms
	log {
		level ERROR
	}
}
`, adminPort)
}

// TestDifferential sends the same requests through Caddy's reverse_proxy
// with `transport http` and with `transport h1`, to the same scripted
// upstream, and expects the client to see the same thing.
func TestDifferential(t *testing.T) {
	u := newUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		h := difftest.Behaviours[req.URL.Path]
		if h == nil {
			return reply(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
		}
		return h(c, req, body)
	})
	startCaddy(t, globalOptions()+fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	reverse_proxy %[3]s {
		transport http {
			response_header_timeout 1s
			max_response_header 256KB
		}
	}
}
http://127.0.0.1:%[2]d {
	reverse_proxy %[3]s {
		transport h1 {
			response_header_timeout 1s
			max_response_header 256KB
		}
	}
}
`, httpPort, h1Port, u.Addr()))

	for _, tc := range difftest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			var got [2][]difftest.ClientResult
			for i, port := range []int{httpPort, h1Port} {
				client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 20 * time.Second}
				for _, rq := range tc.Seq {
					got[i] = append(got[i], difftest.Do(client, port, rq))
				}
				client.CloseIdleConnections()
			}
			for j := range tc.Seq {
				if !reflect.DeepEqual(got[0][j], got[1][j]) {
					t.Errorf("request %d (%s %s) differs\ntransport http: %v\ntransport h1:   %v",
						j, tc.Seq[j].Method, tc.Seq[j].Path, got[0][j], got[1][j])
				}
			}
		})
	}
}
