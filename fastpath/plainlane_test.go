package fastpath

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/difftest"
)

// headUpstream answers every request with the field lines of its head,
// in the order they came, as the body: what a proxy sent, byte for byte.
func headUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					if _, err := br.ReadString('\n'); err != nil { // the request line
						return
					}
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if line == "\r\n" {
							break
						}
						head.WriteString(line)
					}
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", head.Len(), head.String()); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFieldsInClientOrder: a request whose fields reverse_proxy sends as
// they came (no hop-by-hop field, Via, X-Forwarded-* or Pragma) goes
// upstream with them in the client's order, then the fields the proxy
// adds: the plain lane writes them from the parsed head, with no header
// map between (a map's order is random: with a copy through one, twelve
// fields keep their order once in 12! tries). A request with a field the
// proxy changes still gets the map's treatment.
func TestFieldsInClientOrder(t *testing.T) {
	up := headUpstream(t)
	loadTwin(t, "", fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up))
	names := []string{"X-M", "Accept", "X-B", "Cookie", "X-Z", "User-Agent", "X-A", "Authorization", "X-Q", "Accept-Language", "X-C", "X-Y"}
	var raw, want strings.Builder
	raw.WriteString("GET /a HTTP/1.1\r\n" + h)
	want.WriteString(h) // (the transport's own, first)
	for i, n := range names {
		fmt.Fprintf(&raw, "%s: v%d\r\n", n, i)
		fmt.Fprintf(&want, "%s: v%d\r\n", n, i)
	}
	raw.WriteString("\r\n")
	want.WriteString("X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: example.com\r\nVia: 1.1 Caddy\r\n")
	for round := range 3 {
		res := rawExchange(t, fastPort, raw.String())
		if len(res.Responses) != 1 || res.Responses[0].Status != 200 {
			t.Fatalf("round %d: %v", round, res)
		}
		if got := res.Responses[0].Body; got != want.String() {
			t.Fatalf("round %d: the upstream got\n%s\nwant\n%s", round, got, want.String())
		}
	}

	// a hop-by-hop field: the fields go as reverse_proxy's copy sends them
	res := rawExchange(t, fastPort, "GET /a HTTP/1.1\r\n"+h+"Connection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n")
	if len(res.Responses) != 1 {
		t.Fatalf("%v", res)
	}
	got := res.Responses[0].Body
	if strings.Contains(got, "X-Hop") || strings.Contains(got, "Connection") || !strings.Contains(got, "X-Kept: 2\r\n") || !strings.Contains(got, "Via: 1.1 Caddy\r\n") {
		t.Fatalf("the upstream got\n%s", got)
	}
}

// TestHandlerFieldsWithUpstreams: fields a handler put in the response
// header before the proxy (here Caddy's header directive, as quota's
// RateLimit fields) come out with the upstream's as reverse_proxy's copy
// gives them (the handler's values first, then the upstream's; the
// upstream's hop-by-hop fields gone, with or without a Connection field
// (/b), and those a Connection field names beside keep-alive (/c); Via
// first among the upstream's), on Caddy's path and the fast
// path alike: the fast path takes the upstream's map and adds the
// handler's fields to it (takeHeader).
func TestHandlerFieldsWithUpstreams(t *testing.T) {
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if req.URL.Path == "/c" {
			return difftest.Reply(c, "HTTP/1.1 200 OK\r\nX-Both: up\r\nVia: 1.1 up\r\nX-Up: 1\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive, X-Gone\r\nX-Gone: 1\r\nContent-Length: 2\r\n\r\nok")
		}
		if req.URL.Path == "/b" {
			return difftest.Reply(c, "HTTP/1.1 200 OK\r\nX-Both: up\r\nVia: 1.1 up\r\nX-Up: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok")
		}
		return difftest.Reply(c, "HTTP/1.1 200 OK\r\nX-Both: up\r\nVia: 1.1 up\r\nX-Up: 1\r\nKeep-Alive: timeout=5\r\nConnection: X-Gone\r\nX-Gone: 1\r\nContent-Length: 2\r\n\r\nok")
	})
	loadTwin(t, "", fmt.Sprintf(`	header X-Both handler
	header +X-Handler h1
	header +X-Handler h2
	header Via "1.0 handler"
	header X-Q {query.v}
	reverse_proxy %s {
		transport h1
	}`, up.Addr()))
	for round := range 6 { // (/a, /b, /c, then each on a connection whose maps were swapped once)
		// (a handler's value with CR LF: written with spaces for them,
		// not as a field line of its own)
		raw := "GET /" + string(rune('a'+round%3)) + "?v=q%0D%0AX-Injected:%201 HTTP/1.1\r\n" + h + "\r\n"
		plain := rawExchange(t, plainPort, raw+raw)
		var fast rawResult
		for _, run := range diffRuns[1:] {
			run.do(func() { fast = rawExchange(t, run.port, raw+raw) })
			if !reflect.DeepEqual(plain, fast) {
				t.Fatalf("round %d: results differ\nCaddy's path:%v\n%s:%v", round, plain, run.name, fast)
			}
		}
		for _, want := range []string{`X-Both=["handler" "up"]`, `X-Handler=["h1" "h2"]`, `Via=["1.0 handler" "1.1 Caddy" "1.1 up"]`, `X-Up=["1"]`} {
			if len(fast.Responses) != 2 || !strings.Contains(fast.Responses[1].Header, want) {
				t.Fatalf("round %d: no %s in%v", round, want, fast)
			}
		}
		if h := fast.Responses[1].Header; !strings.Contains(h, `X-Q=["q  X-Injected: 1"]`) || strings.Contains(h, "X-Injected=") {
			t.Fatalf("round %d: the handler's X-Q field was not written as net/http writes it:%v", round, fast)
		}
		if h := fast.Responses[1].Header; strings.Contains(h, "Keep-Alive") || strings.Contains(h, "X-Gone") {
			t.Fatalf("round %d: a hop-by-hop field went to the client:%v", round, fast)
		}
	}
}

// TestHeaderReaders: what reads the request's header fields through
// Caddy's maps (the header matcher and directive, request_header,
// forward_auth's copy_headers, {http.request.header.*} placeholders and a
// CEL expression) sees the same values on Caddy's path, on the fast path
// and on the fast path in the map mode (diffRuns), for field names in any
// case, repeated fields and values with spaces around them.
func TestHeaderReaders(t *testing.T) {
	auth := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		role := req.Header.Get("X-Role")
		if role == "" {
			return difftest.Reply(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 7\r\n\r\nno role")
		}
		return difftest.Reply(c, "HTTP/1.1 200 OK\r\nX-User: user-of-"+role+"\r\nContent-Length: 0\r\n\r\n")
	})
	up := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		var b strings.Builder
		keys := make([]string, 0, len(req.Header))
		for k := range req.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%q\n", k, req.Header[k])
		}
		return difftest.Reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", b.Len(), b.String()))
	})
	loadTwin(t, "", fmt.Sprintf(`	@admin header X-Role admin
	@cel expression `+"`"+`{http.request.header.X-Role} == "admin" && {http.request.header.X-Tier} != ""`+"`"+`
	route {
		forward_auth %s {
			uri /auth
			copy_headers X-User
		}
		request_header X-Added "role={http.request.header.X-Role}"
		request_header -X-Drop
		header X-Seen "{http.request.header.X-Role}|{http.request.header.X-User}|{http.request.header.X-Added}"
		header @admin X-Matched header
		header @cel X-Cel yes
		reverse_proxy %s {
			transport h1
		}
	}`, auth.Addr(), up.Addr()))
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = append(h[kv[i]], kv[i+1]) // (as given: not canonical)
		}
		return h
	}
	seq := []difftest.Request{
		{Method: "GET", Path: "/a", Header: hdr("X-Role", "admin", "X-Tier", "gold", "X-Drop", "1", "X-Keep", "k")},
		{Method: "GET", Path: "/b", Header: hdr("x-role", "admin", "x-tier", "gold", "x-drop", "1")},
		{Method: "GET", Path: "/c", Header: hdr("X-Role", "admin", "X-Role", "user", "X-Tier", "")},
		{Method: "GET", Path: "/d", Header: hdr("X-Role", "user", "X-User", "forged")},
		{Method: "GET", Path: "/e", Header: hdr("X-Tier", "gold", "X-User", "forged")},
		{Method: "GET", Path: "/f", Header: hdr("X-Role", " \tadmin ", "X-Tier", "x")},
	}
	compareSeq(t, seq)
	// and what the readers saw is what this test means them to see
	client := &http.Client{Timeout: 10 * time.Second}
	first := difftest.Do(client, fastPort, seq[0])
	if first.Status != 200 || first.Header.Get("X-Matched") != "header" || first.Header.Get("X-Cel") != "yes" ||
		first.Header.Get("X-Seen") != "admin|user-of-admin|role=admin" ||
		!strings.Contains(first.Body, `X-Added=["role=admin"]`) || strings.Contains(first.Body, "X-Drop") ||
		!strings.Contains(first.Body, `X-User=["user-of-admin"]`) {
		t.Fatalf("the fast path's readers saw other values than meant: %v", first)
	}
}

// TestHeaderOnDemand: on a route that runs nothing but the plan's own
// steps, the request's header map is filled only when something asks for
// it (exchange.header), and each reader that runs before any handler
// module sees the client's fields, as on Caddy's path and in the map mode:
// a matcher that reads the map itself (header) and one that reads it
// through a placeholder (vars), a selection policy that reads a field
// (header; and cookie: the upstream its cookie names), a header_down value
// with a request field's placeholder, the error routes, and the upstream
// transport's replay rule (a bodyless POST with an Idempotency-Key is sent
// again when a pooled connection drops it; one without is not). A bare
// route serves its requests without the map, and so does a request that
// a route's path matcher refuses before its header or vars matcher would
// run (fieldSets).
func TestHeaderOnDemand(t *testing.T) {
	echo := func(name string) *difftest.Upstream {
		return difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
			b := name + " " + req.Header.Get("X-Role") + " " + req.Header.Get("X-Keep")
			return difftest.Reply(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b))
		})
	}
	up1, up2 := echo("up1"), echo("up2")
	// drops every request but the first on a connection without an answer
	flaky := difftest.NewUpstream(t, func(c net.Conn, req *http.Request, body []byte, n int) bool {
		if n > 0 {
			return false
		}
		return difftest.Reply(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	loadTwinOpts(t, twinOpts{serverOpts: "\t\tprotocols h1 h2c"}, fmt.Sprintf(`	route {
		@role {
			path /match/*
			header X-Role admin
		}
		handle @role {
			reverse_proxy %[1]s {
				transport h1
			}
		}
		handle /match/* {
			respond "not admin" 403
		}
		@vars {
			path /vars/*
			vars {http.request.header.X-Role} admin
		}
		handle @vars {
			reverse_proxy %[1]s {
				transport h1
			}
		}
		handle /vars/* {
			respond "vars: not admin" 403
		}
		handle /policy/* {
			reverse_proxy %[1]s %[2]s {
				lb_policy header X-Pick {
					fallback first
				}
				transport h1
			}
		}
		handle /cookie/* {
			reverse_proxy %[1]s %[2]s {
				lb_policy cookie lb
				transport h1
			}
		}
		handle /ph/* {
			reverse_proxy %[1]s {
				header_down X-Role-Seen "{http.request.header.X-Role}"
				transport h1
			}
		}
		handle /err/* {
			reverse_proxy 127.0.0.1:9 {
				transport h1
			}
		}
		handle /idem/* {
			reverse_proxy %[3]s {
				transport h1
			}
		}
		handle {
			reverse_proxy %[1]s {
				transport h1
			}
		}
	}
	handle_errors {
		respond "{http.request.header.X-Role} {err.status_code}"
	}`, up1.Addr(), up2.Addr(), flaky.Addr()))
	role := func(r, keep string) http.Header { return http.Header{"X-Role": {r}, "X-Keep": {keep}} }
	seq := []difftest.Request{
		{Method: "GET", Path: "/bare", Header: role("admin", "k")},
		{Method: "GET", Path: "/match/a", Header: role("admin", "k")},
		{Method: "GET", Path: "/match/b", Header: role("user", "k")},
		{Method: "GET", Path: "/vars/a", Header: role("admin", "k")},
		{Method: "GET", Path: "/vars/b", Header: role("user", "k")},
		{Method: "GET", Path: "/ph/a", Header: role("admin", "k")},
		{Method: "GET", Path: "/err/a", Header: role("admin", "k")},
		{Method: "POST", Path: "/idem/first"},
		{Method: "POST", Path: "/idem/keyed", Header: http.Header{"Idempotency-Key": {"k1"}}},
		{Method: "POST", Path: "/idem/unkeyed"},
	}
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		seq = append(seq, difftest.Request{Method: "GET", Path: "/policy/" + p, Header: http.Header{"X-Pick": {p}}})
	}
	lanes := lanesCounted(t)
	for _, proto := range []struct {
		name   string
		client func() *http.Client
	}{{"HTTP/1.1", nil}, {"h2c", h2cClient}} {
		t.Run(proto.name, func(t *testing.T) {
			_, _, lazy0 := lanes()
			compareSeqWith(t, seq, proto.client)
			// what the readers saw is what this test means them to see
			client := &http.Client{Timeout: 10 * time.Second}
			if proto.client != nil {
				client = proto.client()
			}
			want := map[string]struct {
				status int
				body   string
			}{
				"/bare": {200, "up1 admin k"}, "/match/a": {200, "up1 admin k"}, "/match/b": {403, "not admin"},
				"/vars/a": {200, "up1 admin k"}, "/vars/b": {403, "vars: not admin"}, "/err/a": {502, "admin 502"},
				"/idem/first": {200, "ok"}, "/idem/keyed": {200, "ok"}, "/idem/unkeyed": {502, " 502"},
			}
			ups := map[string]bool{}
			for _, rq := range seq {
				got := difftest.Do(client, fastPort, rq)
				if w, ok := want[rq.Path]; ok && (got.Status != w.status || got.Body != w.body) {
					t.Errorf("%s %s: %d %q, want %d %q", rq.Method, rq.Path, got.Status, got.Body, w.status, w.body)
				}
				if rq.Path == "/ph/a" && got.Header.Get("X-Role-Seen") != "admin" {
					t.Errorf("/ph/a: header_down saw X-Role %q", got.Header.Get("X-Role-Seen"))
				}
				if strings.HasPrefix(rq.Path, "/policy/") {
					ups[strings.Fields(got.Body)[0]] = true
				}
			}
			if !ups["up1"] || !ups["up2"] {
				t.Errorf("lb_policy header chose %v for eight X-Pick values, not both upstreams", ups)
			}
			// lb_policy cookie (random, not compared with Caddy's path):
			// the cookie its first answer sets keeps the upstream
			first := difftest.Do(client, fastPort, difftest.Request{Method: "GET", Path: "/cookie/0"})
			cookie := strings.SplitN(first.Header.Get("Set-Cookie"), ";", 2)[0]
			if first.Status != 200 || !strings.HasPrefix(cookie, "lb=") {
				t.Fatalf("lb_policy cookie: %d, Set-Cookie %q", first.Status, first.Header.Get("Set-Cookie"))
			}
			for i := 1; i <= 8; i++ {
				got := difftest.Do(client, fastPort, difftest.Request{Method: "GET", Path: fmt.Sprintf("/cookie/%d", i), Header: http.Header{"Cookie": {cookie}}})
				if strings.Fields(got.Body)[0] != strings.Fields(first.Body)[0] {
					t.Fatalf("lb_policy cookie: request %d with %s went to %q, the first to %q", i, cookie, got.Body, first.Body)
				}
			}
			// /bare, /idem/first and /idem/keyed are served without the
			// map (an error fills it for the error routes), in the
			// comparison's fast run and in the one above
			if _, _, lazy := lanes(); lazy-lazy0 != 2*3 {
				t.Errorf("%d requests were served without the header map, want 6 (/bare, /idem/first and /idem/keyed, twice)", lazy-lazy0)
			}
		})
	}
}

// TestFieldsOverH2: an HTTP/2 request whose fields reverse_proxy sends
// unchanged takes the plain lane too (its head's fields written upstream,
// no copy through a map), and the upstream gets the fields Caddy's path
// sends: the same lines (in another order: Caddy's copy goes through a
// map), cookies joined with "; ", and Via "2.0 Caddy"; a request with a
// field reverse_proxy reworks (Via, X-Forwarded-*, Te, Pragma, a
// hop-by-hop one) takes the map's copy, as on HTTP/1.1.
func TestFieldsOverH2(t *testing.T) {
	up := headUpstream(t)
	loadTwinOpts(t, twinOpts{serverOpts: "\t\tprotocols h1 h2c"}, fmt.Sprintf(`	reverse_proxy %s {
		transport h1
	}`, up))
	lanes := lanesCounted(t)
	for i, hdr := range []http.Header{
		{"Accept": {"a/b"}, "X-M": {"1"}, "Authorization": {"Bearer x"}, "X-Two": {"a", "b"},
			"Cookie": {"a=1", "b=2"}, "User-Agent": {"h2-test"}, "X_dotted": {"dropped"}},
		// fields reverse_proxy reworks: the map's copy, on the fast path too
		{"Via": {"1.1 client"}, "X-Forwarded-For": {"1.2.3.4"}, "X-Forwarded-Host": {"h"}, "Te": {"trailers"},
			"Pragma": {"no-cache"}, "Proxy-Authorization": {"Basic x"}, "X-Kept": {"k"}},
	} {
		got := map[string]string{}
		for _, run := range diffRuns {
			run.do(func() {
				r, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/a", run.port), nil)
				r.Host, r.Header = "example.com", hdr.Clone()
				res, err := h2cClient().Do(r)
				if err != nil {
					t.Fatalf("%s: %v", run.name, err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.ProtoMajor != 2 || res.StatusCode != 200 {
					t.Fatalf("%s: %s %d", run.name, res.Proto, res.StatusCode)
				}
				lines := strings.Split(strings.TrimSuffix(string(body), "\r\n"), "\r\n")
				sort.Strings(lines)
				got[run.name] = strings.Join(lines, "\n")
			})
		}
		for _, run := range diffRuns[1:] {
			if got[run.name] != got[diffRuns[0].name] {
				t.Errorf("request %d: the upstream got\n%s\nfrom %s, and\n%s\nfrom Caddy's path", i, got[run.name], run.name, got[diffRuns[0].name])
			}
		}
		if i == 0 && !strings.Contains(got["fast path"], "Via: 2.0 Caddy") {
			t.Errorf("no Via 2.0 Caddy:\n%s", got["fast path"])
		}
	}
	if plain, _, _ := lanes(); plain == 0 {
		t.Fatalf("the HTTP/2 request did not take the plain lane")
	}
}
