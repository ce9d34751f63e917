package caddyquota_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/golang-jwt/jwt/v5"

	_ "github.com/apigate/gateway/caddyapikey"
	"github.com/apigate/gateway/caddyapikey/apikeys"
	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/caddyquota/quotausage"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

const jwtSecret = "caddyquota-e2e-secret-0123456789abcdef0123456789"

// ports are this package's test ports, free when the test binary starts
// (both paths of a pathtest run use the same).
var ports = freeport.Ports(nopTB{}, 6)

type nopTB struct{ testing.TB }

func (nopTB) Helper()                      {}
func (nopTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (nopTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

func token(t *testing.T, sub string, claims map[string]any) string {
	t.Helper()
	c := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		c[k] = v
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newKey(t *testing.T, id, sub, plan string) (string, string) {
	t.Helper()
	k, h, err := apikeys.New(id)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(apikeys.Entry{ID: id, Hash: h, Sub: sub, Plan: plan})
	return k, string(line)
}

// stable replaces what differs from run to run in a RateLimit field (the
// seconds to the reset).
var secondsRe = regexp.MustCompile(`;t=\d+`)

// slidingResetRe is a sliding window's reset in a refusal's body: a time
// that moves with each request (the paths' requests are a second apart
// at times), unlike a calendar window's.
var slidingResetRe = regexp.MustCompile(`("window":"\d+[smh]","reset":)"[^"]*"`)

// TestQuotaPlans runs the quota duty on both request paths: API keys on
// two plans (from the keys file), a token whose plan claim wins over
// the default, a route with a plan of its own, dry run, handle_errors
// restyling the refusal, a request without a consumer; every answer's
// status, RateLimit fields and body, the audit events and the usage the
// admin API reports are compared between the paths.
func TestQuotaPlans(t *testing.T) {
	pathtest.Run(t, testQuotaPlans)
}

func testQuotaPlans(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	dir := t.TempDir()
	adminPort, plainPort, styledPort := ports[0], ports[1], ports[2]
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	freeKey, freeLine := newKey(t, "free-1", "alice", "")
	proKey, proLine := newKey(t, "pro-1", "bob", "pro")
	keysFile := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keysFile, []byte("["+freeLine+",\n"+proLine+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	logFile := filepath.Join(dir, "caddy.log")
	site := func(port int, errors string) string {
		return fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	route /api/* {
		audit
		api_key {
			keys_file %[2]s
			optional
		}
		jwt_auth {
			hmac_secret %[3]s
			optional
		}
		quota
		reverse_proxy %[4]s
	}
	route /export/* {
		audit
		api_key {
			keys_file %[2]s
		}
		quota {
			plan bulk
		}
		respond "exported"
	}
	route /login/* {
		audit
		quota {
			key {http.request.header.X-Client}
			plan login 2/10s
		}
		respond "login"
	}
	route /trial/* {
		audit
		api_key {
			keys_file %[2]s
		}
		quota {
			key trial-{http.auth.user.id}
			dry_run
		}
		respond "trial"
	}
	route /tenant/* {
		api_key {
			keys_file %[2]s
		}
		quota {
			key {http.auth.jwt.claims.tenant}
		}
		respond "tenant"
	}
%[5]s
}
`, port, keysFile, jwtSecret, strings.TrimPrefix(up.URL, "http://"), errors)
	}
	config := fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ms
	log {
		output file %s
		format json
	}
	audit {
		sink file %s {
			flush_interval 10ms
		}
	}
	quota {
		plan free {
			limit 3/day
		}
		plan pro {
			limit 5/day 100/month
		}
		plan bulk 1/day
		default free
		plan_claim plan
		timezone Europe/Berlin
		dir %s
	}
}
`, adminPort, ports[3], ports[4], logFile, auditFile, filepath.Join(dir, "quota")) + site(plainPort, "") + site(styledPort, `
	handle_errors {
		header Content-Type text/plain
		respond "styled {http.error.status_code}: {http.error.message} ({http.quota.plan} {http.quota.window})"
	}`)
	tester := p.Load(t, adminPort, config, "srv0", "srv1")
	_ = tester
	client := &http.Client{Timeout: 10 * time.Second}
	type result struct {
		status int
		body   string
		header http.Header
	}
	do := func(t *testing.T, port int, path string, set func(*http.Request)) result {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		if set != nil {
			set(req)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header.Clone()
		h.Del("Content-Length")
		rec.AddNext(p, p.Key(t)+" "+path, pathtest.Resp(resp.StatusCode, h, slidingResetRe.ReplaceAllString(string(b), `$1"<time>"`)))
		return result{resp.StatusCode, string(b), resp.Header}
	}
	withKey := func(k string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("X-API-Key", k) } }
	withToken := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}

	t.Run("free key: three a day, then 429", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			r := do(t, plainPort, "/api/x", withKey(freeKey))
			if r.status != 200 || r.body != "upstream" {
				t.Fatalf("request %d: %d %q", i, r.status, r.body)
			}
			if got := r.header.Get("RateLimit-Policy"); !regexp.MustCompile(`^"free-day";q=3;w=8[2-9]\d\d\d$`).MatchString(got) {
				t.Errorf("RateLimit-Policy %q", got)
			}
			if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"free-day";r=%d;t=`, 3-i); !strings.HasPrefix(got, want) {
				t.Errorf("RateLimit %q, want %s...", got, want)
			}
		}
		r := do(t, plainPort, "/api/x", withKey(freeKey))
		if r.status != 429 {
			t.Fatalf("4th request: %d %q", r.status, r.body)
		}
		var body caddyquota.QuotaExceeded
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || body.Error != "quota_exceeded" || body.Plan != "free" || body.Window != "day" {
			t.Fatalf("body %q (%v)", r.body, err)
		}
		reset, err := time.Parse(time.RFC3339, body.Reset)
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if err != nil || reset.In(berlin).Hour() != 0 || reset.Before(time.Now()) || reset.Sub(time.Now()) > 25*time.Hour {
			t.Errorf("reset %q: want the next midnight in Berlin", body.Reset)
		}
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if want := int(time.Until(reset).Seconds()); ra < want-5 || ra > want+5 {
			t.Errorf("Retry-After %d, want about %d", ra, want)
		}
		if !strings.HasPrefix(r.header.Get("RateLimit"), `"free-day";r=0;t=`) {
			t.Errorf("RateLimit on the refusal %q", r.header.Get("RateLimit"))
		}
		if r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.body, `"type":"urn:apigate:problem:quota_exceeded"`) ||
			!strings.Contains(r.body, `"instance":"/api/x"`) {
			t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
		}
	})
	t.Run("pro key: its own plan from the keys file", func(t *testing.T) {
		for i := 1; i <= 5; i++ {
			if r := do(t, plainPort, "/api/x", withKey(proKey)); r.status != 200 {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		r := do(t, plainPort, "/api/x", withKey(proKey))
		if r.status != 429 || !strings.Contains(r.body, `"plan":"pro"`) {
			t.Fatalf("6th: %d %s", r.status, r.body)
		}
		if got := r.header.Get("RateLimit-Policy"); !strings.Contains(got, `"pro-day";q=5;w=`) || !strings.Contains(got, `"pro-month";q=100;w=`) {
			t.Errorf("RateLimit-Policy %q", got)
		}
	})
	t.Run("the plan claim wins over the default", func(t *testing.T) {
		tok := token(t, "carol", map[string]any{"plan": "pro"})
		for i := 1; i <= 5; i++ {
			if r := do(t, plainPort, "/api/x", withToken(tok)); r.status != 200 {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		if r := do(t, plainPort, "/api/x", withToken(tok)); r.status != 429 {
			t.Fatalf("6th: %d", r.status)
		}
		// a claim naming no plan: the default
		odd := token(t, "dave", map[string]any{"plan": "platinum"})
		if r := do(t, plainPort, "/api/x", withToken(odd)); r.status != 200 || !strings.HasPrefix(r.header.Get("RateLimit"), `"free-day";r=2`) {
			t.Fatalf("unknown plan: %d %q", r.status, r.header.Get("RateLimit"))
		}
	})
	t.Run("a route's own plan counts apart", func(t *testing.T) {
		if r := do(t, plainPort, "/export/a", withKey(proKey)); r.status != 200 {
			t.Fatalf("first export: %d", r.status)
		}
		if r := do(t, plainPort, "/export/a", withKey(proKey)); r.status != 429 || !strings.Contains(r.body, `"plan":"bulk"`) {
			t.Fatalf("second export: %d %s", r.status, r.body)
		}
	})
	t.Run("a route's own rate limit: a plan of its own, a sliding window of seconds", func(t *testing.T) {
		client := func(r *http.Request) { r.Header.Set("X-Client", "c1") }
		for i := 1; i <= 2; i++ {
			r := do(t, plainPort, "/login/a", client)
			if r.status != 200 || r.header.Get("RateLimit-Policy") != `"login-10s";q=2;w=10` {
				t.Fatalf("request %d: %d %q", i, r.status, r.header.Get("RateLimit-Policy"))
			}
		}
		r := do(t, plainPort, "/login/a", client)
		var body caddyquota.QuotaExceeded
		if r.status != 429 || json.Unmarshal([]byte(r.body), &body) != nil || body.Plan != "login" || body.Window != "10s" {
			t.Fatalf("3rd: %d %s", r.status, r.body)
		}
		if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 1 || ra > 11 {
			t.Errorf("Retry-After %q, want at most the window", r.header.Get("Retry-After"))
		}
		// another client has its own count
		if r := do(t, plainPort, "/login/a", func(r *http.Request) { r.Header.Set("X-Client", "c2") }); r.status != 200 {
			t.Fatalf("another client: %d", r.status)
		}
	})
	t.Run("dry run counts and lets through", func(t *testing.T) {
		for i := 1; i <= 4; i++ {
			r := do(t, plainPort, "/trial/a", withKey(freeKey))
			if r.status != 200 || r.body != "trial" {
				t.Fatalf("request %d: %d", i, r.status)
			}
			if want := fmt.Sprintf(`"free-day";r=%d;`, max(3-i, 0)); !strings.HasPrefix(r.header.Get("RateLimit"), want) {
				t.Errorf("request %d: RateLimit %q, want %s", i, r.header.Get("RateLimit"), want)
			}
		}
	})
	t.Run("handle_errors restyles the refusal", func(t *testing.T) {
		r := do(t, styledPort, "/api/x", withKey(freeKey))
		if r.status != 429 || r.body != "styled 429: quota exceeded: free 3/day (free day)" || r.header.Get("Retry-After") == "" {
			t.Fatalf("%d %q Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
		}
	})
	t.Run("no consumer: the key resolved empty is the config's mistake, 500", func(t *testing.T) {
		r := do(t, plainPort, "/api/x", nil)
		if r.status != 500 || !strings.Contains(r.body, `"detail":"quota key resolved empty: {http.auth.user.id} has no value for this request"`) || r.header.Get("WWW-Authenticate") != "" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	})
	t.Run("no fleet: no fleet_available gauge reading 0 as if NATS were down", func(t *testing.T) {
		m := pathtest.Metrics(t, adminPort, "gateway_quota_")
		if m[`gateway_quota_decisions_total{decision="admitted",plan="free"}`] < 1 {
			t.Fatalf("no quota decisions in the metrics: %v", m)
		}
		if v, ok := m["gateway_quota_fleet_available"]; ok {
			t.Errorf("gateway_quota_fleet_available %v without a fleet", v)
		}
	})
	t.Run("a valid key, but nothing sets the key's placeholder: 500 naming it, logged with the plan", func(t *testing.T) {
		r := do(t, plainPort, "/tenant/x", withKey(freeKey))
		if r.status != 500 || !strings.Contains(r.body, `"detail":"quota key resolved empty: {http.auth.jwt.claims.tenant} has no value for this request"`) ||
			r.header.Get("WWW-Authenticate") != "" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
		// the log names the key and the plan, and that the request had an identity
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(logFile)
			var found bool
			for _, line := range strings.Split(string(b), "\n") {
				var e struct {
					Msg, Key, Plan string
					Identity       bool
				}
				if json.Unmarshal([]byte(line), &e) == nil && strings.HasPrefix(e.Msg, "quota key resolved empty") &&
					e.Key == "{http.auth.jwt.claims.tenant}" && e.Plan == "free" && e.Identity {
					found = true
				}
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no log of the empty key with its plan and identity in:\n%s", b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("audit", func(t *testing.T) {
		evs := pathtest.WaitEvents(t, auditFile, 29)
		var refused, admitted, would int
		for _, ev := range evs {
			rec.AddNext(p, "audit", pathtest.Event(ev))
			switch {
			case ev.Status == 429 && ev.DecidedBy == "quota" && ev.Decision == "deny" && ev.Plan != "":
				refused++
			case ev.Status == 200 && ev.Plan != "" && ev.Decision == "allow":
				admitted++
			case ev.Decision == "would_deny" && ev.DecidedBy == "quota" && ev.Plan == "free":
				would++
			}
		}
		if refused != 6 || would != 1 || admitted != 21 {
			t.Errorf("events: %d refused by quota, %d admitted with a plan, %d would_deny; want 6, 21, 1", refused, admitted, would)
		}
	})
	t.Run("usage", func(t *testing.T) {
		u := usage(t, adminPort, "alice")
		rec.Add(p, "usage alice", u.Days)
		berlin, _ := time.LoadLocation("Europe/Berlin")
		today := time.Now().In(berlin).Format("2006-01-02")
		// 3 admitted, 2 refused on /api (plain and styled), 4 on /trial as
		// consumer trial-alice
		if len(u.Days) != 1 || u.Days[0] != (quotausage.Day{Date: today, Plan: "free", Admitted: 3, Refused: 2}) {
			t.Errorf("alice: %+v", u.Days)
		}
		if u.Plan != "free" || len(u.Windows) != 1 || u.Windows[0].Used != 3 || u.Windows[0].Remaining != 0 || u.Source != "local" {
			t.Errorf("alice: %+v", u)
		}
		b := usage(t, adminPort, "bob")
		if len(b.Plans) != 2 || b.Plans[0] != "bulk" || b.Plans[1] != "pro" || len(b.Days) != 2 {
			t.Errorf("bob: %+v", b)
		}
	})
}

func usage(t *testing.T, adminPort int, consumer string) quotausage.Consumer {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://localhost:%d%s?consumer=%s", adminPort, quotausage.Path, consumer))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u quotausage.Consumer
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("usage: %d %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestDocExample runs the worked example of docs/caddyquota.md
// (testdata/example.Caddyfile, which the page must show verbatim) on
// both request paths, with its ports and files moved to the test's: the
// answers and the usage the page shows.
func TestDocExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "example.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "caddyquota.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```caddyfile\n"+string(raw)+"```\n") {
		t.Fatal("docs/caddyquota.md does not show testdata/example.Caddyfile verbatim in a ```caddyfile block")
	}
	pp := freeport.Ports(t, 2)
	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		dir := t.TempDir()
		alice, aliceLine := newKey(t, "alice-key", "alice", "")
		bob, bobLine := newKey(t, "bob-key", "bob", "pro")
		if err := os.WriteFile(filepath.Join(dir, "keys.json"), []byte("["+aliceLine+",\n"+bobLine+"]"), 0o600); err != nil {
			t.Fatal(err)
		}
		config := string(raw)
		for _, r := range [][2]string{
			{"admin localhost:2019", fmt.Sprintf("admin localhost:%d", pp[0])},
			{":8080 {", fmt.Sprintf(":%d {", pp[1])},
			{"dir quota-data", "dir " + filepath.Join(dir, "quota-data")},
			{"keys_file keys.json", "keys_file " + filepath.Join(dir, "keys.json")},
		} {
			if !strings.Contains(config, r[0]) {
				t.Fatalf("the example has no %q", r[0])
			}
			config = strings.ReplaceAll(config, r[0], r[1])
		}
		p.Load(t, pp[0], config, "srv0")
		client := &http.Client{Timeout: 10 * time.Second}
		get := func(name, key string) (int, http.Header, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://localhost:%d/", pp[1]), nil)
			req.Header.Set("X-API-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			h := http.Header{}
			for _, k := range []string{"Content-Type", "Retry-After", "Ratelimit", "Ratelimit-Policy"} {
				if v := resp.Header.Get(k); v != "" {
					h.Set(k, secondsRe.ReplaceAllString(v, ";t=<s>"))
				}
			}
			if h.Get("Retry-After") != "" {
				h.Set("Retry-After", "<s>")
			}
			rec.AddNext(p, name, pathtest.Resp(resp.StatusCode, h, string(b)))
			return resp.StatusCode, resp.Header, string(b)
		}
		for i := 1; i <= 5; i++ {
			if code, h, body := get("alice", alice); code != 200 || body != "hello alice" || !strings.HasPrefix(h.Get("RateLimit"), fmt.Sprintf(`"free-day";r=%d;t=`, 5-i)) {
				t.Fatalf("alice's request %d: %d %q RateLimit %q", i, code, body, h.Get("RateLimit"))
			}
		}
		for i := 6; i <= 7; i++ {
			code, h, body := get("alice", alice)
			var ex caddyquota.QuotaExceeded
			if code != 429 || json.Unmarshal([]byte(body), &ex) != nil || ex.Error != "quota_exceeded" || ex.Plan != "free" || ex.Window != "day" ||
				h.Get("Retry-After") == "" || !strings.HasPrefix(h.Get("RateLimit"), `"free-day";r=0;t=`) {
				t.Fatalf("alice's request %d: %d %q %v", i, code, body, h)
			}
		}
		code, h, body := get("bob", bob)
		if code != 200 || body != "hello bob" || !strings.Contains(h.Get("RateLimit-Policy"), `"pro-day";q=1000;w=`) ||
			!strings.Contains(h.Get("RateLimit-Policy"), `"pro-month";q=20000;w=`) || !strings.HasPrefix(h.Get("RateLimit"), `"pro-day";r=999;t=`) {
			t.Fatalf("bob: %d %q %v", code, body, h)
		}
		u := usage(t, pp[0], "alice")
		rec.Add(p, "usage alice", u.Days)
		if u.Plan != "free" || len(u.Days) != 1 || u.Days[0].Admitted != 5 || u.Days[0].Refused != 2 || u.Timezone != "Europe/Berlin" ||
			len(u.Windows) != 1 || u.Windows[0].Used != 5 || u.Windows[0].Remaining != 0 {
			t.Errorf("alice's usage: %+v", u)
		}
	})
}

// TestOwnPlanWithoutOption: a quota handler with a plan of its own (a
// rate limit of the route) needs no quota global option: the app keeps
// its counts in Caddy's data directory. Both request paths; the third
// request in 10 seconds is refused.
func TestOwnPlanWithoutOption(t *testing.T) {
	pathtest.Run(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		t.Setenv("XDG_DATA_HOME", t.TempDir())
		adminPort, port := ports[0], ports[1]
		config := fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1ms
}
http://127.0.0.1:%d {
	quota {
		key {http.request.header.X-Client}
		plan per_client 2/10s
	}
	respond "ok"
}
`, adminPort, ports[3], ports[4], port)
		p.Load(t, adminPort, config, "srv0")
		var got []int
		for i := 0; i < 3; i++ {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
			req.Header.Set("X-Client", "c-"+p.Key(t))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		rec.Add(p, "statuses", got)
		if fmt.Sprint(got) != "[200 200 429]" {
			t.Fatalf("statuses %v, want [200 200 429]", got)
		}
	})
}

// TestJSONKeyTypoFailsValidate: a JSON config (no Caddyfile, no line)
// whose quota key has a placeholder no identity source sets does not
// load: Caddy's validate provisions and validates the handler.
func TestJSONKeyTypoFailsValidate(t *testing.T) {
	cfg := fmt.Sprintf(`{"admin": {"disabled": true}, "apps": {
		"quota": {"plans": {"free": {"limits": ["3/day"]}}, "dir": %q},
		"http": {"servers": {"s": {"listen": [":0"], "routes": [{"handle": [{"handler": "quota", "key": "{http.auth.usr.id}"}]}]}}}}}`,
		filepath.Join(t.TempDir(), "quota"))
	var c caddy.Config
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	err := caddy.Validate(&c)
	if err == nil || !strings.Contains(err.Error(), `invalid key "{http.auth.usr.id}": no identity source sets {http.auth.usr.id} (did you mean {http.auth.user.id}?)`) {
		t.Fatalf("err = %v", err)
	}
}
