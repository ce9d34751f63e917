package caddyfileerr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/internal/caddyfileerr"
)

// TestAdapterWrapped fails when the pinned Caddy changes the adapter
// table this package reads (caddyconfig's configAdapters): the
// registered "caddyfile" adapter must be the wrapper.
func TestAdapterWrapped(t *testing.T) {
	if _, ok := caddyconfig.GetAdapter("caddyfile").(caddyfileerr.Adapter); !ok {
		t.Fatalf("the caddyfile adapter is %T, not caddyfileerr.Adapter: has Caddy's adapter table changed?", caddyconfig.GetAdapter("caddyfile"))
	}
}

// TestErrorsNameTheBadLineOnce adapts Caddyfiles with a bad token nested
// in blocks: the error names the bad token's line, once, and never the
// closing brace of a block around it.
func TestErrorsNameTheBadLineOnce(t *testing.T) {
	tests := []struct {
		name, caddyfile, want string
	}{
		{"jwt_auth in handle", ":8080 {\n\thandle /api/* {\n\t\tjwt_auth {\n\t\t\tbogus x\n\t\t}\n\t\trespond ok\n\t}\n}\n",
			"unrecognized subdirective 'bogus', at Caddyfile:4"},
		{"reverse_proxy in route in handle", ":8080 {\n\thandle {\n\t\troute {\n\t\t\treverse_proxy 127.0.0.1:1 {\n\t\t\t\tbogus 1\n\t\t\t}\n\t\t}\n\t}\n}\n",
			"unrecognized subdirective bogus, at Caddyfile:5"},
		{"at the top of a site, one position already", ":8080 {\n\tjwt_auth {\n\t\tbogus x\n\t}\n}\n",
			"unrecognized subdirective 'bogus', at Caddyfile:3"},
		{"through an import", "(auth) {\n\tjwt_auth {\n\t\tbogus x\n\t}\n}\n:8080 {\n\thandle {\n\t\timport auth\n\t\trespond ok\n\t}\n}\n",
			"unrecognized subdirective 'bogus', at Caddyfile:3 import chain ['Caddyfile:8 (import auth)']"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tc.caddyfile), map[string]any{"filename": "Caddyfile"})
			if err == nil {
				t.Fatal("adapted")
			}
			msg := err.Error()
			if !strings.HasSuffix(msg, tc.want) || strings.Count(msg, ", at ") != 1 {
				t.Fatalf("error %q, want one position: ...%s", msg, tc.want)
			}
		})
	}
}

func TestOnePosition(t *testing.T) {
	inner := errors.New("bad, at Caddyfile:38")
	err := caddyfileerr.OnePosition(errors.Join(inner))
	if err.Error() != "bad, at Caddyfile:38" {
		t.Fatalf("%q", err)
	}
	wrapped := caddyfileerr.OnePosition(&wrapErr{msg: "x: bad, at /etc/caddy/Caddyfile:38, at /etc/caddy/Caddyfile:50, at /etc/caddy/Caddyfile:61", err: inner})
	if wrapped.Error() != "x: bad, at /etc/caddy/Caddyfile:38" || !errors.Is(wrapped, inner) {
		t.Fatalf("%q (errors.Is the original: %v)", wrapped, errors.Is(wrapped, inner))
	}
}

type wrapErr struct {
	msg string
	err error
}

func (e *wrapErr) Error() string { return e.msg }
func (e *wrapErr) Unwrap() error { return e.err }
