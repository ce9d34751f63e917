package caddydocker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// errConflict is returned when the config changed between read and write.
var errConflict = errors.New("config changed concurrently (If-Match failed)")

// AdminClient changes a server's routes through Caddy's admin API.
type AdminClient struct {
	base string
	host string
	hc   *http.Client

	mu       sync.Mutex
	warnings []string // PlacementWarnings of the server's routes at the last apply
}

// PlacementWarnings returns where the server's site policies did not
// cover the discovered routes at the last apply (PlacementWarnings).
func (a *AdminClient) PlacementWarnings() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.warnings
}

// NewAdminClient returns a client for the admin endpoint at network/address,
// as in Caddy's admin "listen" setting: network "tcp" with "host:port", or
// "unix" with a socket path.
func NewAdminClient(network, address string) *AdminClient {
	tr := &http.Transport{
		MaxIdleConns:        2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	a := &AdminClient{hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
	if strings.HasPrefix(network, "unix") {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", address)
		}
		a.base = "http://localhost"
		a.host = ""
	} else {
		a.base = "http://" + address
		a.host = address
	}
	return a
}

// ServerRoutes is the live route list of a server.
type ServerRoutes struct {
	// Routes is the server's route list ("routes" of the server object).
	Routes []json.RawMessage
	// HasRoutes is false when the server object has no "routes" key.
	HasRoutes bool
	// ETag identifies the server object's version, for If-Match.
	ETag string
}

func (a *AdminClient) serverPath(server string) string {
	return "/config/apps/http/servers/" + url.PathEscape(server)
}

func (a *AdminClient) do(ctx context.Context, method, path string, body []byte, ifMatch string, force bool) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if a.host != "" {
		req.Host = a.host
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	if force {
		// reload even when the config is unchanged
		req.Header.Set("Cache-Control", "must-revalidate")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp, b, err
}

// GetRoutes reads a server's routes with the ETag of the server object.
func (a *AdminClient) GetRoutes(ctx context.Context, server string) (ServerRoutes, error) {
	var sr ServerRoutes
	resp, body, err := a.do(ctx, http.MethodGet, a.serverPath(server), nil, "", false)
	if err != nil {
		return sr, fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return sr, fmt.Errorf("admin API: reading server %q: %s: %s", server, resp.Status, strings.TrimSpace(string(body)))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return sr, fmt.Errorf("admin API: http server %q not found in the running config", server)
	}
	sr.ETag = resp.Header.Get("Etag")
	if raw, ok := obj["routes"]; ok && string(raw) != "null" {
		sr.HasRoutes = true
		if err := json.Unmarshal(raw, &sr.Routes); err != nil {
			return sr, fmt.Errorf("admin API: routes of server %q: %w", server, err)
		}
	}
	return sr, nil
}

// SetRoutes replaces a server's routes if the server object still has the
// ETag etag; it returns errConflict otherwise. force reloads the config
// even when the routes are the same (the docker_routes handlers then load
// the docker app's current route set). It returns once Caddy has loaded
// the new config.
func (a *AdminClient) SetRoutes(ctx context.Context, server string, routes []json.RawMessage, hadRoutes bool, etag string, force bool) error {
	body, err := json.Marshal(routes)
	if err != nil {
		return err
	}
	method := http.MethodPatch
	if !hadRoutes {
		method = http.MethodPut
	}
	resp, rb, err := a.do(ctx, method, a.serverPath(server)+"/routes", body, etag, force)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusPreconditionFailed:
		return errConflict
	default:
		return fmt.Errorf("admin API: %s %s/routes: %s: %s", method, a.serverPath(server), resp.Status, strings.TrimSpace(string(rb)))
	}
}

// ApplyRoutes makes the server's running config run routes in its
// docker_routes handlers. The routes are not written into the config:
// the handlers load the docker app's current route set (which the watcher
// set to routes before calling) at every config load. So it reloads the
// config: with the handlers added where the server lacks them
// (EnsureHandlers), else as it is (a forced reload). It changes nothing
// (and causes no reload) when the running config has the handlers and
// already runs routes; changed reports whether it reloaded. A concurrent
// config change is retried a few times.
func (a *AdminClient) ApplyRoutes(ctx context.Context, server string, routes []json.RawMessage) (changed bool, err error) {
	want := HashRoutes(routes)
	for attempt := 0; attempt < 5; attempt++ {
		sr, err := a.GetRoutes(ctx, server)
		if err != nil {
			return false, err
		}
		merged := EnsureHandlers(server, sr.Routes)
		a.mu.Lock()
		a.warnings = PlacementWarnings(server, merged)
		a.mu.Unlock()
		same := SameRoutes(sr.Routes, merged)
		if same {
			if st, ok := servedOf(server); ok && st.set.known && st.set.hash == want && st.handlers > 0 && st.catchAll {
				return false, nil
			}
		}
		err = a.SetRoutes(ctx, server, merged, sr.HasRoutes, sr.ETag, same)
		if errors.Is(err, errConflict) {
			continue
		}
		return err == nil, err
	}
	return false, errConflict
}
