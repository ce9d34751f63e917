package dashboard

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/goldentest"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt adapts each testdata/*.caddyfiletest Caddyfile and
// compares the JSON with the part after the separator line. Run with
// -update to rewrite the expected JSON after a deliberate change.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{})
}

func TestUnmarshalCaddyfile(t *testing.T) {
	tests := []struct {
		name, input string
		want        Handler
		err         string
	}{
		{"bare", "gateway_dashboard", Handler{}, ""},
		{"path and refresh", "gateway_dashboard {\n path /ops\n refresh 2s\n}", Handler{Path: "/ops", Refresh: 2e9}, ""},
		{"positional path", "gateway_dashboard /ops", Handler{}, "set the URL prefix with the path subdirective"},
		{"unknown", "gateway_dashboard {\n color red\n}", Handler{}, "unrecognized subdirective 'color'"},
		{"refresh too fast", "gateway_dashboard {\n refresh 10ms\n}", Handler{}, "must be at least 100ms"},
		{"refresh not a duration", "gateway_dashboard {\n refresh soon\n}", Handler{}, `invalid refresh "soon"`},
		{"path without value", "gateway_dashboard {\n path\n}", Handler{}, "wrong argument count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || h.Path != tc.want.Path || h.Refresh != tc.want.Refresh {
				t.Fatalf("got %+v, %v", h, err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		h   Handler
		err string
	}{
		{Handler{Path: "/"}, ""},
		{Handler{Path: "ops"}, `invalid path "ops": must start with /`},
		{Handler{Path: "/ops/*"}, "without wildcards"},
		{Handler{Path: "/", Refresh: 5e6}, "at least 100ms"},
	} {
		err := tc.h.Validate()
		if (tc.err == "" && err != nil) || (tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err))) {
			t.Errorf("%+v: err = %v, want %q", tc.h, err, tc.err)
		}
	}
}
