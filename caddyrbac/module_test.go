package caddyrbac

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

func provisioned(t testing.TB, h *RBAC) *RBAC {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return h
}

// caddyRequest builds a request carrying what Caddy's server puts on every
// request: a replacer and a vars table.
func caddyRequest(method, target string) (*http.Request, *caddy.Replacer) {
	r := httptest.NewRequest(method, target, nil)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx), repl
}

func counterValue(t testing.TB, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := decisionsVec.WithLabelValues("false", result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

type nextHandler struct{ called bool }

func (n *nextHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	n.called = true
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func TestServeHTTP(t *testing.T) {
	keycloak := `{"sub":"alice","realm_access":{"roles":["viewer","editor"]},"scope":"openid orders:read"}`
	tests := []struct {
		name      string
		h         RBAC
		claims    string // "" = no identity
		want      int
		body      string
		challenge string
		roles     string
		decision  string
		metric    string
	}{
		{
			name:   "allowed",
			h:      RBAC{RolesClaim: "realm_access.roles", Require: []RuleConfig{{Any: []string{"admin", "editor"}}}},
			claims: keycloak, want: 204, roles: "viewer,editor", decision: "allow", metric: "allow",
		},
		{
			name:   "no identity",
			h:      RBAC{Require: []RuleConfig{{Any: []string{"admin"}}}},
			claims: "", want: 401, body: `{"error":"unauthorized","reason":"missing identity"}`,
			challenge: `Bearer realm="gateway"`, decision: "unauthenticated", metric: "unauthenticated",
		},
		{
			name:   "no identity, own realm",
			h:      RBAC{Realm: `orders "api"`},
			claims: "", want: 401, body: `{"error":"unauthorized","reason":"missing identity"}`,
			challenge: `Bearer realm="orders \"api\""`, decision: "unauthenticated", metric: "unauthenticated",
		},
		{
			name:   "missing role",
			h:      RBAC{RolesClaim: "realm_access.roles", Require: []RuleConfig{{Any: []string{"admin"}}}},
			claims: keycloak, want: 403, body: `{"error":"forbidden","reason":"missing role"}`,
			roles: "viewer,editor", decision: "deny_role", metric: "deny_role",
		},
		{
			name:   "missing scope",
			h:      RBAC{RolesClaim: "realm_access.roles", RequireScope: []RuleConfig{{All: []string{"orders:read", "orders:write"}}}},
			claims: keycloak, want: 403, body: `{"error":"forbidden","reason":"missing scope"}`,
			roles: "viewer,editor", decision: "deny_scope", metric: "deny_scope",
		},
		{
			name:   "wrong claim type",
			h:      RBAC{RolesClaim: "realm_access", Require: []RuleConfig{{Any: []string{"admin"}}}},
			claims: keycloak, want: 403,
			body:     `{"error":"forbidden","reason":"roles claim is an object, not a string or an array of strings"}`,
			decision: "deny_role", metric: "deny_role",
		},
		{
			name:   "identity only",
			h:      RBAC{},
			claims: `{"sub":"bob"}`, want: 204, decision: "allow", metric: "allow",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := provisioned(t, &tc.h)
			r, repl := caddyRequest("GET", "/orders")
			if tc.claims != "" {
				identity.Set(r, &identity.Identity{Subject: "x", Claims: claimsJSON(t, tc.claims)})
			}
			before := counterValue(t, tc.metric)
			w := httptest.NewRecorder()
			next := &nextHandler{}
			if err := h.ServeHTTP(w, r, next); err != nil {
				t.Fatalf("ServeHTTP error: %v", err)
			}
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d", w.Code, tc.want)
			}
			if next.called != (tc.want == 204) {
				t.Errorf("next called = %v", next.called)
			}
			if after := counterValue(t, tc.metric); after != before+1 {
				t.Errorf("metric %s went from %v to %v", tc.metric, before, after)
			}
			if got, _ := repl.GetString(PlaceholderDecision); got != tc.decision {
				t.Errorf("decision placeholder %q, want %q", got, tc.decision)
			}
			if got, _ := repl.GetString(PlaceholderRoles); got != tc.roles {
				t.Errorf("roles placeholder %q, want %q", got, tc.roles)
			}
			if tc.roles != "" {
				if got := identity.Roles(r); len(got) == 0 {
					t.Errorf("identity.Roles empty")
				}
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			by, reason := identity.Denial(r)
			if tc.want == 204 {
				if by != "" || reason != "" {
					t.Errorf("denial recorded on allow: %q %q", by, reason)
				}
				return
			}
			if err := problemtest.Extends(w.Body.String(), tc.want, tc.body, r.URL.Path); err != nil {
				t.Error(err)
			}
			var want struct{ Reason string }
			_ = json.Unmarshal([]byte(tc.body), &want)
			if ct := w.Header().Get("Content-Type"); ct != problemtest.ContentType {
				t.Errorf("Content-Type %q", ct)
			}
			if by != "rbac" || reason != want.Reason {
				t.Errorf("denial %q %q, want rbac %q", by, reason, want.Reason)
			}
			if got, _ := repl.GetString(PlaceholderReason); got != want.Reason {
				t.Errorf("reason placeholder %q, want %q", got, want.Reason)
			}
		})
	}
}

// TestProvisionTwice checks that a config reload (a second Provision with a
// fresh registry, and one with the same registry) reuses the collector.
func TestProvisionTwice(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	for i := 0; i < 2; i++ {
		h := &RBAC{Require: []RuleConfig{{Any: []string{"a"}}}}
		if err := h.Provision(ctx); err != nil {
			t.Fatalf("Provision %d: %v", i, err)
		}
	}
}

func TestProvisionErrors(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &RBAC{RolesClaim: "a..b"}
	if err := h.Provision(ctx); err == nil {
		t.Fatal("bad roles_claim accepted")
	}
}

// BenchmarkServeHTTP measures the whole handler on the allow path, roles
// exposure included (that part allocates: the roles slice and the lazy
// placeholder value).
func BenchmarkServeHTTP(b *testing.B) {
	h := provisioned(b, &RBAC{RolesClaim: "realm_access.roles", Require: []RuleConfig{{Any: []string{"admin", "editor"}}}})
	id := &identity.Identity{Subject: "alice", Claims: claimsJSON(b, `{"realm_access":{"roles":["viewer","editor"]}}`)}
	r, _ := caddyRequest("GET", "/")
	identity.Set(r, id)
	w := httptest.NewRecorder()
	next := &nextHandler{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
	}
}
