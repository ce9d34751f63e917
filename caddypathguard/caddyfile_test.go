package caddypathguard

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/apigate/gateway/internal/testkit/goldentest"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        PathGuard
		wantErr     string
	}{
		{name: "default", input: "path_guard", want: PathGuard{}},
		{name: "reject", input: "path_guard reject", want: PathGuard{Mode: ModeReject}},
		{name: "normalize", input: "path_guard normalize", want: PathGuard{Mode: ModeNormalize}},
		{name: "options", input: "path_guard normalize {\n keep_encoded_slash\n reject_params\n}",
			want: PathGuard{Mode: ModeNormalize, KeepEncodedSlash: true, RejectParams: true}},
		{name: "block without mode", input: "path_guard {\n keep_encoded_slash\n}", want: PathGuard{KeepEncodedSlash: true}},
		{name: "bad mode", input: "path_guard clean", wantErr: "invalid path_guard mode 'clean': must be reject or normalize"},
		{name: "two modes", input: "path_guard reject normalize", wantErr: "wrong argument count"},
		{name: "option with a value", input: "path_guard {\n keep_encoded_slash true\n}", wantErr: "wrong argument count"},
		{name: "unknown option", input: "path_guard {\n merge_slashes\n}", wantErr: "unrecognized subdirective 'merge_slashes'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got PathGuard
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
			if got.Mode != tc.want.Mode || got.KeepEncodedSlash != tc.want.KeepEncodedSlash || got.RejectParams != tc.want.RejectParams {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for mode, wantErr := range map[string]string{
		"": "", "reject": "", "normalize": "",
		"Reject": `invalid mode "Reject": must be reject or normalize`,
		"off":    `invalid mode "off": must be reject or normalize`,
	} {
		err := (&PathGuard{Mode: mode}).Validate()
		if (err == nil) != (wantErr == "") || err != nil && err.Error() != wantErr {
			t.Errorf("Validate(%q) = %v, want %q", mode, err, wantErr)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt: the Caddyfile -> JSON golden files, among them the
// directive order (after audit and header, before what reads the path).
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{})
}

func TestDescribeConfig(t *testing.T) {
	for raw, want := range map[string]string{
		`{"handler":"path_guard"}`: "reject",
		`{"handler":"path_guard","mode":"normalize","keep_encoded_slash":true,"reject_params":true}`: "normalize, keep_encoded_slash, reject_params",
		`not json`: "",
	} {
		if got := DescribeConfig([]byte(raw)); got != want {
			t.Errorf("DescribeConfig(%s) = %q, want %q", raw, got, want)
		}
	}
}
