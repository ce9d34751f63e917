package caddyoidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/credential"
	"github.com/apigate/gateway/internal/deny"
)

// pendingLogin is what a browser carries between the start of its login
// and the callback: sealed in a cookie of its own (no storage write for a
// login that never completes), named after the state so that logins in
// several tabs do not overwrite each other.
type pendingLogin struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"` // the PKCE code verifier
	Return   string `json:"r"`
	Expires  int64  `json:"e"` // unix seconds
}

// loginTimeout bounds the time from the redirect to the provider to the
// callback.
const loginTimeout = 10 * time.Minute

// loginCookieTag is the part of the state in the pending login's cookie
// name.
const loginCookieTag = 12

func (o *OIDCLogin) loginCookieName(https bool, state string) string {
	return o.cookieName(https) + "_login_" + state[:loginCookieTag]
}

// pendingAD binds a sealed pending login to this login (issuer and
// client): another login's cookie does not open here.
func (o *OIDCLogin) pendingAD() []byte { return []byte("pending " + o.sessions.Prefix) }

// redirectURI is the callback's absolute URL on the request's site.
func (o *OIDCLogin) redirectURI(r *http.Request) string {
	return o.absolute(r, o.RedirectPath)
}

func (o *OIDCLogin) absolute(r *http.Request, p string) string {
	scheme := "http"
	if isHTTPS(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host + p
}

// oauthConfig is the client's configuration for the discovered provider.
func (o *OIDCLogin) oauthConfig(meta *caddyjwt.ProviderMetadata, r *http.Request) *oauth2.Config {
	return &oauth2.Config{
		ClientID: o.ClientID, ClientSecret: o.secret, Scopes: o.scopes,
		Endpoint:    oauth2.Endpoint{AuthURL: meta.AuthorizationEndpoint, TokenURL: meta.TokenEndpoint},
		RedirectURL: o.redirectURI(r),
	}
}

// metadata returns the provider's discovered configuration, waiting at
// most a few seconds for a discovery under way; nil when the provider is
// not discovered (the caller answers 503).
func (o *OIDCLogin) metadata(r *http.Request) *caddyjwt.ProviderMetadata {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	m := o.keySet.Metadata(ctx)
	if m != nil && (m.AuthorizationEndpoint == "" || m.TokenEndpoint == "") {
		o.logger.Error("the provider's configuration has no authorization_endpoint or token_endpoint; no login is possible", zap.String("issuer", o.Issuer))
		return nil
	}
	return m
}

// startLogin sends the browser to the provider, to come back to ret.
func (o *OIDCLogin) startLogin(w http.ResponseWriter, r *http.Request, ret string) error {
	meta := o.metadata(r)
	if meta == nil {
		return o.unavailable(w, r, "the OpenID Provider is not reachable")
	}
	p := pendingLogin{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(),
		Return: ret, Expires: o.now().Add(loginTimeout).Unix()}
	pt, _ := json.Marshal(p)
	https := isHTTPS(r)
	http.SetCookie(w, &http.Cookie{
		Name: o.loginCookieName(https, p.State), Value: base64.RawURLEncoding.EncodeToString(o.sessions.Ring.Seal(pt, o.pendingAD())),
		Path: "/", MaxAge: int(loginTimeout / time.Second), HttpOnly: true, Secure: https, SameSite: http.SameSiteLaxMode,
	})
	target := o.oauthConfig(meta, r).AuthCodeURL(p.State, oauth2.S256ChallengeOption(p.Verifier), oauth2.SetAuthURLParam("nonce", p.Nonce))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusFound)
	return nil
}

// openPending finds and opens the pending login of a callback's state;
// false when the browser has none for it (a forged or replayed callback,
// another browser's, an expired one).
func (o *OIDCLogin) openPending(r *http.Request, state string) (pendingLogin, bool) {
	var p pendingLogin
	if len(state) < loginCookieTag || len(state) > 128 {
		return p, false
	}
	c, err := r.Cookie(o.loginCookieName(isHTTPS(r), state))
	if err != nil {
		return p, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return p, false
	}
	pt, err := o.sessions.Ring.Open(sealed, o.pendingAD())
	if err != nil || json.Unmarshal(pt, &p) != nil {
		return p, false
	}
	if subtle.ConstantTimeCompare([]byte(p.State), []byte(state)) != 1 || o.now().Unix() > p.Expires {
		return p, false
	}
	return p, true
}

// clearCookie expires a cookie in the browser.
func clearCookie(w http.ResponseWriter, name string, https bool) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: https, SameSite: http.SameSiteLaxMode})
}

// callback completes a login: the state must match the browser's pending
// login (else nothing is spent), the code is used once, the ID token is
// verified in full (signature, issuer, audience, expiry, nonce), then the
// session is stored and its cookie set.
func (o *OIDCLogin) callback(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	state := q.Get("state")
	p, ok := o.openPending(r, state)
	if !ok {
		loginsVec.WithLabelValues(loginStateMismatch).Inc()
		return o.deny(w, r, http.StatusBadRequest, "invalid_request", "login state does not match this browser's login")
	}
	https := isHTTPS(r)
	clearCookie(w, o.loginCookieName(https, state), https)
	if e := q.Get("error"); e != "" {
		loginsVec.WithLabelValues(loginProviderError).Inc()
		return o.deny(w, r, http.StatusUnauthorized, "access_denied", "the provider refused the login: "+clip(e, 64))
	}
	code := q.Get("code")
	if code == "" {
		loginsVec.WithLabelValues(loginStateMismatch).Inc()
		return o.deny(w, r, http.StatusBadRequest, "invalid_request", "no code")
	}
	if !o.consumeState(r.Context(), state, p.Expires) {
		loginsVec.WithLabelValues(loginReplayed).Inc()
		return o.deny(w, r, http.StatusBadRequest, "invalid_request", "this login was completed already")
	}
	meta := o.metadata(r)
	if meta == nil {
		loginsVec.WithLabelValues(loginProviderUnknown).Inc()
		return o.unavailable(w, r, "the OpenID Provider is not reachable")
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, o.client)
	tok, err := o.oauthConfig(meta, r).Exchange(ctx, code, oauth2.VerifierOption(p.Verifier))
	if err != nil {
		loginsVec.WithLabelValues(loginExchangeFailed).Inc()
		o.logger.Warn("the provider refused the code", zap.Error(redactErr(err)))
		return o.deny(w, r, http.StatusBadGateway, "login_failed", "the provider did not exchange the code")
	}
	sess, reason := o.sessionFrom(ctx, meta, tok, p.Nonce, "")
	if sess == nil {
		result := loginInvalidIDToken
		if strings.HasPrefix(reason, "userinfo") {
			result = loginUserinfoFailed
		}
		loginsVec.WithLabelValues(result).Inc()
		o.logger.Warn("login refused", zap.String("reason", reason))
		return o.deny(w, r, http.StatusUnauthorized, "login_failed", reason)
	}
	cookie, err := o.sessions.Create(r.Context(), sess)
	if err != nil {
		loginsVec.WithLabelValues(loginStorageFailed).Inc()
		o.logger.Error("storing a session failed", zap.Error(err))
		return o.unavailable(w, r, "session storage unavailable")
	}
	loginsVec.WithLabelValues(loginSuccess).Inc()
	http.SetCookie(w, &http.Cookie{
		Name: o.cookieName(https), Value: cookie, Path: "/", MaxAge: int(time.Duration(o.SessionTTL) / time.Second),
		HttpOnly: true, Secure: https, SameSite: http.SameSiteLaxMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, p.Return, http.StatusSeeOther)
	return nil
}

// consumeState records that a login's state was used, in this gateway's
// memory and in the storage (the fleet); false when it was already.
func (o *OIDCLogin) consumeState(ctx context.Context, state string, expires int64) bool {
	name := storageName([]byte(state))
	if _, loaded := o.login.usedStates.LoadOrStore(name, time.Unix(expires, 0).UnixNano()); loaded {
		return false
	}
	key := path.Join(o.sessions.Prefix, "used_states", name)
	if o.sessions.Storage.Exists(ctx, key) {
		return false
	}
	// a failed write still leaves the provider's own one-time code
	_ = o.sessions.Storage.Store(ctx, key, expiryBytes(time.Unix(expires, 0)))
	return true
}

// sessionFrom verifies a token response's ID token and makes the session
// (nil and the reason when it fails). nonce is the login's; subject, on a
// refresh, is the session's (the new ID token must name it).
func (o *OIDCLogin) sessionFrom(ctx context.Context, meta *caddyjwt.ProviderMetadata, tok *oauth2.Token, nonce, subject string) (*Session, string) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, "the provider's answer has no id_token"
	}
	id, err := o.verifier.Verify(ctx, raw)
	if err != nil {
		return nil, "id_token: " + err.Error()
	}
	if reason := o.checkIDToken(id, nonce, subject); reason != "" {
		return nil, reason
	}
	claims := make(map[string]any, len(id.Claims)+4)
	if meta.UserinfoEndpoint != "" && tok.AccessToken != "" {
		info, err := o.userinfo(ctx, meta.UserinfoEndpoint, tok.AccessToken)
		if err != nil {
			return nil, "userinfo: " + err.Error()
		}
		if info["sub"] != id.Subject {
			return nil, "userinfo: sub differs from the id_token's"
		}
		for k, v := range info {
			claims[k] = v
		}
	}
	for k, v := range id.Claims { // the ID token's claims win
		claims[k] = v
	}
	sid, _ := id.Claims["sid"].(string)
	return &Session{Subject: id.Subject, Issuer: id.Issuer, Claims: claims, IDToken: raw,
		AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenExpiry: tok.Expiry, ProviderSID: sid}, ""
}

// checkIDToken adds OpenID Connect Core 3.1.3.7's checks to the
// verifier's (signature, iss, aud, exp, iat): the nonce, azp with several
// audiences, and on a refresh the same subject.
func (o *OIDCLogin) checkIDToken(id *identity.Identity, nonce, subject string) string {
	if nonce != "" {
		got, _ := id.Claims["nonce"].(string)
		if subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
			return "id_token: nonce does not match the login's"
		}
	}
	if len(id.Audience) > 1 {
		if azp, _ := id.Claims["azp"].(string); azp != o.ClientID {
			return "id_token: azp is not this client"
		}
	}
	if subject != "" && id.Subject != subject {
		return "id_token: a refresh named another subject"
	}
	return ""
}

// maxUserinfo bounds a userinfo answer.
const maxUserinfo = 1 << 20

func (o *OIDCLogin) userinfo(ctx context.Context, endpoint, accessToken string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+accessToken)
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, redactErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the provider answered %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, fmt.Errorf("answer of type %q: signed or encrypted userinfo is not supported", ct)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUserinfo+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxUserinfo {
		return nil, fmt.Errorf("answer larger than %d bytes", maxUserinfo)
	}
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("answer is not a JSON object: %v", err)
	}
	return info, nil
}

// logout ends the session: on the server (every gateway), the cookie, and
// at the provider (RP-Initiated Logout) when it has an end_session_endpoint.
// A logout must come from this site: a state-changing method needs a
// same-site Origin or Sec-Fetch-Site, and a GET from another site (a
// link on another page) is refused when the browser says so.
func (o *OIDCLogin) logout(w http.ResponseWriter, r *http.Request) error {
	https := isHTTPS(r)
	if !SafeMethod(r.Method) && !SameSite(r, https) || r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return o.deny(w, r, http.StatusForbidden, "forbidden", "cross-site logout refused")
	}
	var idToken string
	cookie, _, _ := credential.ExtractToken(r, o.sources[httpsIndex(https)], SessionIDLen)
	if cookie != "" {
		if e, err := o.sessions.Lookup(r.Context(), cookie); err == nil && e != nil {
			idToken = e.sess.IDToken
		}
		if err := o.sessions.Revoke(r.Context(), cookie); err != nil {
			o.logger.Error("revoking a session failed", zap.Error(err))
			return o.unavailable(w, r, "session storage unavailable")
		}
		revocationsVec.WithLabelValues("logout").Inc()
	}
	clearCookie(w, o.cookieName(https), https)
	after := o.PostLogoutRedirect
	if after == "" {
		after = "/"
	}
	if strings.HasPrefix(after, "/") {
		after = o.absolute(r, after)
	}
	target := after
	if meta := o.metadata(r); meta != nil && meta.EndSessionEndpoint != "" {
		u, err := url.Parse(meta.EndSessionEndpoint)
		if err == nil {
			v := u.Query()
			if idToken != "" {
				v.Set("id_token_hint", idToken)
			}
			v.Set("client_id", o.ClientID)
			v.Set("post_logout_redirect_uri", after)
			u.RawQuery = v.Encode()
			target = u.String()
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil
}

// backchannelEvent is the event a logout token must carry.
const backchannelEvent = "http://schemas.openid.net/event/backchannel-logout"

// backchannelLogout ends the sessions a provider's logout token names
// (OpenID Connect Back-Channel Logout 1.0, section 2.6): by `sid`, else
// every session of `sub`.
func (o *OIDCLogin) backchannelLogout(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return o.backchannelError(w, http.StatusMethodNotAllowed, "POST a logout_token")
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return o.backchannelError(w, http.StatusBadRequest, "malformed form")
	}
	raw := r.PostForm.Get("logout_token")
	if raw == "" {
		return o.backchannelError(w, http.StatusBadRequest, "no logout_token")
	}
	id, err := o.verifier.Verify(r.Context(), raw)
	if err != nil {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: "+err.Error())
	}
	events, _ := id.Claims["events"].(map[string]any)
	if _, ok := events[backchannelEvent]; !ok {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: no back-channel logout event")
	}
	if _, ok := id.Claims["nonce"]; ok {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: a nonce is not allowed")
	}
	jti, _ := id.Claims["jti"].(string)
	if jti == "" {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: no jti")
	}
	until := o.now().Add(loginTimeout).UnixNano()
	if !id.ExpiresAt.IsZero() {
		until = id.ExpiresAt.Add(time.Minute).UnixNano()
	}
	if _, seen := o.login.usedJTIs.LoadOrStore(jti, until); seen {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: replayed")
	}
	sid, _ := id.Claims["sid"].(string)
	if sid == "" && id.Subject == "" {
		return o.backchannelError(w, http.StatusBadRequest, "logout_token: neither sub nor sid")
	}
	var n int
	if sid != "" {
		n, err = o.sessions.RevokeProviderSession(r.Context(), o.Issuer, sid)
	} else {
		n, err = o.sessions.RevokeSubject(r.Context(), o.Issuer, id.Subject)
	}
	if err != nil {
		o.logger.Error("back-channel logout: revoking failed", zap.Error(err))
		return o.backchannelError(w, http.StatusInternalServerError, "revoking failed")
	}
	revocationsVec.WithLabelValues("backchannel").Add(float64(n))
	o.logger.Info("back-channel logout", zap.Int("sessions", n), zap.Bool("by_sid", sid != ""))
	w.WriteHeader(http.StatusOK)
	return nil
}

// backchannelError answers the provider as section 2.8 asks: 400 with
// an OAuth error body.
func (o *OIDCLogin) backchannelError(w http.ResponseWriter, status int, desc string) error {
	body, _ := json.Marshal(map[string]string{"error": "invalid_request", "error_description": desc})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}

// deny refuses a request the way every identity source does (internal/deny).
func (o *OIDCLogin) deny(w http.ResponseWriter, r *http.Request, status int, code, reason string) error {
	identity.SetDenial(r, "oidc_login", reason)
	w.Header().Set("Cache-Control", "no-store")
	return deny.Respond(w, r, status, code, reason)
}

// unavailable answers 503 with Retry-After: what the login needs (the
// provider, the storage) does not answer now.
func (o *OIDCLogin) unavailable(w http.ResponseWriter, r *http.Request, reason string) error {
	w.Header().Set("Retry-After", "5")
	return o.deny(w, r, http.StatusServiceUnavailable, "unavailable", reason)
}

// refreshSkew refreshes the tokens this long before they expire.
const refreshSkew = 30 * time.Second

// maybeRefresh starts the refresh of a session whose access token expires
// (once at a time per gateway; the storage lock makes it once per fleet).
func (o *OIDCLogin) maybeRefresh(cookie string, e *entry) {
	if e.sess.RefreshToken == "" || e.sess.TokenExpiry.IsZero() {
		return
	}
	now := o.now()
	if now.Add(refreshSkew).Before(e.sess.TokenExpiry) || now.UnixNano() < e.nextRefresh.Load() {
		return
	}
	if !e.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer e.refreshing.Store(false)
		defer func() {
			if p := recover(); p != nil {
				o.logger.Error("session refresh panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		result := o.refresh(ctx, cookie, e)
		refreshesVec.WithLabelValues(result).Inc()
		if result == "error" || result == "busy" {
			e.nextRefresh.Store(o.now().Add(retryRefresh).UnixNano())
		}
	}()
}

// retryRefresh is the pause after a refresh that failed or that another
// gateway holds.
const retryRefresh = 5 * time.Second

// refresh renews a session's tokens with its refresh token, holding the
// session's lock in the storage: a gateway that finds it taken leaves the
// refresh to its holder, and one that takes it reads the session again
// first, so a refresh another gateway did is adopted, not repeated.
func (o *OIDCLogin) refresh(ctx context.Context, cookie string, e *entry) string {
	s := o.sessions
	lock := path.Join(s.Prefix, "refresh", e.name)
	if tl, ok := s.Storage.(certmagic.TryLocker); ok {
		got, err := tl.TryLock(ctx, lock)
		if err != nil || !got {
			return "busy"
		}
	} else if err := s.Storage.Lock(ctx, lock); err != nil {
		return "busy"
	}
	defer func() { _ = s.Storage.Unlock(context.Background(), lock) }()
	cur, err := s.load(ctx, e.name)
	if err != nil {
		return "error"
	}
	if cur == nil { // revoked meanwhile
		s.cache.Apply(Invalidation{Session: e.name})
		return "revoked"
	}
	if cur.TokenExpiry.After(e.sess.TokenExpiry) {
		cur.LastSeen = time.Unix(0, e.lastSeen.Load())
		_ = s.Replace(ctx, cookie, e.name, cur)
		return "adopted"
	}
	meta := o.keySet.Metadata(ctx)
	if meta == nil {
		return "error"
	}
	cfg := &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.secret, Scopes: o.scopes,
		Endpoint: oauth2.Endpoint{AuthURL: meta.AuthorizationEndpoint, TokenURL: meta.TokenEndpoint}}
	octx := context.WithValue(ctx, oauth2.HTTPClient, o.client)
	tok, err := cfg.TokenSource(octx, &oauth2.Token{RefreshToken: cur.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			o.logger.Info("the provider refused a session's refresh token; the session ends")
			revocationsVec.WithLabelValues("refresh_refused").Inc()
			_ = s.revoke(ctx, e.name, cur)
			return "revoked"
		}
		o.logger.Warn("refreshing a session's tokens failed; the session goes on and tries again", zap.Error(redactErr(err)))
		return "error"
	}
	next := *cur
	next.AccessToken, next.TokenExpiry = tok.AccessToken, tok.Expiry
	if tok.RefreshToken != "" {
		next.RefreshToken = tok.RefreshToken
	}
	if raw, _ := tok.Extra("id_token").(string); raw != "" {
		fresh, reason := o.sessionFrom(octx, meta, tok, "", cur.Subject)
		if fresh == nil {
			o.logger.Warn("a refreshed id_token was refused; the session ends", zap.String("reason", reason))
			revocationsVec.WithLabelValues("refresh_refused").Inc()
			_ = s.revoke(ctx, e.name, cur)
			return "revoked"
		}
		next.Claims, next.IDToken = fresh.Claims, fresh.IDToken
	}
	next.LastSeen = time.Unix(0, e.lastSeen.Load())
	if err := s.Replace(ctx, cookie, e.name, &next); err != nil {
		return "error"
	}
	return "ok"
}

// redactErr keeps an error's text but never a URL's query (a code, a
// token) or its user info.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery, u.User = "", nil
			return fmt.Errorf("%s %s: %v", ue.Op, u.String(), ue.Err)
		}
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fmt.Errorf("token endpoint answered %d %s", re.Response.StatusCode, clip(re.ErrorCode, 64))
	}
	return err
}

// clip bounds a string shown to a client or a log.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		return s[:n]
	}
	return s
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}
