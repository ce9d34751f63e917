package caddyopenapi

import (
	"flag"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/apigate/gateway/caddyjwt"       // jwt_auth, for the order golden file
	_ "github.com/apigate/gateway/caddypermcache" // permission, likewise
	"github.com/apigate/gateway/internal/testkit/goldentest"
)

// TestUnmarshalCaddyfile: each option, the modes of validate, and the
// errors of a bad line, each naming what was wrong.
func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        OpenAPI
		wantErr     string
	}{
		{name: "spec alone", input: "openapi {\n spec api.yaml\n}", want: OpenAPI{Spec: "api.yaml"}},
		{name: "validate request", input: "openapi {\n spec a.yaml\n validate request\n}", want: OpenAPI{Spec: "a.yaml", Request: ModeEnforce}},
		{name: "validate modes", input: "openapi {\n spec a.yaml\n validate request off\n validate response dry_run\n}", want: OpenAPI{Spec: "a.yaml", Request: ModeOff, Response: ModeDryRun}},
		{name: "every option", input: "openapi {\n spec a.yaml\n undeclared reject\n enforce_security\n scopes_claim scp\n roles_claim realm_access.roles\n max_request_body 2MiB\n max_response_body 1KB\n check_interval 5s\n realm orders\n annotation_formats uriref\n annotation_formats phone iban\n}",
			want: OpenAPI{Spec: "a.yaml", Undeclared: UndeclaredReject, EnforceSecurity: true, ScopesClaim: "scp", RolesClaim: "realm_access.roles",
				MaxRequestBody: 2 << 20, MaxResponseBody: 1000, CheckInterval: caddy.Duration(5 * time.Second), Realm: "orders",
				AnnotationFormats: []string{"uriref", "phone", "iban"}}},
		{name: "annotation_formats without a format", input: "openapi {\n spec a.yaml\n annotation_formats\n}", wantErr: "wrong argument count"},
		{name: "no spec", input: "openapi {\n validate request\n}", wantErr: "openapi needs a spec file"},
		{name: "spec as an argument", input: "openapi api.yaml", wantErr: `unexpected argument "api.yaml"`},
		{name: "validate what", input: "openapi {\n spec a.yaml\n validate everything\n}", wantErr: `invalid validate "everything": must be request or response`},
		{name: "validate mode", input: "openapi {\n spec a.yaml\n validate request log\n}", wantErr: `invalid validate request mode "log"`},
		{name: "validate without argument", input: "openapi {\n spec a.yaml\n validate\n}", wantErr: "wrong argument count"},
		{name: "undeclared", input: "openapi {\n spec a.yaml\n undeclared drop\n}", wantErr: `invalid undeclared "drop": must be reject or pass`},
		{name: "enforce_security with a value", input: "openapi {\n spec a.yaml\n enforce_security on\n}", wantErr: "wrong argument count"},
		{name: "size", input: "openapi {\n spec a.yaml\n max_request_body lots\n}", wantErr: `invalid max_request_body "lots"`},
		{name: "interval", input: "openapi {\n spec a.yaml\n check_interval -1s\n}", wantErr: `invalid check_interval "-1s"`},
		{name: "two specs on a line", input: "openapi {\n spec a.yaml b.yaml\n}", wantErr: "wrong argument count"},
		{name: "unknown option", input: "openapi {\n spec a.yaml\n strict\n}", wantErr: "unrecognized subdirective 'strict'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got OpenAPI
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
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestValidate: the JSON config's modes and sizes are checked, each error
// naming the field and the bad value.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		h       OpenAPI
		wantErr string
	}{
		{OpenAPI{Spec: "a.yaml"}, ""},
		{OpenAPI{}, "spec is required"},
		{OpenAPI{Spec: "a.yaml", Request: "strict"}, `invalid request "strict": must be enforce, dry_run or off`},
		{OpenAPI{Spec: "a.yaml", Response: "log"}, `invalid response "log": must be enforce, dry_run or off`},
		{OpenAPI{Spec: "a.yaml", Undeclared: "drop"}, `invalid undeclared "drop": must be pass or reject`},
		{OpenAPI{Spec: "a.yaml", MaxRequestBody: -1}, "invalid max_request_body -1: must be positive"},
		{OpenAPI{Spec: "a.yaml", MaxResponseBody: -1}, "invalid max_response_body -1: must be positive"},
		{OpenAPI{Spec: "a.yaml", CheckInterval: caddy.Duration(-time.Second)}, `invalid check_interval "-1s": must be positive`},
	} {
		err := tc.h.Validate()
		if (err == nil) != (tc.wantErr == "") || err != nil && err.Error() != tc.wantErr {
			t.Errorf("Validate(%+v) = %v, want %q", tc.h, err, tc.wantErr)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/caddyfile/*.caddyfiletest")

// TestCaddyfileAdapt: the Caddyfile -> JSON golden files: every option,
// and the directive's order among the duties.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "caddyfile", "*.caddyfiletest"), *update, goldentest.Options{})
}

func TestDescribeConfig(t *testing.T) {
	for raw, want := range map[string]string{
		`{"handler":"openapi","spec":"/etc/gateway/orders.yaml"}`:                                                                        "orders.yaml, request enforce, response off, undeclared pass",
		`{"handler":"openapi","spec":"api.json","request":"dry_run","response":"enforce","undeclared":"reject","enforce_security":true}`: "api.json, request dry_run, response enforce, undeclared reject, enforce_security",
		`not json`: "",
	} {
		if got := DescribeConfig([]byte(raw)); got != want {
			t.Errorf("DescribeConfig(%s) = %q, want %q", raw, got, want)
		}
	}
}
