package identity

import "testing"

// TestUnknownAuthPlaceholder: a placeholder under http.auth. that no
// identity source sets is named, with the nearest that one does.
func TestUnknownAuthPlaceholder(t *testing.T) {
	for _, tc := range []struct{ in, name, nearest string }{
		{"{http.auth.user.id}", "", ""},
		{"trial-{http.auth.user.id}", "", ""},
		{"{http.auth.api_key.id}", "", ""},
		{"{http.auth.jwt.claims.tenant}", "", ""},
		{"{http.auth.oidc.claims.realm_access.roles}", "", ""},
		{"{http.auth.user.email}", "", ""}, // basic_auth's account metadata
		{"{http.request.header.X-Tenant}", "", ""},
		{"{remote_host}", "", ""},
		{"plain", "", ""},
		{"{http.auth.usr.id}", "http.auth.usr.id", "{http.auth.user.id}"},
		{"{http.request.host}-{http.auth.apikey.id}", "http.auth.apikey.id", "{http.auth.api_key.id}"},
		{"{http.auth.jwt.claim.sub}", "http.auth.jwt.claim.sub", "{http.auth.jwt.claims.<name>}"},
		{"{http.auth.client_cert.fingerprnt}", "http.auth.client_cert.fingerprnt", "{http.auth.client_cert.fingerprint}"},
		{"{http.auth.jwt.claims.}", "http.auth.jwt.claims.", "{http.auth.jwt.claims.<name>}"},
	} {
		name, nearest := UnknownAuthPlaceholder(tc.in)
		if name != tc.name || nearest != tc.nearest {
			t.Errorf("%s: %q, %q; want %q, %q", tc.in, name, nearest, tc.name, tc.nearest)
		}
	}
}
