package caddyrbac

import (
	"encoding/json"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apigate/gateway/identity"
)

func mustRule(t testing.TB, mode Mode, values ...string) Rule {
	t.Helper()
	r, err := NewRule(mode, values)
	if err != nil {
		t.Fatalf("NewRule(%v, %v): %v", mode, values, err)
	}
	return r
}

// claimsJSON decodes a claim set the way jwt_auth does (encoding/json into
// map[string]any), so the tests see the same types as production.
func claimsJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad test claims %s: %v", s, err)
	}
	return m
}

func TestPolicyCheck(t *testing.T) {
	type rules struct {
		mode   Mode
		values []string
	}
	any := func(v ...string) rules { return rules{Any, v} }
	all := func(v ...string) rules { return rules{All, v} }

	tests := []struct {
		name        string
		rolesClaim  string
		scopesClaim string
		roles       []rules
		scopes      []rules
		claims      string
		want        Result
		reason      string
	}{
		{name: "top-level array, any, present", roles: []rules{any("admin", "editor")},
			claims: `{"roles":["viewer","editor"]}`, want: Allow},
		{name: "top-level array, any, absent", roles: []rules{any("admin", "editor")},
			claims: `{"roles":["viewer"]}`, want: DenyRole, reason: "missing role"},
		{name: "nested keycloak path", rolesClaim: "realm_access.roles", roles: []rules{any("admin")},
			claims: `{"realm_access":{"roles":["offline_access","admin"]}}`, want: Allow},
		{name: "nested path, intermediate not an object", rolesClaim: "realm_access.roles", roles: []rules{any("admin")},
			claims: `{"realm_access":"admin"}`, want: DenyRole, reason: "missing role"},
		{name: "deeply nested path", rolesClaim: "resource_access.orders-api.roles", roles: []rules{all("read", "write")},
			claims: `{"resource_access":{"orders-api":{"roles":["write","read"]}}}`, want: Allow},
		{name: "namespaced claim without escaping", rolesClaim: "https://example.com/roles", roles: []rules{any("admin")},
			claims: `{"https://example.com/roles":["admin"]}`, want: Allow},
		{name: "namespaced claim with escaped dot", rolesClaim: `https://example\.com/roles`, roles: []rules{any("admin")},
			claims: `{"https://example.com/roles":["admin"]}`, want: Allow},
		{name: "namespaced claim, escaped dot, nested below", rolesClaim: `https://example\.com/app.roles`, roles: []rules{any("admin")},
			claims: `{"https://example.com/app":{"roles":["admin"]}}`, want: Allow},
		{name: "string split on spaces", roles: []rules{any("admin")},
			claims: `{"roles":"viewer admin"}`, want: Allow},
		{name: "string split on commas", roles: []rules{all("admin", "billing")},
			claims: `{"roles":"admin,billing"}`, want: Allow},
		{name: "string split on commas and spaces", roles: []rules{all("admin", "billing", "ops")},
			claims: `{"roles":" admin, billing ,ops "}`, want: Allow},
		{name: "string is not a substring match", roles: []rules{any("admin")},
			claims: `{"roles":"administrator"}`, want: DenyRole, reason: "missing role"},
		{name: "empty array", roles: []rules{any("admin")},
			claims: `{"roles":[]}`, want: DenyRole, reason: "missing role"},
		{name: "empty string", roles: []rules{any("admin")},
			claims: `{"roles":""}`, want: DenyRole, reason: "missing role"},
		{name: "null claim", roles: []rules{any("admin")},
			claims: `{"roles":null}`, want: DenyRole, reason: "missing role"},
		{name: "claim absent", roles: []rules{any("admin")},
			claims: `{"sub":"alice"}`, want: DenyRole, reason: "missing role"},
		{name: "no claims at all", roles: []rules{any("admin")},
			claims: `{}`, want: DenyRole, reason: "missing role"},
		{name: "all, every one present", roles: []rules{all("admin", "billing")},
			claims: `{"roles":["billing","x","admin"]}`, want: Allow},
		{name: "all, one missing", roles: []rules{all("admin", "billing")},
			claims: `{"roles":["admin","admin"]}`, want: DenyRole, reason: "missing role"},
		{name: "several requires, both hold", roles: []rules{any("admin", "editor"), all("billing")},
			claims: `{"roles":["editor","billing"]}`, want: Allow},
		{name: "several requires, second fails", roles: []rules{any("admin", "editor"), all("billing")},
			claims: `{"roles":["editor"]}`, want: DenyRole, reason: "missing role"},
		{name: "several requires, first fails", roles: []rules{any("admin"), all("billing")},
			claims: `{"roles":["billing"]}`, want: DenyRole, reason: "missing role"},
		{name: "scope string", scopes: []rules{any("orders:read")},
			claims: `{"scope":"openid orders:read profile"}`, want: Allow},
		{name: "scope missing", scopes: []rules{any("orders:write")},
			claims: `{"scope":"openid orders:read"}`, want: DenyScope, reason: "missing scope"},
		{name: "scope all", scopes: []rules{all("orders:read", "orders:write")},
			claims: `{"scope":"orders:write orders:read"}`, want: Allow},
		{name: "scope custom claim as array (scp)", scopesClaim: "scp", scopes: []rules{any("orders:read")},
			claims: `{"scp":["orders:read"]}`, want: Allow},
		{name: "roles and scopes both hold", roles: []rules{any("admin")}, scopes: []rules{any("orders:read")},
			claims: `{"roles":["admin"],"scope":"orders:read"}`, want: Allow},
		{name: "roles hold, scope fails", roles: []rules{any("admin")}, scopes: []rules{any("orders:read")},
			claims: `{"roles":["admin"],"scope":"other"}`, want: DenyScope, reason: "missing scope"},
		{name: "no rules: any identity passes", claims: `{"roles":42}`, want: Allow},
		{name: "wrong type: number", roles: []rules{any("admin")},
			claims: `{"roles":42}`, want: DenyRole, reason: "roles claim is a number, not a string or an array of strings"},
		{name: "wrong type: boolean", roles: []rules{any("admin")},
			claims: `{"roles":true}`, want: DenyRole, reason: "roles claim is a boolean, not a string or an array of strings"},
		{name: "wrong type: object", roles: []rules{any("admin")},
			claims: `{"roles":{"admin":true}}`, want: DenyRole, reason: "roles claim is an object, not a string or an array of strings"},
		{name: "wrong type: array of numbers", roles: []rules{any("admin")},
			claims: `{"roles":[1,2]}`, want: DenyRole, reason: "roles claim is an array holding a value that is not a string"},
		{name: "wrong type: scope number", scopes: []rules{any("read")},
			claims: `{"scope":7}`, want: DenyScope, reason: "scopes claim is a number, not a string or an array of strings"},
		{name: "array with a non-string after the match still allows", roles: []rules{any("admin")},
			claims: `{"roles":["admin",5]}`, want: Allow},
		{name: "case sensitive", roles: []rules{any("admin")},
			claims: `{"roles":["Admin"]}`, want: DenyRole, reason: "missing role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var roles, scopes []Rule
			for _, r := range tc.roles {
				roles = append(roles, mustRule(t, r.mode, r.values...))
			}
			for _, r := range tc.scopes {
				scopes = append(scopes, mustRule(t, r.mode, r.values...))
			}
			p, err := NewPolicy(tc.rolesClaim, tc.scopesClaim, roles, scopes)
			if err != nil {
				t.Fatal(err)
			}
			got, reason := p.Check(claimsJSON(t, tc.claims))
			if got != tc.want || reason != tc.reason {
				t.Errorf("Check(%s) = %v %q, want %v %q", tc.claims, got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestPolicyNilClaims(t *testing.T) {
	p, err := NewPolicy("", "", []Rule{mustRule(t, Any, "admin")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, reason := p.Check(nil); got != DenyRole || reason != ReasonMissingRole {
		t.Errorf("Check(nil) = %v %q", got, reason)
	}
}

func TestPolicyGoTypes(t *testing.T) {
	// claims built in Go rather than decoded from JSON
	p, err := NewPolicy("", "", []Rule{mustRule(t, All, "a", "b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Check(map[string]any{"roles": []string{"b", "a"}}); got != Allow {
		t.Errorf("[]string claim: %v", got)
	}
	if got, reason := p.Check(map[string]any{"roles": json.Number("3")}); got != DenyRole || !strings.Contains(reason, "a number") {
		t.Errorf("json.Number claim: %v %q", got, reason)
	}
	if got, reason := p.Check(map[string]any{"roles": 3}); got != DenyRole || !strings.Contains(reason, "a number") {
		t.Errorf("int claim: %v %q", got, reason)
	}
	if got, reason := p.Check(map[string]any{"roles": struct{}{}}); got != DenyRole || !strings.Contains(reason, "unexpected type") {
		t.Errorf("struct claim: %v %q", got, reason)
	}
}

func TestNewRule(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		wantErr string
		want    int
	}{
		{name: "one", values: []string{"a"}, want: 1},
		{name: "duplicates dropped", values: []string{"a", "b", "a"}, want: 2},
		{name: "none", values: nil, wantErr: "at least one value"},
		{name: "empty value", values: []string{"a", ""}, wantErr: "empty value"},
		{name: "64 values", values: manyValues(64), want: 64},
		{name: "65 values", values: manyValues(65), wantErr: "more than 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRule(All, tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Values) != tc.want {
				t.Fatalf("%d values, want %d", len(r.Values), tc.want)
			}
			// an all-rule holds exactly when every value is present
			p, err := NewPolicy("", "", []Rule{r}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res, reason := p.Check(map[string]any{"roles": toAny(r.Values)}); res != Allow {
				t.Errorf("all values present: %v %q", res, reason)
			}
			if res, _ := p.Check(map[string]any{"roles": toAny(r.Values[:len(r.Values)-1])}); res != DenyRole {
				t.Errorf("last value missing: %v", res)
			}
		})
	}
}

func TestTooManyDistinctValues(t *testing.T) {
	vals := manyValues(65)
	r1 := mustRule(t, Any, vals[:40]...)
	r2 := mustRule(t, All, vals[30:]...)
	if _, err := NewPolicy("", "", []Rule{r1, r2}, nil); err == nil || !strings.Contains(err.Error(), "more than 64 distinct roles") {
		t.Errorf("err = %v", err)
	}
	// shared values count once
	r3 := mustRule(t, All, vals[:64]...)
	if _, err := NewPolicy("", "", []Rule{r1, r3}, nil); err != nil {
		t.Errorf("64 distinct values: %v", err)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"any", "all"} {
		m, err := ParseMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("some"); err == nil || !strings.Contains(err.Error(), `"some"`) {
		t.Errorf("ParseMode(some) err = %v", err)
	}
}

func TestNewPolicyBadPath(t *testing.T) {
	if _, err := NewPolicy("a..b", "", nil, nil); err == nil || !strings.Contains(err.Error(), "roles_claim") {
		t.Errorf("err = %v", err)
	}
	if _, err := NewPolicy("", `trailing\`, nil, nil); err == nil || !strings.Contains(err.Error(), "scopes_claim") {
		t.Errorf("err = %v", err)
	}
}

func TestResultString(t *testing.T) {
	want := map[Result]string{Allow: "allow", DenyRole: "deny_role", DenyScope: "deny_scope", Unauthenticated: "unauthenticated", 99: "unknown"}
	for r, s := range want {
		if r.String() != s {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), s)
		}
	}
}

func manyValues(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "role" + strings.Repeat("x", i)
	}
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestCheckDoesNotAllocate keeps the zero-allocation target as a
// test, so that a regression fails CI and not only a benchmark report.
func TestCheckDoesNotAllocate(t *testing.T) {
	for _, b := range policyBenchCases(t) {
		t.Run(b.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(200, func() { b.policy.Check(b.claims) })
			if allocs != 0 {
				t.Errorf("Check allocates %.1f times per run", allocs)
			}
		})
	}
}

type policyBenchCase struct {
	name   string
	policy *Policy
	claims map[string]any
	want   Result
}

func policyBenchCases(t testing.TB) []policyBenchCase {
	keycloak := claimsJSON(t, `{"sub":"alice","iss":"https://idp","exp":1900000000,
		"realm_access":{"roles":["offline_access","uma_authorization","viewer","editor","admin"]},
		"scope":"openid profile email orders:read orders:write"}`)
	auth0 := claimsJSON(t, `{"sub":"auth0|1","https://example.com/roles":["viewer","billing"],"scope":"openid orders:read"}`)
	mk := func(rolesClaim, scopesClaim string, roles, scopes []Rule) *Policy {
		p, err := NewPolicy(rolesClaim, scopesClaim, roles, scopes)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []policyBenchCase{
		{"any_nested_allow", mk("realm_access.roles", "", []Rule{mustRule(t, Any, "admin", "ops")}, nil), keycloak, Allow},
		{"all_nested_allow", mk("realm_access.roles", "", []Rule{mustRule(t, All, "viewer", "editor", "admin")}, nil), keycloak, Allow},
		{"two_requires_and_scope_allow", mk("realm_access.roles", "scope",
			[]Rule{mustRule(t, Any, "admin", "editor"), mustRule(t, All, "viewer")},
			[]Rule{mustRule(t, Any, "orders:write")}), keycloak, Allow},
		{"namespaced_allow", mk("https://example.com/roles", "", []Rule{mustRule(t, Any, "billing")}, nil), auth0, Allow},
		{"any_nested_deny", mk("realm_access.roles", "", []Rule{mustRule(t, Any, "root")}, nil), keycloak, DenyRole},
		{"wrong_type_deny", mk("exp", "", []Rule{mustRule(t, Any, "admin")}, nil), keycloak, DenyRole},
	}
}

// BenchmarkPolicyCheck measures the pure policy check against a cached
// (already decoded) claim set, as the handler runs it on every request.
// Besides wall time it reports cpu-ns/op, the CPU time of the benchmark's
// thread (Linux only), which stays meaningful on a machine shared with
// other jobs, where wall time also counts the time spent descheduled.
func BenchmarkPolicyCheck(b *testing.B) {
	for _, c := range policyBenchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			if got, _ := c.policy.Check(c.claims); got != c.want {
				b.Fatalf("Check = %v, want %v", got, c.want)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, cpuOK := threadCPUTime()
			for i := 0; i < b.N; i++ {
				c.policy.Check(c.claims)
			}
			if cpu1, ok := threadCPUTime(); cpuOK && ok {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// threadCPUTime returns the CPU time used by the calling OS thread.
func threadCPUTime() (time.Duration, bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

func BenchmarkClaimLookup(b *testing.B) {
	claims := claimsJSON(b, `{"realm_access":{"roles":["a","b","admin"]}}`)
	p, err := identity.ParseClaimPath("realm_access.roles")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Lookup(claims)
	}
}
