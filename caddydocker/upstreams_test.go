package caddydocker

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func dials(us []*reverseproxy.Upstream) string {
	var s []string
	for _, u := range us {
		s = append(s, u.Dial)
	}
	return strings.Join(s, " ")
}

// TestUpstreamsRetryElsewhere: the source follows the pool, and a retry
// gets the replicas the request has not failed on (all, once none is left).
func TestUpstreamsRetryElsewhere(t *testing.T) {
	u := &Upstreams{Server: "srv-test", Service: "svc"}
	if err := u.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	repl := caddy.NewReplacer()
	ctx := context.WithValue(context.Background(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)

	if got, _ := u.GetUpstreams(r); len(got) != 0 {
		t.Fatalf("no pool yet: %s", dials(got))
	}
	setPools("srv-test", map[string][]string{"svc": {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}}, nil, nil)
	step := func(failed, want string) {
		t.Helper()
		if failed != "" {
			repl.Set("http.reverse_proxy.upstream.hostport", failed)
			if err := u.ResetCache(r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := u.GetUpstreams(r)
		if err != nil || dials(got) != want {
			t.Fatalf("after %q failed: %q %v, want %q", failed, dials(got), err, want)
		}
	}
	step("", "10.0.0.1:80 10.0.0.2:80 10.0.0.3:80")
	step("10.0.0.2:80", "10.0.0.1:80 10.0.0.3:80")
	step("10.0.0.1:80", "10.0.0.3:80")
	step("10.0.0.3:80", "10.0.0.1:80 10.0.0.2:80 10.0.0.3:80") // none left: all again

	// a new request starts afresh; a pool change shows at once
	r2 := httptest.NewRequest("GET", "/", nil).WithContext(context.WithValue(
		context.WithValue(context.Background(), caddy.ReplacerCtxKey, caddy.NewReplacer()), caddyhttp.VarsCtxKey, map[string]any{}))
	setPools("srv-test", map[string][]string{"svc": {"10.0.0.4:80"}}, nil, nil)
	if got, _ := u.GetUpstreams(r2); dials(got) != "10.0.0.4:80" {
		t.Fatalf("new pool: %s", dials(got))
	}
	// an empty pool keeps the last replicas (the route turns into a 503)
	setPools("srv-test", map[string][]string{"svc": nil}, nil, nil)
	if got, _ := u.GetUpstreams(r2); dials(got) != "10.0.0.4:80" {
		t.Fatalf("emptied pool: %s", dials(got))
	}
	if err := (&Upstreams{Server: "srv-test"}).Provision(caddy.Context{}); err == nil {
		t.Fatal("a source without a service provisioned")
	}
}
