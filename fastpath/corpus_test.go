package fastpath

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/apigate/gateway/internal/testkit/caddytester"
	"github.com/apigate/gateway/internal/testkit/difftest"
)

// corpusRequests are the requests TestCorpus sends to each config of
// testdata/corpus, as its users' clients would.
func corpusRequests(token, noRole string) map[string][]difftest.Request {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	body := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	get := func(path string, hdr http.Header) difftest.Request {
		return difftest.Request{Method: "GET", Path: path, Header: hdr}
	}
	post := func(path, b string, hdr http.Header) difftest.Request {
		return difftest.Request{Method: "POST", Path: path, Header: hdr, Body: body(b), Length: int64(len(b))}
	}
	api := h("Host", "api.example.com")
	bearer := func(tok string) http.Header { return h("Authorization", "Bearer "+tok) }
	return map[string][]difftest.Request{
		"access-log": {get("/v1/orders?limit=10", api), post("/v1/orders", `{"item":1}`, h("Host", "api.example.com", "Content-Type", "application/json")),
			get("/healthz", api), get("/nothing", api), {Method: "HEAD", Path: "/v1/orders", Header: api}},
		"trusted-proxies": {get("/partners/x", h("X-Forwarded-For", "203.0.113.5")), get("/partners/x", h("X-Forwarded-For", "198.51.100.5")),
			get("/partners/x", nil), get("/api", h("X-Forwarded-For", "203.0.113.5, 10.1.1.1")), get("/api", h("X-Forwarded-For", "bogus"))},
		"ip-allowlist": {get("/admin/x", nil), get("/internal/y", nil), get("/other", nil)},
		"spa-api": {get("/", nil), get("/app.js", h("Accept-Encoding", "gzip")), get("/deep/link/route", nil), get("/style.css", h("Accept-Encoding", "zstd")),
			get("/api/items", h("Accept-Encoding", "gzip")), {Method: "HEAD", Path: "/index.html"}, get("/index.html", h("If-None-Match", "nope"))},
		"forward-auth": {get("/legacy/a", bearer("good")), get("/legacy/a", bearer("bad")), get("/legacy/a", h("X-User", "forged", "Authorization", "Bearer good")), get("/other", nil)},
		"basic-auth": {get("/admin/x", nil), {Method: "GET", Path: "/admin/x", Header: h("Authorization", "Basic YWRtaW46c2VjcmV0")},
			{Method: "GET", Path: "/admin/x", Header: h("Authorization", "Basic YWRtaW46d3Jvbmc=")}, get("/public", nil)},
		"error-pages":      {get("/app/ok", nil), get("/down/x", nil), get("/missing", nil)},
		"security-headers": {get("/", nil), get("/api/x", h("Accept-Encoding", "gzip")), post("/api/y", strings.Repeat("z", 3000), h("Accept-Encoding", "zstd"))},
		"body-limits": {post("/upload/small", "tiny", nil), post("/upload/big", strings.Repeat("b", 2000), nil),
			{Method: "POST", Path: "/upload/chunked", Body: body(strings.Repeat("c", 3000)), Length: -1}, post("/other", strings.Repeat("o", 2000), nil)},
		"redirects": {get("/a?b=1", h("Host", "www.example.com")), get("/old/page", h("Host", "example.com")), get("/docs", h("Host", "example.com")),
			get("/new/page", h("Host", "example.com")), get("/", h("Host", "example.com"))},
		"cors": {{Method: "OPTIONS", Path: "/api/x", Header: h("Origin", "https://app.example", "Access-Control-Request-Method", "POST")},
			get("/api/x", h("Origin", "https://app.example")), {Method: "OPTIONS", Path: "/api/x"}},
		"sticky-health": {get("/a", nil), get("/b", h("Cookie", "sticky=wrong")), get("/c", nil)},
		"tracing":       {get("/t", nil), get("/t", h("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))},
		"duties-log": {get("/api/x", bearer(token)), get("/api/x", bearer(noRole)), get("/api/x", nil), get("/api/forbidden", bearer(token)),
			get("/api/x", bearer("garbage")), get("/health", nil)},
		"host-split": {get("/v1/x", api), get("/other", api), get("/", h("Host", "www.example.com")), get("/app.js", h("Host", "www.example.com")),
			get("/", h("Host", "admin.example.com", "Authorization", "Basic YWRtaW46c2VjcmV0")), get("/", h("Host", "admin.example.com"))},
		"templates-map": {get("/status", nil), get("/v1/orders", nil), get("/v2/orders/7", nil), get("/v3/x", nil), get("/", nil)},
	}
}

// TestCorpus runs every config of testdata/corpus on both paths: the same
// answers, the same access log records, and the share of requests the
// plan serves (goal: 95% of the corpus).
func TestCorpus(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	up, up2 := newEchoUpstream(t), newEchoUpstream(t)
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" {
			w.Header().Set("X-User", "alice")
			w.WriteHeader(200)
			return
		}
		http.Error(w, "unauthorized", 401)
	}))
	t.Cleanup(auth.Close)
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Cache-Control", "max-age=60")
		if strings.Contains(string(b), "forbidden") {
			w.WriteHeader(403)
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(perm.Close)
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "corpus-secret-corpus-secret-corpus-secret"
	mint := func(roles ...string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "u1", "roles": roles, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	requests := corpusRequests(mint("reader"), mint("other"))

	files, _ := filepath.Glob("testdata/corpus/*.caddyfile")
	if len(files) < 15 {
		t.Fatalf("%d corpus configs, want at least 15", len(files))
	}
	var sent, served float64
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".caddyfile")
		seq := requests[name]
		if len(seq) == 0 {
			t.Fatalf("no requests for %s", name)
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			www := filepath.Join(dir, "www")
			os.Mkdir(www, 0o755)
			os.WriteFile(filepath.Join(www, "index.html"), []byte("<!doctype html><h1>the app</h1>\n"), 0o644)
			os.WriteFile(filepath.Join(www, "app.js"), []byte(strings.Repeat("console.log('app');\n", 200)), 0o644)
			os.WriteFile(filepath.Join(www, "style.css"), []byte(strings.Repeat("body { margin: 0 }\n", 200)), 0o644)
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cfg := strings.NewReplacer("{UP}", up.Addr(), "{UP2}", up2.Addr(), "{AUTH}", auth.URL, "{PERM}", perm.URL,
				"{DIR}", dir, "{HASH}", string(hash), "{SECRET}", secret).Replace(string(src))
			caddytester.Load(t, adminPort, corpusConfig(t, cfg))
			requireFast(t, "fast")
			before := servedCount(t, "fast")
			compareSeqNorm(t, seq, corpusNorm[name])
			n := (servedCount(t, "fast") - before) / float64(fastRuns)
			sent += float64(len(seq))
			served += n
			if int(n) != len(seq) {
				t.Errorf("the plan served %v of %d requests", n, len(seq))
			}
			if logFile := filepath.Join(dir, "access.log"); fileExists(logFile) {
				compareAccessLog(t, logFile, func(r *logRecord) { normLog(r, corpusNorm[name]) })
			}
		})
	}
	t.Logf("corpus: %d configs, the plan served %.0f of %.0f requests (%.1f%%)", len(files), served, sent, 100*served/sent)
	if served < 0.95*sent {
		t.Errorf("the plan served %.1f%% of the corpus's requests, want at least 95%%", 100*served/sent)
	}
}

// corpusNorm replaces what differs between two runs by nature (trace and
// span IDs) in what a config's clients, upstreams and logs see.
var corpusNorm = map[string]*regexp.Regexp{
	"tracing": regexp.MustCompile(`[0-9a-f]{32}|[0-9a-f]{16}`),
}

func fileExists(f string) bool { _, err := os.Stat(f); return err == nil }

// compareSeqNorm is compareSeq with what re matches blanked out (re may be
// nil), and redirects not followed.
func compareSeqNorm(t *testing.T, seq []difftest.Request, re *regexp.Regexp) {
	t.Helper()
	if re == nil {
		re = regexp.MustCompile(`^\b$`) // (matches nothing)
	}
	got := make([][]difftest.ClientResult, len(diffRuns))
	for i, run := range diffRuns {
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 20 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		run.do(func() {
			for _, rq := range seq {
				r := difftest.Do(client, run.port, rq)
				normPorts(&r)
				r.Body = re.ReplaceAllString(r.Body, "X")
				for _, vv := range r.Header {
					for j := range vv {
						vv[j] = re.ReplaceAllString(vv[j], "X")
					}
				}
				got[i] = append(got[i], r)
			}
		})
		client.CloseIdleConnections()
	}
	for j := range seq {
		for i := 1; i < len(diffRuns); i++ {
			if !reflect.DeepEqual(got[0][j], got[i][j]) {
				t.Errorf("request %d (%s %s) differs\n%s: %v\n%s: %v", j, seq[j].Method, seq[j].Path,
					diffRuns[0].name, got[0][j], diffRuns[i].name, got[i][j])
			}
		}
	}
}

func normLog(r *logRecord, re *regexp.Regexp) {
	if re == nil {
		return
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return re.ReplaceAllString(v, "X")
		case map[string]any:
			for k, x := range v {
				v[k] = walk(x)
			}
		case []any:
			for i, x := range v {
				v[i] = walk(x)
			}
		}
		return v
	}
	walk(r.Values)
}

// corpusConfig turns a corpus Caddyfile into the twin config: its global
// options with the test's (admin, ports), its `servers` options on both
// servers ("plain" on Caddy's path and "fast" with apigate), and each
// site address `http://host` served on both servers' ports.
func corpusConfig(t *testing.T, src string) string {
	t.Helper()
	lines := strings.Split(src, "\n")
	var globals, serverOpts, sites []string
	i := 0
	for i < len(lines) && (strings.HasPrefix(lines[i], "#") || strings.TrimSpace(lines[i]) == "") {
		i++
	}
	if i < len(lines) && lines[i] == "{" {
		i++
		for ; i < len(lines) && lines[i] != "}"; i++ {
			if lines[i] == "\tservers {" {
				for i++; i < len(lines) && lines[i] != "\t}"; i++ {
					serverOpts = append(serverOpts, lines[i])
				}
				continue
			}
			globals = append(globals, lines[i])
		}
		i++
	}
	for ; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "http://") && strings.HasSuffix(l, "{") {
			var addrs []string
			for _, a := range strings.Split(strings.TrimSpace(strings.TrimSuffix(l, "{")), ",") {
				a = strings.TrimSpace(a)
				addrs = append(addrs, fmt.Sprintf("%s:%d", a, plainPort), fmt.Sprintf("%s:%d", a, fastPort))
			}
			l = strings.Join(addrs, ", ") + " {"
		}
		sites = append(sites, l)
	}
	opts := strings.Join(serverOpts, "\n")
	cfg := fmt.Sprintf(`{
	admin localhost:%d
	http_port 20400
	https_port 20401
	grace_period 1ms
	servers :%d {
		name plain
%s
	}
	servers :%d {
		name fast
		listener_wrappers {
			apigate
		}
%s
	}
%s
}
%s
`, adminPort, plainPort, opts, fastPort, opts, strings.Join(globals, "\n"), strings.Join(sites, "\n"))
	return cfg
}
