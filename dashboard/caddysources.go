package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/gateway/caddydocker"

	"github.com/apigate/gateway/internal/adminaddr"
)

// auditEvents is set by audit.go when the audit module is compiled in.
var auditEvents func(n int) []Event

// adminEndpoint is how to reach Caddy's admin API: the dial network and
// address, and the Host header it accepts.
type adminEndpoint struct {
	network, address, host string
}

// caddySources reads the running Caddy: its config through the admin API
// (Caddy drops the raw JSON of loaded modules, so the admin API is the
// only complete view), its metrics registry, the docker app and the audit
// ring. endpoint returns the admin address for a request.
func caddySources(endpoint func(ctx context.Context) (adminEndpoint, error)) Sources {
	cache := &configCache{}
	return Sources{
		HTTPConfig: func(ctx context.Context) ([]byte, error) {
			ep, err := endpoint(ctx)
			if err != nil {
				return nil, err
			}
			return cache.get(ctx, ep)
		},
		Gatherer: func() prometheus.Gatherer {
			c := caddy.ActiveContext()
			if reg := c.GetMetricsRegistry(); reg != nil {
				return reg
			}
			return nil
		},
		Discovery: func() (caddydocker.Snapshot, bool) { return caddydocker.Current("") },
		Events:    auditEvents,
	}
}

// configCache keeps the config read last, and reads it again only when a
// new config is running (every load, discovery's included, makes a new
// one) or after configCacheMaxAge. So an open page costs no admin request
// while nothing changes.
type configCache struct {
	mu   sync.Mutex
	at   time.Time
	key  adminEndpoint
	cfg  uintptr
	body []byte
}

const configCacheMaxAge = 30 * time.Second

func (c *configCache) get(ctx context.Context, ep adminEndpoint) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := activeConfigID()
	if c.body != nil && c.key == ep && cfg != 0 && c.cfg == cfg && time.Since(c.at) < configCacheMaxAge {
		return c.body, nil
	}
	body, err := fetchHTTPConfig(ctx, ep)
	if err != nil {
		return nil, err
	}
	c.key, c.cfg, c.at, c.body = ep, cfg, time.Now(), body
	return body, nil
}

// activeConfigID identifies the running config: the address of Caddy's
// current *Config (read with reflection; 0 when unknown, which disables
// the cache).
func activeConfigID() (id uintptr) {
	defer func() {
		if recover() != nil {
			id = 0
		}
	}()
	ctx := caddy.ActiveContext()
	cfg := reflect.ValueOf(ctx).FieldByName("cfg")
	if !cfg.IsValid() || cfg.Kind() != reflect.Pointer || cfg.IsNil() {
		return 0
	}
	return cfg.Pointer()
}

func fetchHTTPConfig(ctx context.Context, ep adminEndpoint) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, ep.network, ep.address)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	host := ep.host
	if host == "" {
		host = ep.address
		if ep.network == "unix" {
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
		return nil, fmt.Errorf("reading the config from the admin API at %s: %w", ep.address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the config from the admin API at %s: %w", ep.address, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the config from the admin API at %s: status %d: %s", ep.address, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}

// requestAdminEndpoint is the admin endpoint a request arrived on (for the
// admin module): its local address and its Host header, which the admin
// API already accepted.
func requestAdminEndpoint(r *http.Request) (adminEndpoint, bool) {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return adminEndpoint{}, false
	}
	switch addr.Network() {
	case "unix":
		return adminEndpoint{network: "unix", address: addr.String(), host: "localhost"}, true
	case "tcp":
		return adminEndpoint{network: "tcp", address: addr.String(), host: r.Host}, true
	}
	return adminEndpoint{}, false
}

// configuredAdminEndpoint reads the running config's admin listen address
// (an unexpected layout gives Caddy's default admin address).
func configuredAdminEndpoint() (ep adminEndpoint, err error) {
	listen, disabled := adminaddr.Listen(caddy.ActiveContext())
	if disabled {
		return ep, fmt.Errorf("the admin API is disabled in this config: the dashboard reads routes through it")
	}
	network, address, err := adminaddr.Endpoint(listen)
	if err != nil {
		return ep, err
	}
	if network == "unix" {
		return adminEndpoint{network: network, address: address, host: "localhost"}, nil
	}
	return adminEndpoint{network: network, address: address, host: address}, nil
}
