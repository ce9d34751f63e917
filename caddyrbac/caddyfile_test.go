package caddyrbac

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    RBAC
		wantErr string
	}{
		{
			name:  "contract block",
			input: "rbac {\n roles_claim realm_access.roles\n scopes_claim scope\n require any admin editor\n require all billing\n require_scope any orders:read\n}",
			want: RBAC{
				RolesClaim:   "realm_access.roles",
				ScopesClaim:  "scope",
				Require:      []RuleConfig{{Any: []string{"admin", "editor"}}, {All: []string{"billing"}}},
				RequireScope: []RuleConfig{{Any: []string{"orders:read"}}},
			},
		},
		{name: "empty: identity only", input: "rbac", want: RBAC{}},
		{name: "empty block", input: "rbac {\n}", want: RBAC{}},
		{name: "realm", input: "rbac {\n realm orders\n}", want: RBAC{Realm: "orders"}},
		{name: "escaped dot kept", input: `rbac {
 roles_claim https://example\.com/roles
}`, want: RBAC{RolesClaim: `https://example\.com/roles`}},
		{name: "dry_run", input: "rbac {\n require any admin\n dry_run\n}", want: RBAC{Require: []RuleConfig{{Any: []string{"admin"}}}, DryRun: true}},
		{name: "dry_run true", input: "rbac {\n dry_run true\n}", want: RBAC{DryRun: true}},
		{name: "dry_run false", input: "rbac {\n dry_run false\n}", want: RBAC{}},
		{name: "dry_run yes", input: "rbac {\n dry_run yes\n}", wantErr: `invalid dry_run "yes": must be true or false`},
		{name: "dry_run two values", input: "rbac {\n dry_run true false\n}", wantErr: "wrong argument count"},
		{name: "argument on directive", input: "rbac admin", wantErr: "wrong argument count"},
		{name: "unknown subdirective", input: "rbac {\n roles admin\n}", wantErr: "unrecognized subdirective 'roles'"},
		{name: "require without mode", input: "rbac {\n require\n}", wantErr: "require needs a mode"},
		{name: "require bad mode", input: "rbac {\n require admin editor\n}", wantErr: `invalid mode "admin": must be any or all`},
		{name: "require without values", input: "rbac {\n require any\n}", wantErr: "require any needs at least one value"},
		{name: "require_scope without values", input: "rbac {\n require_scope all\n}", wantErr: "require_scope all needs at least one value"},
		{name: "roles_claim missing value", input: "rbac {\n roles_claim\n}", wantErr: "wrong argument count"},
		{name: "roles_claim two values", input: "rbac {\n roles_claim a b\n}", wantErr: "wrong argument count"},
		{name: "roles_claim twice", input: "rbac {\n roles_claim a\n roles_claim b\n}", wantErr: "roles_claim given twice"},
		{name: "scopes_claim twice", input: "rbac {\n scopes_claim a\n scopes_claim b\n}", wantErr: "scopes_claim given twice"},
		{name: "realm twice", input: "rbac {\n realm a\n realm b\n}", wantErr: "realm given twice"},
		{name: "too many values", input: "rbac {\n require all " + strings.Join(manyValues(65), " ") + "\n}", wantErr: "more than 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got RBAC
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalConfig(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			// everything the parser accepts must also compile
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func equalConfig(a, b RBAC) bool {
	if a.RolesClaim != b.RolesClaim || a.ScopesClaim != b.ScopesClaim || a.Realm != b.Realm || a.DryRun != b.DryRun {
		return false
	}
	return equalRules(a.Require, b.Require) && equalRules(a.RequireScope, b.RequireScope)
}

func equalRules(a, b []RuleConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i].Any, " ") != strings.Join(b[i].Any, " ") || strings.Join(a[i].All, " ") != strings.Join(b[i].All, " ") {
			return false
		}
	}
	return true
}

func TestValidateJSONConfig(t *testing.T) {
	tests := []struct {
		name    string
		h       RBAC
		wantErr string
	}{
		{name: "ok", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}}}}},
		{name: "both any and all", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}, All: []string{"b"}}}}, wantErr: "invalid require[0]: set either any or all"},
		{name: "empty rule", h: RBAC{RequireScope: []RuleConfig{{}, {}}}, wantErr: "invalid require_scope[0]: needs any or all"},
		{name: "empty value", h: RBAC{Require: []RuleConfig{{Any: []string{"a"}}, {All: []string{""}}}}, wantErr: "invalid require[1]: empty value"},
		{name: "bad roles path", h: RBAC{RolesClaim: "a..b"}, wantErr: "invalid roles_claim"},
		{name: "bad scopes path", h: RBAC{ScopesClaim: ".x"}, wantErr: "invalid scopes_claim"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
