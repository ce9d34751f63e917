package caddyoidc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyoidc"
	_ "github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/internal/testkit/oidcop"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package: admin 2980, listeners 20600-20699.
const (
	adminPort = 2980
	gwPort    = 20601
	opPort    = 20690
)

const clientSecret = "caddyoidc-e2e-client-secret-0123456789abcdef"

var gw = fmt.Sprintf("http://127.0.0.1:%d", gwPort)

// provider starts the test's OpenID Provider once per test binary.
var (
	opOnce sync.Once
	op     *oidcop.Provider
	opErr  error
)

func provider(t *testing.T) *oidcop.Provider {
	t.Helper()
	opOnce.Do(func() {
		op, opErr = oidcop.Start(fmt.Sprintf("127.0.0.1:%d", opPort), oidcop.Client{
			ID: "gateway", Secret: clientSecret,
			RedirectURIs: []string{gw + "/oauth2/callback", fleetURL(0) + "/oauth2/callback", fleetURL(1) + "/oauth2/callback"},
		})
	})
	if opErr != nil {
		t.Fatal(opErr)
	}
	return op
}

// recordingTransport records the Set-Cookie fields the gateway sends and
// speaks h2c to the gateway on the HTTP/2 path (the provider speaks
// HTTP/1.1).
type recordingTransport struct {
	mu      sync.Mutex
	cookies []string
	h2      http.RoundTripper
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tr := http.DefaultTransport
	if rt.h2 != nil && r.URL.Host == strings.TrimPrefix(gw, "http://") {
		tr = rt.h2
	}
	resp, err := tr.RoundTrip(r)
	if err == nil && r.URL.Host == strings.TrimPrefix(gw, "http://") {
		rt.mu.Lock()
		rt.cookies = append(rt.cookies, resp.Header.Values("Set-Cookie")...)
		rt.mu.Unlock()
	}
	return resp, err
}

func (rt *recordingTransport) setCookies(prefix string) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for _, c := range rt.cookies {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func browser(p pathtest.Path) (*oidcop.Browser, *recordingTransport) {
	b := oidcop.NewBrowser()
	rt := &recordingTransport{}
	if p.H2 {
		rt.h2 = pathtest.H2CTransport()
	}
	b.Client.Transport = rt
	return b, rt
}

type result struct {
	Status int
	Header http.Header
	Body   string
}

// send sends one request to the gateway without following redirects.
func send(t *testing.T, p pathtest.Path, method, path string, header map[string]string, body string) result {
	t.Helper()
	req, err := http.NewRequest(method, gw+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	var tr http.RoundTripper = http.DefaultTransport
	if p.H2 {
		tr = pathtest.H2CTransport()
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func sessionCookie(t *testing.T, b *oidcop.Browser) string {
	t.Helper()
	u, _ := url.Parse(gw)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == "gateway_session" {
			return c.Value
		}
	}
	t.Fatal("the browser has no gateway_session cookie")
	return ""
}

func config(dir, issuer, upstream string) string {
	return fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20610
	https_port 20611
	grace_period 1s
	storage file_system %[2]s/storage
	audit {
		sink file %[2]s/audit.jsonl {
			flush_interval 20ms
		}
	}
}

http://127.0.0.1:%[3]d {
	audit
	oidc_login {
		issuer %[4]s
		client_id gateway
		client_secret %[5]s
		forward_claim email X-User-Email
	}
	route /admin/* {
		rbac {
			require any admin
		}
		respond "admin {http.auth.user.id}"
	}
	route /echo/* {
		reverse_proxy %[6]s
	}
	respond "hello {http.auth.user.id} {http.auth.oidc.claims.email}"
}
`, adminPort, dir, gwPort, issuer, clientSecret, upstream)
}

// TestLogin logs a browser in through the real provider and checks what
// the session does and refuses, on both request paths and over HTTP/1.1
// and HTTP/2, comparing what clients see.
func TestLogin(t *testing.T)   { pathtest.Run(t, testLogin) }
func TestLoginH2(t *testing.T) { pathtest.RunH2(t, testLogin) }

func testLogin(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	http.DefaultClient.CloseIdleConnections()
	o := provider(t)
	dir := t.TempDir()
	var mu sync.Mutex
	var upstreamSaw []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstreamSaw = append(upstreamSaw, fmt.Sprintf("email=%q cookie=%q", r.Header.Values("X-User-Email"), r.Header.Values("Cookie")))
		mu.Unlock()
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(upstream.Close)
	p.Load(t, adminPort, config(dir, o.Issuer, upstream.URL), "srv0")
	record := func(key string, r result) {
		h := http.Header{}
		for _, k := range []string{"Content-Type", "Www-Authenticate", "Cache-Control", "Retry-After"} {
			if v := r.Header.Values(k); v != nil {
				h[k] = v
			}
		}
		rec.Add(p, key, pathtest.Resp(r.Status, h, r.Body))
	}

	// an API request without a session: 401, never a redirect
	api := send(t, p, "GET", "/orders", map[string]string{"Accept": "application/json"}, "")
	record("api without session", api)
	if api.Status != 401 || api.Header.Get("Location") != "" {
		t.Fatalf("API request without a session: %d %v", api.Status, api.Header)
	}
	// a browser navigation without a session: to the provider, with PKCE S256, state and nonce
	nav := send(t, p, "GET", "/app?x=1", map[string]string{"Accept": "text/html"}, "")
	loc, _ := url.Parse(nav.Header.Get("Location"))
	if nav.Status != 302 || !strings.HasPrefix(loc.String(), o.Issuer) {
		t.Fatalf("navigation without a session: %d to %q", nav.Status, loc)
	}
	q := loc.Query()
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || len(q.Get("state")) < 32 || len(q.Get("nonce")) < 32 {
		t.Fatalf("authorization request lacks PKCE S256, state or nonce: %s", loc)
	}
	rec.Add(p, "navigation redirected", nav.Status)

	// the login, through the provider's own form
	b, rt := browser(p)
	at, status, body, err := b.Login(gw+"/app?x=1", o.Username(), oidcop.Password)
	if err != nil {
		t.Fatal(err)
	}
	if at.String() != gw+"/app?x=1" || status != 200 || body != "hello id1 test-user@zitadel.ch" {
		t.Fatalf("after the login: at %s, %d %q", at, status, body)
	}
	rec.Add(p, "after login", body)
	set := rt.setCookies("gateway_session=")
	if len(set) != 1 {
		t.Fatalf("session cookies set: %q", set)
	}
	c := set[0]
	if len(c) > 200 || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") || !strings.Contains(c, "Path=/") {
		t.Errorf("session cookie %q (%d bytes): want <= 200 bytes, HttpOnly, SameSite=Lax, Path=/", c, len(c))
	}
	if strings.Contains(c, "Secure") {
		t.Errorf("a session cookie over plain HTTP is not Secure (the browser would drop it): %q", c)
	}
	cookie := sessionCookie(t, b)
	assertSealedAtRest(t, filepath.Join(dir, "storage"), cookie, "test-user@zitadel.ch")
	withCookie := func(h map[string]string) map[string]string {
		if h == nil {
			h = map[string]string{}
		}
		h["Cookie"] = "other=1; gateway_session=" + cookie
		return h
	}

	// the session's identity: rbac (the example user is no admin: no
	// roles claim), the upstream sees forward_claim's header and no
	// session cookie
	record("rbac with session", send(t, p, "GET", "/admin/x", withCookie(nil), ""))
	record("upstream with session", send(t, p, "GET", "/echo/1", withCookie(nil), ""))
	mu.Lock()
	saw := strings.Join(upstreamSaw, "\n")
	upstreamSaw = nil
	mu.Unlock()
	if saw != `email=["test-user@zitadel.ch"] cookie=["other=1"]` {
		t.Errorf("the upstream saw %s; want the email header and no session cookie", saw)
	}

	// CSRF: a state-changing request with the cookie must come from this site
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"post without origin", nil, 403},
		{"post from another site", map[string]string{"Origin": "http://evil.example"}, 403},
		{"post with origin null", map[string]string{"Origin": "null"}, 403},
		{"post cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": gw}, 403},
		{"post same origin", map[string]string{"Origin": gw}, 200},
		{"post same-origin fetch", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200},
	} {
		r := send(t, p, "POST", "/echo/csrf", withCookie(tc.header), "{}")
		record("csrf "+tc.name, r)
		if r.Status != tc.want {
			t.Errorf("%s: %d, want %d (%s)", tc.name, r.Status, tc.want, r.Body)
		}
	}

	// a tampered cookie is no session
	tampered := []byte(cookie)
	tampered[10] ^= 1
	r := send(t, p, "GET", "/orders", map[string]string{"Accept": "application/json", "Cookie": "gateway_session=" + string(tampered)}, "")
	record("tampered cookie", r)
	if r.Status != 401 {
		t.Errorf("tampered cookie: %d", r.Status)
	}
	// an unknown but well-formed id (another gateway's key) is none either
	r = send(t, p, "GET", "/orders", map[string]string{"Accept": "application/json", "Cookie": "gateway_session=" + strings.Repeat("A", len(cookie))}, "")
	if r.Status != 401 {
		t.Errorf("forged cookie: %d", r.Status)
	}

	// the admin API counts it
	var counts struct {
		Logins []struct {
			Sessions, Subjects, Cached int
		} `json:"logins"`
	}
	getJSON(t, fmt.Sprintf("http://localhost:%d/gateway/sessions", adminPort), &counts)
	if len(counts.Logins) != 1 || counts.Logins[0].Sessions < 1 || counts.Logins[0].Cached < 1 {
		t.Errorf("GET /gateway/sessions: %+v", counts)
	}

	// logout: the provider's end-session with the id token, and the
	// session ends on the server (the old cookie, replayed, is refused)
	lo := send(t, p, "POST", "/oauth2/logout", withCookie(map[string]string{"Origin": gw}), "")
	end, _ := url.Parse(lo.Header.Get("Location"))
	if lo.Status != 303 || !strings.HasPrefix(end.String(), o.Issuer) || end.Query().Get("id_token_hint") == "" ||
		end.Query().Get("post_logout_redirect_uri") != gw+"/" {
		t.Fatalf("logout: %d to %s", lo.Status, end)
	}
	if !strings.Contains(strings.Join(lo.Header.Values("Set-Cookie"), "\n"), "gateway_session=; Path=/; Max-Age=0") {
		t.Errorf("logout does not clear the cookie: %q", lo.Header.Values("Set-Cookie"))
	}
	r = send(t, p, "GET", "/orders", withCookie(map[string]string{"Accept": "application/json"}), "")
	record("after logout", r)
	if r.Status != 401 {
		t.Errorf("the session still works after logout: %d", r.Status)
	}
	// a logout from another site is refused
	r = send(t, p, "GET", "/oauth2/logout", map[string]string{"Sec-Fetch-Site": "cross-site"}, "")
	record("cross-site logout", r)
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, b)
	}
}

// noRedirect stops a browser at the gateway's callback, to replay or
// tamper with it.
func stopAtCallback(b *oidcop.Browser) *string {
	var callback string
	b.Client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Path == "/oauth2/callback" && callback == "" {
			callback = req.URL.String()
			return http.ErrUseLastResponse
		}
		return nil
	}
	return &callback
}

// TestAttacks runs each attack on the login against the real provider, on
// both paths: a callback whose state is not the browser's (refused, the
// code not spent), a replayed callback (the code is used once), return
// paths off the site, back-channel logout tokens that must be refused and
// one that ends the session; and the audit event of a session request.
func TestAttacks(t *testing.T) { pathtest.Run(t, testAttacks) }

func testAttacks(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	http.DefaultClient.CloseIdleConnections()
	o := provider(t)
	dir := t.TempDir()
	p.Load(t, adminPort, config(dir, o.Issuer, "127.0.0.1:9"), "srv0")
	record := func(key string, r result) {
		rec.Add(p, key, pathtest.Resp(r.Status, http.Header{"Content-Type": r.Header.Values("Content-Type")}, r.Body))
	}

	// state mismatch: the attacker's callback (its own code and state) in
	// the victim's browser, which has a pending login of its own
	attacker := oidcop.NewBrowser()
	cb := stopAtCallback(attacker)
	if _, _, _, err := attacker.Login(gw+"/", o.Username(), oidcop.Password); err != nil {
		t.Fatal(err)
	}
	if *cb == "" {
		t.Fatal("the attacker's login did not reach the callback")
	}
	u, _ := url.Parse(gw)
	exchanges := o.TokenRequests("authorization_code")
	victim := oidcop.NewBrowser()
	victim.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if _, status, _, _ := victim.Get(gw + "/"); status != 302 {
		t.Fatalf("victim's navigation: %d", status)
	}
	_, status, body, err := victim.Get(*cb)
	if err != nil {
		t.Fatal(err)
	}
	record("foreign callback", result{Status: status, Body: body})
	if status != 400 || o.TokenRequests("authorization_code") != exchanges {
		t.Errorf("a callback with another browser's state: %d %s, %d code exchanges (want 400, none)", status, body, o.TokenRequests("authorization_code")-exchanges)
	}
	// a callback without state, or with a forged one
	for _, q := range []string{"?code=x", "?code=x&state=" + strings.Repeat("A", 43), "?code=x&state=short"} {
		r := send(t, p, "GET", "/oauth2/callback"+q, map[string]string{"Accept": "text/html"}, "")
		record("callback "+q, r)
		if r.Status != 400 {
			t.Errorf("callback %s: %d", q, r.Status)
		}
	}
	if o.TokenRequests("authorization_code") != exchanges {
		t.Errorf("forged callbacks spent %d codes", o.TokenRequests("authorization_code")-exchanges)
	}

	// a code is used once: the attacker's own callback works once, then
	// its replay is refused without another exchange
	var pending []*http.Cookie
	for _, c := range attacker.Jar.Cookies(u) {
		if strings.HasPrefix(c.Name, "gateway_session_login_") {
			pending = append(pending, c)
		}
	}
	if len(pending) != 1 {
		t.Fatalf("pending login cookies: %v", pending)
	}
	_, status, body, _ = attacker.Get(*cb)
	if status != 200 || body != "hello id1 test-user@zitadel.ch" {
		t.Fatalf("the first use of the callback: %d %s", status, body)
	}
	exchanges = o.TokenRequests("authorization_code")
	// the replay carries the pending-login cookie again (as an attacker
	// who copied it would)
	attacker.Jar.SetCookies(u, pending)
	_, status, body, _ = attacker.Get(*cb)
	record("replayed callback", result{Status: status, Body: body})
	if status != 400 || o.TokenRequests("authorization_code") != exchanges {
		t.Errorf("a replayed callback: %d %s, %d exchanges", status, body, o.TokenRequests("authorization_code")-exchanges)
	}

	// return paths off the site all land on the site
	for _, rd := range []string{"//evil.example/x", "/\\evil.example", "https://evil.example/", "/%2F%2Fevil.example",
		"/%5Cevil.example", "%2F%2Fevil.example", "/%252F%252Fevil.example", "\t//evil.example", "/ok?next=1"} {
		b := oidcop.NewBrowser()
		at, status, _, err := b.Login(gw+"/oauth2/login?rd="+url.QueryEscape(rd), o.Username(), oidcop.Password)
		if err != nil {
			t.Fatalf("rd %q: %v", rd, err)
		}
		want := gw + "/"
		if rd == "/ok?next=1" {
			want = gw + rd
		}
		rec.Add(p, "return "+rd, status)
		if at.String() != want {
			t.Errorf("login with rd %q ended at %s, want %s", rd, at, want)
		}
	}
	// a navigation whose own path is "//evil.example/x"
	b := oidcop.NewBrowser()
	at, _, _, err := b.Login(gw+"//evil.example/x", o.Username(), oidcop.Password)
	if err != nil {
		t.Fatal(err)
	}
	if at.Host != u.Host {
		t.Errorf("a login from //evil.example/x ended at %s", at)
	}

	// back-channel logout
	b = oidcop.NewBrowser()
	if _, _, _, err := b.Login(gw+"/", o.Username(), oidcop.Password); err != nil {
		t.Fatal(err)
	}
	cookie := sessionCookie(t, b)
	use := func() int {
		return send(t, p, "GET", "/orders", map[string]string{"Accept": "application/json", "Cookie": "gateway_session=" + cookie}, "").Status
	}
	if s := use(); s != 200 {
		t.Fatalf("the session before back-channel logout: %d", s)
	}
	post := func(token string) result {
		return send(t, p, "POST", "/oauth2/backchannel_logout", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			url.Values{"logout_token": {token}}.Encode())
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
	}{
		{"no event", map[string]any{"events": map[string]any{}}},
		{"nonce", map[string]any{"nonce": "n"}},
		{"other audience", map[string]any{"aud": "another-client"}},
		{"other issuer", map[string]any{"iss": "http://127.0.0.1:1"}},
		{"expired", map[string]any{"exp": 1000, "iat": 900}},
		{"no jti", map[string]any{"jti": nil}},
	} {
		tok, err := o.SignLogoutToken("gateway", oidcop.Subject, "", tc.extra)
		if err != nil {
			t.Fatal(err)
		}
		r := post(tok)
		rec.Add(p, "backchannel "+tc.name, r.Status)
		if r.Status != 400 {
			t.Errorf("back-channel logout token with %s: %d %s", tc.name, r.Status, r.Body)
		}
	}
	forged := []byte(mustLogoutToken(t, o, nil))
	forged[len(forged)-5] ^= 1
	if r := post(string(forged)); r.Status != 400 {
		t.Errorf("a logout token with a bad signature: %d", r.Status)
	}
	if s := use(); s != 200 {
		t.Fatalf("refused logout tokens ended the session: %d", s)
	}
	good := mustLogoutToken(t, o, nil)
	if r := post(good); r.Status != 200 {
		t.Fatalf("back-channel logout: %d %s", r.Status, r.Body)
	}
	if s := use(); s != 401 {
		t.Errorf("the session after back-channel logout: %d", s)
	}
	if r := post(good); r.Status != 400 {
		t.Errorf("a replayed logout token: %d", r.Status)
	}

	// audit records the session's identity
	b = oidcop.NewBrowser()
	if _, _, _, err := b.Login(gw+"/audited", o.Username(), oidcop.Password); err != nil {
		t.Fatal(err)
	}
	var found bool
	deadline := time.Now().Add(10 * time.Second)
	for !found && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		for _, ev := range pathtest.ReadEvents(t, filepath.Join(dir, "audit.jsonl")) {
			if ev.Path != "/audited" || ev.Status != 200 {
				continue
			}
			found = true
			rec.Add(p, "audit", pathtest.Event(ev))
			if ev.AuthSource != "oidc_session" || ev.Auth != "oidc_session" || ev.Subject != oidcop.Subject || ev.DecidedBy != "oidc_login" {
				t.Errorf("audit event: auth %q auth_source %q subject %q decided_by %q", ev.Auth, ev.AuthSource, ev.Subject, ev.DecidedBy)
			}
		}
	}
	if !found {
		t.Error("no audit event of the session's request")
	}
}

func mustLogoutToken(t *testing.T, o *oidcop.Provider, extra map[string]any) string {
	t.Helper()
	tok, err := o.SignLogoutToken("gateway", oidcop.Subject, "", extra)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// assertSealedAtRest walks the config's storage after a real login: the
// session is there, and no file holds the provider's tokens (a JWT starts
// "eyJ"), the user's claims or the cookie's value in clear, nor is the
// cookie's value a file name (reading the bucket gives no usable session).
func assertSealedAtRest(t *testing.T, root, cookie string, claims ...string) {
	t.Helper()
	var sessions int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.Contains(rel, cookie) {
			t.Errorf("a stored file is named after the cookie's value: %s", rel)
		}
		if !strings.HasPrefix(rel, "oidc_login"+string(filepath.Separator)) {
			return nil
		}
		sessions++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, clear := range append([]string{"eyJ", cookie}, claims...) {
			if strings.Contains(string(b), clear) {
				t.Errorf("%s holds %q in clear", rel, clear)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sessions == 0 {
		t.Fatalf("no session under %s/oidc_login after the login", root)
	}
}
