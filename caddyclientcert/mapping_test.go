package caddyclientcert

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestPlanFor: a subject's quota plan is the first plan line whose
// subjects (exact, or a prefix ending with *) match it.
func TestPlanFor(t *testing.T) {
	rules := []PlanRule{
		{Plan: "partner", Subjects: []string{"spiffe://example.org/partners/acme"}},
		{Plan: "pro", Subjects: []string{"spiffe://example.org/partners/*", "spiffe://example.org/ns/prod/*"}},
		{Plan: "free", Subjects: []string{"spiffe://example.org/*"}},
	}
	for subject, want := range map[string]string{
		"spiffe://example.org/partners/acme":   "partner",
		"spiffe://example.org/partners/acme2":  "pro",
		"spiffe://example.org/ns/prod/billing": "pro",
		"spiffe://example.org/trial/x":         "free",
		"spiffe://other.org/partners/acme":     "",
		"":                                     "",
	} {
		if got := PlanFor(rules, subject); got != want {
			t.Errorf("PlanFor(%q) = %q, want %q", subject, got, want)
		}
	}
}

// TestPlanLines: the Caddyfile's plan lines, and the errors of bad ones.
func TestPlanLines(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        []PlanRule
		wantErr     string
	}{
		{name: "two lines", input: "client_cert_auth {\n plan pro spiffe://a/x/* spiffe://a/y\n plan free spiffe://a/*\n}",
			want: []PlanRule{{Plan: "pro", Subjects: []string{"spiffe://a/x/*", "spiffe://a/y"}}, {Plan: "free", Subjects: []string{"spiffe://a/*"}}}},
		{name: "no subject", input: "client_cert_auth {\n plan pro\n}", wantErr: "plan needs a plan and at least one subject"},
		{name: "bad plan name", input: "client_cert_auth {\n plan pro.plus spiffe://a/x\n}", wantErr: `invalid plan "pro.plus"`},
		{name: "lone star", input: "client_cert_auth {\n plan pro *\n}", wantErr: `invalid subject "*"`},
		{name: "star inside", input: "client_cert_auth {\n plan pro spiffe://a/*/x\n}", wantErr: `invalid subject "spiffe://a/*/x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ClientCertAuth
			err := c.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Plans) != len(tc.want) {
				t.Fatalf("plans %+v, want %+v", c.Plans, tc.want)
			}
			for i := range tc.want {
				if c.Plans[i].Plan != tc.want[i].Plan || strings.Join(c.Plans[i].Subjects, " ") != strings.Join(tc.want[i].Subjects, " ") {
					t.Errorf("plan %d: %+v, want %+v", i, c.Plans[i], tc.want[i])
				}
			}
			if err := checkPlanRules(c.Plans); err != nil {
				t.Errorf("checkPlanRules: %v", err)
			}
		})
	}
}
