package fastpath

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// clientIPSite shows what a request's client address is, by every means a
// config has: the {client_ip} placeholder and trusted_proxy variable, the
// client_ip and remote_ip matchers, and the X-Forwarded-* fields an
// upstream receives (the echo upstream writes them back).
const clientIPSite = `	@ext client_ip 203.0.113.0/24
	@local remote_ip 127.0.0.1/8
	handle /ip {
		respond "{client_ip} {http.vars.trusted_proxy} {http.request.remote.host}"
	}
	handle /allow {
		respond @ext "external"
		respond "internal"
	}
	handle /rip {
		respond @local "local"
		respond "not local"
	}
	handle /up* {
		reverse_proxy {$UP} {
			transport h1
		}
	}`

// clientIPRequests send forwarding fields of every shape from 127.0.0.1.
func clientIPRequests() []difftest.Request {
	var seq []difftest.Request
	for _, h := range []http.Header{
		nil,
		{"X-Forwarded-For": {"203.0.113.7"}},
		{"X-Forwarded-For": {"203.0.113.7, 10.0.0.2"}},
		{"X-Forwarded-For": {"garbage, 198.51.100.1:4711"}},
		{"X-Forwarded-For": {"198.51.100.9", "203.0.113.8"}},
		{"X-Forwarded-For": {"203.0.113.7, 198.51.100.9, 10.0.0.2"}},
		{"X-Forwarded-For": {"[2001:db8::1]:80"}},
		{"X-Real-Ip": {"203.0.113.99"}, "X-Forwarded-For": {"198.51.100.3"}},
		{"X-Forwarded-For": {"203.0.113.7"}, "X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"orig.example"}},
		{"X-Forwarded-Proto": {"http", "https"}, "X-Forwarded-Host": {""}},
	} {
		for _, path := range []string{"/ip", "/allow", "/rip", "/up/x"} {
			seq = append(seq, difftest.Request{Method: "GET", Path: path, Header: h})
		}
	}
	return seq
}

// TestServerOptions: each server option Caddy has, set on both servers of
// the twin, gives the same answers on both paths, and the fast path serves
// every request (an option the plan does not honour must keep the server
// on Caddy's path, TestOffWhenUnsupported; never be ignored).
func TestServerOptions(t *testing.T) {
	up := newEchoUpstream(t)
	ipSite := strings.ReplaceAll(clientIPSite, "{$UP}", up.Addr())
	plain := `	respond "ok {http.request.header.X-Name}"`
	get := []difftest.Request{{Method: "GET", Path: "/"}, {Method: "GET", Path: "/x", Header: http.Header{"X-Name": {"n"}}}}
	for _, tc := range []struct {
		name, opts, site string
		seq              []difftest.Request
	}{
		{"no trusted_proxies", "", ipSite, clientIPRequests()},
		{"trusted_proxies private_ranges", "\t\ttrusted_proxies static private_ranges", ipSite, clientIPRequests()},
		{"trusted_proxies not covering the peer", "\t\ttrusted_proxies static 10.0.0.0/8", ipSite, clientIPRequests()},
		{"trusted_proxies_strict", "\t\ttrusted_proxies static private_ranges\n\t\ttrusted_proxies_strict", ipSite, clientIPRequests()},
		{"client_ip_headers", "\t\ttrusted_proxies static 127.0.0.1/32\n\t\tclient_ip_headers X-Real-IP X-Forwarded-For", ipSite, clientIPRequests()},
		{"client_ip_headers without trusted_proxies", "\t\tclient_ip_headers X-Real-IP", ipSite, clientIPRequests()},
		{"max_header_size", "\t\tmax_header_size 4KB", plain, append(get, difftest.Request{Method: "GET", Path: "/", Header: http.Header{"X-Big": {strings.Repeat("b", 9000)}}})},
		{"timeouts", "\t\ttimeouts {\n\t\t\tread_body 5s\n\t\t\tread_header 5s\n\t\t\twrite 5s\n\t\t\tidle 1m\n\t\t}", plain, get},
		{"idle timeouts without rates", "\t\ttimeouts {\n\t\t\tread_body_idle 5s\n\t\t\twrite_idle 5s\n\t\t}", plain, get},
		{"keepalive", "\t\tkeepalive_interval 7s\n\t\tkeepalive_idle 20s\n\t\tkeepalive_count 3", plain, get},
		{"protocols h1 only", "\t\tprotocols h1", plain, get},
		{"protocols h1 h2 h2c", "\t\tprotocols h1 h2 h2c", plain, get},
		{"log_credentials without logs", "\t\tlog_credentials", plain, get},
		{"strict_sni_host over plain HTTP", "\t\tstrict_sni_host on", plain, get},
		{"0rtt off", "\t\t0rtt off", plain, get},
		{"enable_full_duplex", "\t\tenable_full_duplex", ipSite, []difftest.Request{
			{Method: "POST", Path: "/up/x", Body: func() io.Reader { return strings.NewReader("full duplex body") }, Length: 16},
			{Method: "POST", Path: "/ip", Body: func() io.Reader { return strings.NewReader(strings.Repeat("x", 5000)) }, Length: 5000},
			{Method: "GET", Path: "/ip"},
		}},
		{"trace", "\t\ttrace", plain, get},
		{"idle timeouts with minimum rates", "\t\ttimeouts {\n\t\t\tread_body_idle 5s 100\n\t\t\twrite_idle 5s 100\n\t\t\twrite_max_chunk 16KB\n\t\t}", ipSite, []difftest.Request{
			{Method: "POST", Path: "/up/x", Body: func() io.Reader { return strings.NewReader("with a minimum rate") }, Length: 19},
			{Method: "GET", Path: "/ip"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loadTwinOpts(t, twinOpts{serverOpts: tc.opts}, tc.site)
			before := servedCount(t, "fast")
			compareSeq(t, tc.seq)
			if n := servedCount(t, "fast") - before; int(n) != fastRuns*len(tc.seq) {
				t.Errorf("the fast path served %v of %d requests", n, fastRuns*len(tc.seq))
			}
		})
	}
}
