package caddyoidc

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/apigate/gateway/identity"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        OIDCLogin
		wantErr     string
	}{
		{name: "contract's minimum", input: "oidc_login {\n issuer https://idp.example\n client_id gw\n}",
			want: OIDCLogin{Issuer: "https://idp.example", ClientID: "gw"}},
		{name: "everything", input: `oidc_login {
	issuer https://idp.example/realms/x
	client_id gw
	client_secret {env.SECRET}
	scopes openid email
	scopes offline_access
	redirect_path /auth/cb
	login_path /auth/login
	logout_path /auth/logout
	post_logout_redirect https://app.example/bye
	backchannel_logout_path /auth/bcl
	session_ttl 12h
	idle_timeout 30m
	cookie_name app_session
	unauthenticated 401
	optional
	session_key {env.K1} {env.K0}
	forward_claim email X-Email
	cache_size 5000
}`, want: OIDCLogin{Issuer: "https://idp.example/realms/x", ClientID: "gw", ClientSecret: "{env.SECRET}",
			Scopes: []string{"openid", "email", "offline_access"}, RedirectPath: "/auth/cb", LoginPath: "/auth/login",
			LogoutPath: "/auth/logout", PostLogoutRedirect: "https://app.example/bye", BackchannelLogoutPath: "/auth/bcl",
			SessionTTL: caddy.Duration(12 * time.Hour), IdleTimeout: caddy.Duration(30 * time.Minute), CookieName: "app_session",
			Unauthenticated: "401", Optional: true, SessionKeys: []string{"{env.K1}", "{env.K0}"},
			ForwardClaims: []identity.ForwardClaim{{Claim: "email", Header: "X-Email"}}, CacheSize: 5000}},
		{name: "no issuer", input: "oidc_login {\n client_id gw\n}", wantErr: "issuer is required"},
		{name: "no client", input: "oidc_login {\n issuer https://idp.example\n}", wantErr: "client_id is required"},
		{name: "bad issuer", input: "oidc_login {\n issuer ftp://idp.example\n client_id gw\n}", wantErr: "Testfile:2"},
		{name: "bad unauthenticated", input: "oidc_login {\n issuer https://i\n client_id gw\n unauthenticated html\n}", wantErr: `invalid unauthenticated "html": must be redirect or 401, at Testfile:4`},
		{name: "path off the site", input: "oidc_login {\n issuer https://i\n client_id gw\n redirect_path //evil/cb\n}", wantErr: `invalid redirect_path "//evil/cb"`},
		{name: "bad ttl", input: "oidc_login {\n issuer https://i\n client_id gw\n session_ttl 10s\n}", wantErr: `invalid session_ttl "10s": must be at least 1m, at Testfile:4`},
		{name: "prefixed cookie", input: "oidc_login {\n issuer https://i\n client_id gw\n cookie_name __Host-x\n}", wantErr: "invalid cookie_name"},
		{name: "unknown", input: "oidc_login {\n issuer https://i\n client_id gw\n cookie_domain x\n}", wantErr: "unrecognized subdirective 'cookie_domain', at Testfile:4"},
		{name: "extra arg", input: "oidc_login {\n issuer https://i x\n}", wantErr: "Testfile:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got OIDCLogin
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	base := func() OIDCLogin { return OIDCLogin{Issuer: "https://idp.example", ClientID: "gw"} }
	for _, tc := range []struct {
		name    string
		mod     func(*OIDCLogin)
		wantErr string
	}{
		{"ok", func(*OIDCLogin) {}, ""},
		{"same paths", func(o *OIDCLogin) { o.LoginPath, o.LogoutPath = "/x", "/x" }, `are both "/x"`},
		{"relative post logout", func(o *OIDCLogin) { o.PostLogoutRedirect = "bye" }, "post_logout_redirect"},
		{"negative cache", func(o *OIDCLogin) { o.CacheSize = -1 }, "invalid cache_size -1"},
	} {
		o := base()
		tc.mod(&o)
		err := o.Validate()
		if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
