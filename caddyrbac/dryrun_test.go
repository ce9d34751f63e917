package caddyrbac

import (
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/apigate/gateway/identity"
)

func dryRunCounter(t testing.TB, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := decisionsVec.WithLabelValues("true", result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDryRun: each denial rbac can answer lets the request through in dry
// run, records what would have been denied and by which rule, records no
// denial, and is counted under dry_run="true" (not "false").
func TestDryRun(t *testing.T) {
	policy := RBAC{
		RolesClaim:   "realm_access.roles",
		Require:      []RuleConfig{{Any: []string{"viewer"}}, {Any: []string{"admin", "editor"}}},
		RequireScope: []RuleConfig{{All: []string{"orders:read", "orders:write"}}},
		DryRun:       true,
	}
	for _, tc := range []struct {
		name, claims     string // "" = no identity
		result           string
		wouldBy, reason  string
		decidedByOnAllow string
	}{
		{name: "no identity", result: "unauthenticated", wouldBy: "rbac: identity", reason: ReasonMissingIdentity},
		{name: "second require line fails", claims: `{"realm_access":{"roles":["viewer"]},"scope":"orders:read orders:write"}`,
			result: "deny_role", wouldBy: "rbac: require any admin,editor", reason: ReasonMissingRole},
		{name: "scope line fails", claims: `{"realm_access":{"roles":["viewer","admin"]},"scope":"orders:read"}`,
			result: "deny_scope", wouldBy: "rbac: require_scope all orders:read,orders:write", reason: ReasonMissingScope},
		{name: "roles claim of the wrong type", claims: `{"realm_access":{"roles":7}}`,
			result: "deny_role", wouldBy: "rbac: require any viewer", reason: "roles claim is a number, not a string or an array of strings"},
		{name: "allowed", claims: `{"realm_access":{"roles":["viewer","admin"]},"scope":"orders:read orders:write"}`,
			result: "allow", decidedByOnAllow: "rbac: require any viewer; require any admin,editor; require_scope all orders:read,orders:write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := provisioned(t, &RBAC{RolesClaim: policy.RolesClaim, Require: policy.Require, RequireScope: policy.RequireScope, DryRun: true})
			r, _ := caddyRequest("GET", "/orders")
			if tc.claims != "" {
				identity.Set(r, &identity.Identity{Subject: "bob", Claims: claimsJSON(t, tc.claims)})
			}
			dry, enforced := dryRunCounter(t, tc.result), counterValue(t, tc.result)
			w := httptest.NewRecorder()
			next := &nextHandler{}
			if err := h.ServeHTTP(w, r, next); err != nil {
				t.Fatal(err)
			}
			if !next.called || w.Code != 204 {
				t.Fatalf("request did not pass: status %d, next called %v", w.Code, next.called)
			}
			if by, reason := identity.Denial(r); by != "" || reason != "" {
				t.Errorf("denial recorded in dry run: %q %q", by, reason)
			}
			by, reason := identity.WouldDeny(r)
			if by != tc.wouldBy || reason != tc.reason {
				t.Errorf("would deny %q %q, want %q %q", by, reason, tc.wouldBy, tc.reason)
			}
			if got := identity.DecidedBy(r); got != tc.decidedByOnAllow {
				t.Errorf("decided_by %q, want %q", got, tc.decidedByOnAllow)
			}
			if got := dryRunCounter(t, tc.result); got != dry+1 {
				t.Errorf(`decisions{dry_run="true",result=%q} went from %v to %v`, tc.result, dry, got)
			}
			if got := counterValue(t, tc.result); got != enforced {
				t.Errorf(`decisions{dry_run="false",result=%q} changed in dry run`, tc.result)
			}
		})
	}
}

// TestDecidedBy: without dry run, a denial names the rule that denied
// (SetDenialBy) and an allow names the whole policy.
func TestDecidedBy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      RBAC
		claims string
		status int
		want   string
	}{
		{name: "no rules: identity", h: RBAC{}, claims: `{}`, status: 204, want: "rbac: identity"},
		{name: "no identity", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}}}}, status: 401, want: "rbac: identity"},
		{name: "first failing line", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}}, {All: []string{"b", "c"}}}},
			claims: `{"roles":["a","b"]}`, status: 403, want: "rbac: require all b,c"},
		{name: "allow names every line", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}}}, RequireScope: []RuleConfig{{Any: []string{"s"}}}},
			claims: `{"roles":["a"],"scope":"s"}`, status: 204, want: "rbac: require any a; require_scope any s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := provisioned(t, &tc.h)
			r, _ := caddyRequest("GET", "/")
			if tc.claims != "" {
				identity.Set(r, &identity.Identity{Subject: "x", Claims: claimsJSON(t, tc.claims)})
			}
			w := httptest.NewRecorder()
			if err := h.ServeHTTP(w, r, &nextHandler{}); err != nil {
				t.Fatal(err)
			}
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			if got := identity.DecidedBy(r); got != tc.want {
				t.Errorf("decided_by %q, want %q", got, tc.want)
			}
			if by, _ := identity.Denial(r); tc.status != 204 && by != "rbac" {
				t.Errorf("deny_by %q, want rbac", by)
			}
		})
	}
}
