package caddyopenapi

import (
	"testing"

	"github.com/apigate/gateway/identity"
)

const securityDoc = `openapi: 3.1.0
info: {title: security, version: '1'}
components:
  securitySchemes:
    oauth: {type: oauth2, flows: {clientCredentials: {tokenUrl: 'https://idp.example/token', scopes: {'orders:read': r, 'orders:write': w}}}}
    oidc: {type: openIdConnect, openIdConnectUrl: 'https://idp.example/.well-known/openid-configuration'}
    bearer: {type: http, scheme: Bearer}
    basic: {type: http, scheme: basic}
    key: {type: apiKey, in: header, name: X-Api-Key}
    mtls: {type: mutualTLS}
security:
  - oauth: ['orders:read']
paths:
  /read:
    get: {operationId: inherited, responses: {'200': {description: ok}}}
  /write:
    post: {operationId: allScopes, security: [{oauth: ['orders:write', 'orders:read']}], responses: {'200': {description: ok}}}
  /either:
    get: {operationId: either, security: [{oidc: [admin:all]}, {key: [admin]}], responses: {'200': {description: ok}}}
  /optional:
    get: {operationId: optional, security: [{}, {oauth: ['orders:read']}], responses: {'200': {description: ok}}}
  /open:
    get: {operationId: open, security: [], responses: {'200': {description: ok}}}
  /bearer:
    get: {operationId: bearerRoles, security: [{bearer: [admin]}], responses: {'200': {description: ok}}}
  /mtls:
    get: {operationId: mtls, security: [{mtls: []}], responses: {'200': {description: ok}}}
  /basic:
    get: {operationId: basic, security: [{basic: []}], responses: {'200': {description: ok}}}
`

// TestSecurity is the table of security requirements (enforce_security)
// against the identities the gateway's sources produce: which scheme
// accepts which kind of identity, scopes for OAuth 2.0 and OpenID Connect
// and roles for the others (as rbac reads them: a space-separated string
// or an array), every value of a requirement needed, any one requirement
// enough, {} admitting anonymous requests and security: [] none needed.
func TestSecurity(t *testing.T) {
	s, err := Load(writeDoc(t, "api.yaml", map[string]string{"api.yaml": securityDoc}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]*Operation{}
	for _, op := range s.Operations {
		ops[op.ID] = op
	}
	jwt := func(claims map[string]any) *identity.Identity {
		return &identity.Identity{Subject: "alice", Method: identity.MethodJWT, Claims: claims}
	}
	var (
		none      *identity.Identity
		reader    = jwt(map[string]any{"sub": "alice", "scope": "orders:read"})
		writer    = jwt(map[string]any{"sub": "alice", "scope": "orders:write orders:read"})
		writeOnly = jwt(map[string]any{"sub": "alice", "scope": []any{"orders:write"}})
		writerArr = jwt(map[string]any{"sub": "alice", "scope": []any{"orders:read", "orders:write"}})
		jwtAdmin  = jwt(map[string]any{"sub": "alice", "scope": "admin:all", "roles": []any{"admin"}})
		keyAdmin  = &identity.Identity{Subject: "svc", Method: identity.MethodAPIKey, Claims: map[string]any{"sub": "svc", "roles": []any{"admin"}, "scope": "orders:read"}}
		keyUser   = &identity.Identity{Subject: "svc", Method: identity.MethodAPIKey, Claims: map[string]any{"sub": "svc", "roles": "user"}}
		cert      = &identity.Identity{Subject: "spiffe://x/y", Method: identity.MethodClientCert, Claims: map[string]any{"sub": "spiffe://x/y"}}
	)
	cases := []struct {
		name string
		op   string
		id   *identity.Identity
		want securityResult
	}{
		{"document's requirement, scope held", "inherited", reader, securityOK},
		{"document's requirement, no identity", "inherited", none, securityNoIdentity},
		{"document's requirement, scope missing", "inherited", writeOnly, securityInsufficient},
		{"oauth2 does not accept an API key", "inherited", keyAdmin, securityNoIdentity},
		{"oauth2 does not accept a certificate", "inherited", cert, securityNoIdentity},
		{"every scope of a requirement", "allScopes", writer, securityOK},
		{"one scope of two", "allScopes", reader, securityInsufficient},
		{"scope claim as an array", "allScopes", writerArr, securityOK},
		{"scope claim as an array, one missing", "allScopes", writeOnly, securityInsufficient},
		{"first requirement (openIdConnect scope)", "either", jwtAdmin, securityOK},
		{"second requirement (apiKey role)", "either", keyAdmin, securityOK},
		{"neither requirement: an accepted identity lacks the values", "either", keyUser, securityInsufficient},
		{"neither requirement: the token lacks the scope", "either", reader, securityInsufficient},
		{"neither requirement: a certificate is not accepted", "either", cert, securityNoIdentity},
		{"empty requirement admits anonymous", "optional", none, securityOK},
		{"empty requirement admits any identity", "optional", keyUser, securityOK},
		{"security: [] needs nothing", "open", none, securityOK},
		{"bearer roles from a token", "bearerRoles", jwtAdmin, securityOK},
		{"bearer roles from an API key", "bearerRoles", keyAdmin, securityOK},
		{"bearer without the role", "bearerRoles", writer, securityInsufficient},
		{"bearer without identity", "bearerRoles", none, securityNoIdentity},
		{"mutualTLS accepts a certificate", "mtls", cert, securityOK},
		{"mutualTLS does not accept a token", "mtls", writer, securityNoIdentity},
		{"basic: nothing the gateway verifies stands for it", "basic", writer, securityNoIdentity},
		{"basic: nor an API key", "basic", keyAdmin, securityNoIdentity},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := ops[tc.op]
			if op == nil {
				t.Fatalf("no operation %s", tc.op)
			}
			got, req := checkSecurity(op.security, tc.id)
			if got != tc.want {
				t.Fatalf("checkSecurity = %d, want %d", got, tc.want)
			}
			if got != securityOK && (req == nil || req.text == "") {
				t.Errorf("a refusal names no requirement: %+v", req)
			}
		})
	}
}
