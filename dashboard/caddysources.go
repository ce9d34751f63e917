package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/caddyoidc"
	"github.com/apigate/gateway/caddyopenapi"
	"github.com/apigate/gateway/caddyquota"
	"github.com/apigate/gateway/fastpath"

	"github.com/apigate/gateway/internal/adminaddr"
)

// caddySources reads the running Caddy: its config through the admin API
// (Caddy drops the raw JSON of loaded modules, so the admin API is the
// only complete view of the routes), and the typed snapshots the modules
// export: counters, the docker app's containers, the audit ring. endpoint
// returns the admin address for a request.
func caddySources(endpoint func(ctx context.Context) (adminaddr.Endpoint, error)) Sources {
	cache := &configCache{}
	return Sources{
		HTTPConfig: func(ctx context.Context) ([]byte, error) {
			ep, err := endpoint(ctx)
			if err != nil {
				return nil, err
			}
			return cache.get(ctx, ep)
		},
		Counters:  ReadCounters,
		Discovery: func() (caddydocker.Snapshot, bool) { return caddydocker.Current("") },
		DiscoveredRoutes: func(server string) []json.RawMessage {
			routes, _ := caddydocker.ServedRoutes(server)
			return routes
		},
		FastPath: fastpath.Status,
		Quota:    caddyquota.ReadStats,
		Events:   caddyaudit.Recent,
		OpenAPI:  caddyopenapi.Snapshot,
		Sessions: caddyoidc.ReadStats,
	}
}

// configCache keeps the config read last, and reads it again only when a
// new config is running (every load, discovery's included, makes a new
// one) or after configCacheMaxAge. So an open page costs no admin request
// while nothing changes.
type configCache struct {
	mu   sync.Mutex
	at   time.Time
	key  adminaddr.Endpoint
	cfg  context.Context // the running config's context: a new one at every load
	body []byte
}

const configCacheMaxAge = 30 * time.Second

func (c *configCache) get(ctx context.Context, ep adminaddr.Endpoint) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := caddy.ActiveContext().Context
	if c.body != nil && c.key == ep && cfg != nil && c.cfg == cfg && time.Since(c.at) < configCacheMaxAge {
		return c.body, nil
	}
	body, err := fetchHTTPConfig(ctx, ep)
	if err != nil {
		return nil, err
	}
	c.key, c.cfg, c.at, c.body = ep, cfg, time.Now(), body
	return body, nil
}

func fetchHTTPConfig(ctx context.Context, ep adminaddr.Endpoint) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, ep.Network, ep.Address)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	host := ep.Host
	if host == "" {
		host = ep.Address
		if ep.Network == "unix" {
			host = "localhost"
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/config/apps/http", nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the config from the admin API at %s: %w", ep.Address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the config from the admin API at %s: %w", ep.Address, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the config from the admin API at %s: status %d: %s", ep.Address, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// requestAdminEndpoint is the admin endpoint a request arrived on (for the
// admin module): its local address and its Host header, which the admin
// API already accepted.
func requestAdminEndpoint(r *http.Request) (adminaddr.Endpoint, bool) {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return adminaddr.Endpoint{}, false
	}
	switch addr.Network() {
	case "unix":
		return adminaddr.Endpoint{Network: "unix", Address: addr.String(), Host: "localhost"}, true
	case "tcp":
		return adminaddr.Endpoint{Network: "tcp", Address: addr.String(), Host: r.Host}, true
	}
	return adminaddr.Endpoint{}, false
}
