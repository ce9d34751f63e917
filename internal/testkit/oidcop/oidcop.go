// Package oidcop runs a real OpenID Provider inside a test process (or as
// the command in ./testop, for docs/oidc.md's worked example): zitadel/oidc's
// OpenID-certified `op` package with its example storage (users in memory,
// a login form), so oidc_login is tested against a provider's real
// discovery, JWKS, authorization, token, userinfo and end-session
// endpoints, not a stub.
//
// The example's users log in as `test-user@<issuer host>` (or
// `test-user2`) with the password `verysecure`.
package oidcop

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// Password is the example users' password.
const Password = "verysecure"

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL (http://127.0.0.1:<port>).
	Issuer  string
	Storage *storage.Storage
	srv     *http.Server
	ln      net.Listener
	// TokenRequests counts requests to the token endpoint, by grant type.
	tokenMu       sync.Mutex
	tokenRequests map[string]int
	down          atomic.Bool
}

// Client is a client registered at the provider.
type Client struct {
	ID, Secret   string
	RedirectURIs []string
}

var registerMu sync.Mutex

// Start runs a provider on addr (host:port; port 0 picks one) with the
// clients registered (web clients: client_secret_basic, code and refresh
// token grants; dev mode allows http redirect URIs).
func Start(addr string, clients ...Client) (*Provider, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	issuer := "http://" + ln.Addr().String()
	registerMu.Lock()
	for _, c := range clients {
		storage.RegisterClients(storage.WebClient(c.ID, c.Secret, c.RedirectURIs...))
	}
	registerMu.Unlock()
	st := storage.NewStorage(storage.NewUserStore(issuer))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	router := exampleop.SetupServer(issuer, st, logger, false)
	p := &Provider{Issuer: issuer, Storage: st, ln: ln, tokenRequests: map[string]int{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/oauth/token" && r.Method == http.MethodPost {
			_ = r.ParseForm()
			p.tokenMu.Lock()
			p.tokenRequests[r.PostForm.Get("grant_type")]++
			p.tokenMu.Unlock()
		}
		router.ServeHTTP(w, r)
	})
	p.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetDown makes every endpoint answer 503 (an outage of the provider).
func (p *Provider) SetDown(down bool) { p.down.Store(down) }

// TokenRequests returns how many token requests of a grant type
// ("authorization_code", "refresh_token") the provider received.
func (p *Provider) TokenRequests(grant string) int {
	p.tokenMu.Lock()
	defer p.tokenMu.Unlock()
	return p.tokenRequests[grant]
}

// Close stops the provider.
func (p *Provider) Close() error { return p.srv.Close() }

// Username is the example user's login name at this provider.
func (p *Provider) Username() string {
	u, _ := url.Parse(p.Issuer)
	return "test-user@" + u.Hostname()
}

// Subject is the example user's subject (its `sub`).
const Subject = "id1"

// SignLogoutToken signs a back-channel logout token for client with the
// provider's own signing key (as a provider that sends back-channel
// logouts would), naming sub and, when not empty, sid. extra claims
// override the standard ones (a test's attack).
func (p *Provider) SignLogoutToken(client, sub, sid string, extra map[string]any) (string, error) {
	key, err := p.Storage.SigningKey(context.Background())
	if err != nil {
		return "", err
	}
	priv, ok := key.Key().(*rsa.PrivateKey)
	if !ok {
		return "", errors.New("the provider's signing key is not RSA")
	}
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": p.Issuer, "aud": client, "iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(),
		"jti":    fmt.Sprintf("jti-%d", now.UnixNano()),
		"events": map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}},
	}
	if sub != "" {
		claims["sub"] = sub
	}
	if sid != "" {
		claims["sid"] = sid
	}
	for k, v := range extra {
		if v == nil {
			delete(claims, k)
		} else {
			claims[k] = v
		}
	}
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	t.Header["kid"] = key.ID()
	t.Header["typ"] = "logout+jwt"
	return t.SignedString(priv)
}

// Browser is an HTTP client that logs in as a person would: it follows
// redirects, keeps cookies, and fills the provider's login form.
type Browser struct {
	Client *http.Client
	Jar    *cookiejar.Jar
	// Header is sent with every request (Accept: text/html by default).
	Header http.Header
}

// NewBrowser returns a browser with an empty cookie jar.
func NewBrowser() *Browser {
	jar, _ := cookiejar.New(nil)
	return &Browser{
		Client: &http.Client{Jar: jar, Timeout: 30 * time.Second},
		Jar:    jar,
		Header: http.Header{"Accept": {"text/html,application/xhtml+xml"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Site": {"none"}},
	}
}

// Get fetches u following redirects; it returns the final response's
// URL, status and body.
func (b *Browser) Get(u string) (*url.URL, int, string, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, "", err
	}
	for k, v := range b.Header {
		req.Header[k] = v
	}
	return b.do(req)
}

func (b *Browser) do(req *http.Request) (*url.URL, int, string, error) {
	resp, err := b.Client.Do(req)
	if err != nil {
		return nil, 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.Request.URL, resp.StatusCode, string(body), err
}

// Login opens u (a page behind oidc_login), is sent to the provider's
// login form, submits the user's name and password, and follows the
// redirects back; it returns where it ended and that page.
func (b *Browser) Login(u, username, password string) (*url.URL, int, string, error) {
	at, status, body, err := b.Get(u)
	if err != nil {
		return nil, 0, "", err
	}
	if !strings.Contains(body, `name="password"`) {
		return at, status, body, fmt.Errorf("no login form at %s (status %d): %.300s", at, status, body)
	}
	return b.SubmitLogin(at, body, username, password)
}

// SubmitLogin submits the provider's login form found on page (at its URL
// at) and follows the redirects back.
func (b *Browser) SubmitLogin(at *url.URL, page, username, password string) (*url.URL, int, string, error) {
	const marker = `name="id" value="`
	i := strings.Index(page, marker)
	if i < 0 {
		return at, 0, page, errors.New("the login form has no auth request id")
	}
	id := page[i+len(marker):]
	id = id[:strings.IndexByte(id, '"')]
	form := url.Values{"id": {id}, "username": {username}, "password": {password}}
	action := at.ResolveReference(&url.URL{Path: "/login/username"})
	req, err := http.NewRequest(http.MethodPost, action.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range b.Header {
		req.Header[k] = v
	}
	return b.do(req)
}
