package caddyoidc_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
			RedirectURIs: []string{gw + "/oauth2/callback"},
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

var _ = filepath.Join
