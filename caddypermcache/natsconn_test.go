package caddypermcache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/testkit/natstest"
)

// TestInvalidationOverTLS: a handler whose nats block (as JSON) reaches a
// server that requires TLS and a client certificate subscribes there, and
// an invalidation published on that server drops its decisions.
func TestInvalidationOverTLS(t *testing.T) {
	s := natstest.StartTLS(t)
	var h Handler
	js := fmt.Sprintf(`{"url":"http://perm","invalidate_subject":"perm.tls","nats":{"servers":[%q],"tls":%s}}`, s.URL, s.JSON())
	if err := caddy.StrictUnmarshalJSON([]byte(js), &h); err != nil {
		t.Fatal(err)
	}
	tmpl, _ := ParseKeyTemplate(DefaultKey)
	cache := fillCache(t, tmpl)
	h.tmpl, h.shared, h.logger = tmpl, &shared{cache: cache}, zap.NewNop()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.startInvalidation(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.inv.stop()

	nc, _ := s.Connect(t)
	deadline := time.Now().Add(20 * time.Second)
	for cache.Len() != 0 {
		// published until the handler's subscription (made once its TLS
		// connection is up) gets one
		if err := nc.Publish("perm.tls", []byte(`{"all":true}`)); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the invalidation did not arrive over TLS: %d entries cached", cache.Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
