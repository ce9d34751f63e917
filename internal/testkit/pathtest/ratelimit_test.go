package pathtest_test

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	_ "github.com/mholt/caddy-ratelimit"

	"github.com/apigate/gateway/fastpath"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package: admin 2970, listeners 20500-20549.
const (
	adminPort = 2970
	tlsPort   = 20501
)

// limit is the zone's events per window.
const limit = 6

// TestRateLimitSharedAcrossPaths: one server over TLS with a rate_limit
// zone, requests alternating between an HTTP/1.1 client and an HTTP/2
// client (both served by the fast path: its HTTP/2 engine runs the same
// plan): the client's limit counts the requests of both, so the limit is
// hit at exactly the configured count, whichever protocol sends the
// request over it. fastpath.Status shows each request served by the plan:
// served grows by one for each, handed_off never.
//
// The same sequence runs on Caddy's path alone (both protocols served by
// Caddy), and each response is compared between the two.
func TestRateLimitSharedAcrossPaths(t *testing.T) {
	pathtest.Run(t, testRateLimitSharedAcrossPaths)
}

func testRateLimitSharedAcrossPaths(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b) // a zone of its own: zones outlive config loads
	p.Load(t, adminPort, fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20510
	https_port 20511
	grace_period 1s
	skip_install_trust
	auto_https disable_redirects
}

https://127.0.0.1:%[2]d {
	tls internal
	route /limited {
		rate_limit {
			zone shared_%[3]s {
				key {remote_host}
				events %[4]d
				window 1m
			}
		}
		respond "ok {http.request.proto}"
	}
	respond /health "ok"
}
`, adminPort, tlsPort, run, limit), "srv0")

	tlsConf := &tls.Config{InsecureSkipVerify: true}
	h1 := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}}
	defer h1.CloseIdleConnections()
	// h2 makes a client of its own per request: each request is a new
	// connection
	h2 := func() *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: true}}
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", tlsPort)

	// tls internal issues the certificate in the background
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := h1.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for i := 1; i <= limit+2; i++ {
		proto, client := "HTTP/1.1", h1
		if i%2 == 0 {
			proto, client = "HTTP/2.0", h2()
		}
		t.Run(fmt.Sprintf("request %d over %s", i, proto), func(t *testing.T) {
			before := status(t, p)
			resp, err := client.Get(url + "/limited")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if client != h1 {
				client.CloseIdleConnections()
			}
			rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(body)))
			if resp.Proto != proto {
				t.Fatalf("the response came over %s, want %s", resp.Proto, proto)
			}
			if i <= limit {
				if resp.StatusCode != 200 || string(body) != "ok "+proto {
					t.Fatalf("%d %q, want 200 within the limit of %d", resp.StatusCode, body, limit)
				}
			} else {
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if resp.StatusCode != 429 || err != nil || ra < 1 || ra > 60 {
					t.Fatalf("%d, Retry-After %q: want 429 over the limit of %d counted on both paths, and whole seconds in [1,60]",
						resp.StatusCode, resp.Header.Get("Retry-After"), limit)
				}
			}
			if !p.Fast {
				return
			}
			after := status(t, p)
			served, handedOff := after.Served-before.Served, after.HandedOff-before.HandedOff
			if served != 1 || handedOff != 0 {
				t.Errorf("%s: served +%d, handed_off +%d; want the fast path to serve it (+1, +0)", proto, served, handedOff)
			}
		})
	}
}

// status returns the fast path's status of srv0 (zero on Caddy's path).
func status(t *testing.T, p pathtest.Path) fastpath.ServerStatus {
	t.Helper()
	if !p.Fast {
		return fastpath.ServerStatus{}
	}
	for _, s := range fastpath.Status() {
		if s.Server == "srv0" {
			return s
		}
	}
	t.Fatalf("srv0 has no fast path status: %v", fastpath.Status())
	return fastpath.ServerStatus{}
}
