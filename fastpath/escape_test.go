package fastpath

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() { caddy.RegisterModule(lateCtx{}) }

// lateCtx is a reverse_proxy transport that answers 200 itself and keeps
// each request's context, as net/http's background dial does, to be read
// after the request ended.
type lateCtx struct{}

var lateCtxs struct {
	sync.Mutex
	ctxs []context.Context
}

func (lateCtx) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.reverse_proxy.transport.test_latectx", New: func() caddy.Module { return new(lateCtx) }}
}

func (*lateCtx) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

func (*lateCtx) RoundTrip(r *http.Request) (*http.Response, error) {
	lateCtxs.Lock()
	lateCtxs.ctxs = append(lateCtxs.ctxs, r.Context())
	lateCtxs.Unlock()
	return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// TestEscapedContext: a request's context handed to a transport other
// than h1 still answers that request's vars, and a replacer of its own,
// once the connection has served other requests (net/http dials in the background
// with it, and Caddy's dial reads the vars when it runs), on the fast
// path as on Caddy's.
func TestEscapedContext(t *testing.T) {
	loadTwin(t, "", `	vars path {http.request.uri.path}
	reverse_proxy 127.0.0.1:9 {
		transport test_latectx
	}`)
	for _, port := range []int{plainPort, fastPort} {
		lateCtxs.Lock()
		lateCtxs.ctxs = nil
		lateCtxs.Unlock()
		client := &http.Client{} // (one kept-alive connection)
		const n = 8
		for i := range n {
			res, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/r%d", port, i))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		lateCtxs.Lock()
		ctxs := lateCtxs.ctxs
		lateCtxs.Unlock()
		if len(ctxs) != n {
			t.Fatalf("port %d: the transport saw %d requests, want %d", port, len(ctxs), n)
		}
		var last *caddy.Replacer
		for i, ctx := range ctxs {
			want := fmt.Sprintf("/r%d", i)
			if got := caddyhttp.GetVar(ctx, "path"); got != want {
				t.Errorf("port %d: request %d's context, read after %d more requests: var path %v, want %s", port, i, n-1-i, got, want)
			}
			// its own replacer, not one the exchange resets for the next
			// request under the reader (its {http.request.*} placeholders
			// read the exchange's request: docs/fastpath.md)
			repl, _ := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if repl == nil || repl == last {
				t.Errorf("port %d: request %d's context has the replacer %p, the request before it %p", port, i, repl, last)
			}
			last = repl
		}
	}
}
