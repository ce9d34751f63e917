// Package caddyh1 is a reverse_proxy transport for HTTP/1.1 upstreams over
// plain TCP (or Unix sockets): `reverse_proxy ... { transport h1 { ... } }`.
//
// Each request is written and its response read on the goroutine that
// serves it, over a pool of kept-alive connections per upstream; a
// connection has no goroutines of its own and its buffers are reused from
// one request to the next. net/http.Transport, Caddy's `transport http`,
// runs two goroutines per connection and hands every request and response
// between them; on one core that costs more than the proxying itself
// (docs/h1.md has the profiles).
//
// What the transport does not do itself it hands to Caddy's `transport
// http`: requests that ask for a protocol upgrade (WebSocket) and CONNECT.
// HTTPS upstreams are refused when the config is loaded.
package caddyh1

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(Transport{})
}

// clients holds one Client per distinct configuration, so that the
// connection pools outlive config reloads (discovered containers reload
// the config at every change) instead of being dialed again each time.
var clients = caddy.NewUsagePool()

// Transport is the `h1` reverse_proxy transport.
type Transport struct {
	// DialTimeout is how long to wait for a connection to an upstream to
	// open. Default: 3s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// ResponseHeaderTimeout is how long to wait for an upstream's response
	// head once the request is written. Default: no limit (the client's
	// request and Caddy's server timeouts still apply).
	ResponseHeaderTimeout caddy.Duration `json:"response_header_timeout,omitempty"`

	// KeepAlive is how long an idle upstream connection is kept for reuse.
	// Default: 2m.
	KeepAlive caddy.Duration `json:"keepalive,omitempty"`

	// DisableKeepAlive closes every upstream connection after one request
	// (Caddyfile: `keepalive off`).
	DisableKeepAlive bool `json:"disable_keepalive,omitempty"`

	// MaxIdleConnsPerHost is how many idle connections are kept per
	// upstream address. Default: 1024.
	MaxIdleConnsPerHost int `json:"max_idle_conns_per_host,omitempty"`

	// MaxConnsPerHost limits the connections per upstream address, idle and
	// busy; a request beyond it waits for one to be free. Default: no limit.
	MaxConnsPerHost int `json:"max_conns_per_host,omitempty"`

	// ReadBuffer is the size in bytes of each connection's read buffer. A
	// response head larger than it is read in a larger buffer, up to
	// MaxResponseHeaderSize. Default: 4096.
	ReadBuffer int `json:"read_buffer,omitempty"`

	// WriteBuffer is the size in bytes of each connection's write buffer.
	// Default: 4096.
	WriteBuffer int `json:"write_buffer,omitempty"`

	// MaxResponseHeaderSize bounds an upstream's response head (status
	// line and header fields), and separately its trailers, in bytes; a
	// larger one fails the request with 502. Default: 1 MiB.
	MaxResponseHeaderSize int `json:"max_response_header_size,omitempty"`

	client   *Client
	key      string
	fallback *reverseproxy.HTTPTransport
}

// CaddyModule returns the Caddy module information.
func (Transport) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.transport.h1",
		New: func() caddy.Module { return new(Transport) },
	}
}

// Provision sets the defaults and takes the connection pool shared by every
// h1 transport with the same settings.
func (t *Transport) Provision(ctx caddy.Context) error {
	if t.DialTimeout == 0 {
		t.DialTimeout = caddy.Duration(3 * time.Second)
	}
	if t.KeepAlive == 0 {
		t.KeepAlive = caddy.Duration(2 * time.Minute)
	}
	if t.MaxIdleConnsPerHost == 0 {
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if t.ReadBuffer == 0 {
		t.ReadBuffer = DefaultBufferSize
	}
	if t.WriteBuffer == 0 {
		t.WriteBuffer = DefaultBufferSize
	}
	if t.MaxResponseHeaderSize == 0 {
		t.MaxResponseHeaderSize = DefaultMaxResponseHeaderSize
	}
	// (Caddy calls Validate next; the client copes with any value meanwhile)
	key, err := json.Marshal(t)
	if err != nil {
		return err
	}
	t.key = string(key)
	opts := Options{
		DialTimeout:           time.Duration(t.DialTimeout),
		ResponseHeaderTimeout: time.Duration(t.ResponseHeaderTimeout),
		IdleTimeout:           time.Duration(t.KeepAlive),
		MaxIdleConnsPerHost:   t.MaxIdleConnsPerHost,
		MaxConnsPerHost:       t.MaxConnsPerHost,
		ReadBufferSize:        t.ReadBuffer,
		WriteBufferSize:       t.WriteBuffer,
		MaxResponseHeaderSize: t.MaxResponseHeaderSize,
	}
	if t.DisableKeepAlive {
		opts.MaxIdleConnsPerHost = -1
	}
	c, _, err := clients.LoadOrNew(t.key, func() (caddy.Destructor, error) {
		return pooledClient{NewClient(opts)}, nil
	})
	if err != nil {
		return err
	}
	t.client = c.(pooledClient).Client

	// Upgrades (WebSocket) and CONNECT go through Caddy's own transport,
	// with the same dial and keepalive settings.
	enabled := !t.DisableKeepAlive
	t.fallback = &reverseproxy.HTTPTransport{
		DialTimeout:           t.DialTimeout,
		ResponseHeaderTimeout: t.ResponseHeaderTimeout,
		ReadBufferSize:        t.ReadBuffer,
		WriteBufferSize:       t.WriteBuffer,
		MaxResponseHeaderSize: int64(t.MaxResponseHeaderSize),
		KeepAlive: &reverseproxy.KeepAlive{
			Enabled:         &enabled,
			IdleConnTimeout: t.KeepAlive,
		},
	}
	if err := t.fallback.Provision(ctx); err != nil {
		return fmt.Errorf("provisioning the transport for upgrades: %v", err)
	}
	return nil
}

// Validate checks the settings.
func (t *Transport) Validate() error {
	for _, d := range []struct {
		name string
		v    caddy.Duration
	}{
		{"dial_timeout", t.DialTimeout},
		{"response_header_timeout", t.ResponseHeaderTimeout},
		{"keepalive", t.KeepAlive},
	} {
		if d.v < 0 {
			return fmt.Errorf("invalid %s %q: must not be negative", d.name, time.Duration(d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int
		min  int
	}{
		{"max_idle_conns_per_host", t.MaxIdleConnsPerHost, 0},
		{"max_conns_per_host", t.MaxConnsPerHost, 0},
		{"read_buffer", t.ReadBuffer, 0},
		{"write_buffer", t.WriteBuffer, 0},
		{"max_response_header", t.MaxResponseHeaderSize, 0},
	} {
		if n.v < n.min {
			return fmt.Errorf("invalid %s %d: must not be negative", n.name, n.v)
		}
	}
	if t.ReadBuffer > 0 && t.ReadBuffer < 256 {
		return fmt.Errorf("invalid read_buffer %d: must be at least 256 bytes", t.ReadBuffer)
	}
	if t.WriteBuffer > 0 && t.WriteBuffer < 256 {
		return fmt.Errorf("invalid write_buffer %d: must be at least 256 bytes", t.WriteBuffer)
	}
	if t.MaxResponseHeaderSize > 0 && t.ReadBuffer > t.MaxResponseHeaderSize {
		return fmt.Errorf("invalid max_response_header %d: smaller than read_buffer %d", t.MaxResponseHeaderSize, t.ReadBuffer)
	}
	return nil
}

// Cleanup lets go of the shared connection pool; the last user closes it.
func (t *Transport) Cleanup() error {
	var err error
	if t.key != "" {
		_, err = clients.Delete(t.key)
	}
	if t.fallback != nil {
		err = errors.Join(err, t.fallback.Cleanup())
	}
	return err
}

// RoundTrip sends req to the upstream Caddy chose for it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header["Upgrade"] != nil || req.Method == http.MethodConnect {
		o := observerOf(req)
		var start time.Time
		if o != nil {
			start = time.Now()
		}
		res, err := t.fallback.RoundTrip(req)
		observe(o, res, err, start)
		return res, err
	}
	network, addr := "tcp", req.URL.Host
	if di, ok := reverseproxy.GetDialInfo(req.Context()); ok {
		network, addr = di.Network, di.Address
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	if network == "" {
		network = "tcp"
	}
	return t.RoundTripTo(req, network, addr)
}

// RoundTripTo sends req to the upstream at network/addr on the transport's
// pooled connections. It is RoundTrip with the upstream given: the fast
// path (package fastpath), which picks upstreams itself, sends through it,
// so that both paths share one pool and one error mapping. A failure to
// connect is a reverseproxy.DialError, which Caddy may retry on another
// upstream whatever the method.
//
// An AnswerObserver set on the request (Observe) learns the outcome.
func (t *Transport) RoundTripTo(req *http.Request, network, addr string) (*http.Response, error) {
	return t.RoundTripReuse(req, network, addr, nil)
}

// RoundTripReuse is RoundTripTo with the response's storage in ru (see
// Reuse; nil: allocated).
func (t *Transport) RoundTripReuse(req *http.Request, network, addr string, ru *Reuse) (*http.Response, error) {
	o := observerOf(req)
	var start time.Time
	if o != nil {
		start = time.Now()
	}
	res, err := t.client.RoundTripReuse(req, network, addr, ru)
	observe(o, res, err, start)
	if err != nil {
		resets, _ := caddyhttp.GetVar(req.Context(), resetsVar).(int)
		if !RetryOnAnother(req.Method, err, resets) {
			return nil, err
		}
		if errors.As(err, new(*ResetError)) {
			caddyhttp.SetVar(req.Context(), resetsVar, resets+1)
		}
		// Caddy's reverse_proxy sends a request that failed with a
		// DialError to another upstream, whatever its method (within
		// lb_retries / lb_try_duration): it is how a transport outside
		// its package marks a failure as safe to retry elsewhere.
		return nil, reverseproxy.NewDialError(err)
	}
	return res, nil
}

// resetsVar is the request variable counting the moves to another upstream
// after a reset (RetryOnAnother's resetsBefore).
const resetsVar = "gateway.h1_reset_retries"

// Stats returns the counters of the transport's connection pool (shared
// with every h1 transport of the same settings).
func (t *Transport) Stats() Stats { return t.client.Stats() }

type pooledClient struct{ *Client }

func (p pooledClient) Destruct() error {
	p.Close()
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner  = (*Transport)(nil)
	_ caddy.Validator    = (*Transport)(nil)
	_ caddy.CleanerUpper = (*Transport)(nil)
	_ http.RoundTripper  = (*Transport)(nil)
)
