package fastpath

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestReport: adapting a Caddyfile says, per server with the apigate
// wrapper, whether the fast path serves it, with every reason at once (as
// `caddy adapt` and `caddy validate` print the adapter's warnings).
func TestReport(t *testing.T) {
	cfg := `{
	servers :8080 {
		listener_wrappers {
			apigate
		}
	}
	servers :8081 {
		listener_wrappers {
			apigate
		}
		expected_underscore_headers X_A
		expected_dot_headers X.B
	}
}
:8080 {
	handle /a {
		respond "a"
	}
	handle {
		respond "b"
	}
}
:8081 {
	respond "c"
}
:8082 {
	respond "d"
}
`
	_, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range warnings {
		if w.Directive == "apigate" {
			got = append(got, w.Message)
		}
	}
	want := []string{
		"fast path on for server srv0: 2 of 2 routes run on the plan",
		"fast path off for server srv1: expected_underscore_headers; expected_dot_headers",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("adapter warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
