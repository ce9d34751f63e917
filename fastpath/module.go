// Package fastpath is the gateway's fast path: the listener wrapper
// caddy.listeners.apigate, which serves a server's HTTP/1.1 and HTTP/2
// requests on lean engines of its own (h2.go), running the server's routes
// compiled into a plan of the same provisioned module instances (any
// handler and matcher module, access logs and trusted proxies included),
// serves the requests the plan does not take through Caddy's server
// handler on the same connection, and hands every connection whose
// protocol changes (upgrades, CONNECT) to Caddy's server unchanged. A server with an option the plan does not
// honour stays wholly on Caddy's path. See docs/fastpath.md.
package fastpath

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/metrics"
)

func init() {
	caddy.RegisterModule(ListenerWrapper{})
}

// ListenerWrapper is the apigate listener wrapper. It has no options: a
// server whose routes the plan can run is served by it, any other stays on
// Caddy's path, and the config load logs which (`fast path on` at info,
// `fast path off` at warn with the reason).
type ListenerWrapper struct {
	ctx    caddy.Context
	srv    *caddyhttp.Server
	logger *zap.Logger

	once   *sync.Once // compile once for all the server's listeners
	stats  *serverStats
	plan   *plan
	reason string
}

// CaddyModule returns the Caddy module information.
func (ListenerWrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.listeners.apigate",
		New: func() caddy.Module { return new(ListenerWrapper) },
	}
}

// Provision finds the server the wrapper belongs to; its routes are
// compiled when the server starts listening (they are provisioned after
// the listener wrappers).
func (lw *ListenerWrapper) Provision(ctx caddy.Context) error {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return errNotInServer
	}
	lw.ctx, lw.srv = ctx, srv
	lw.once = new(sync.Once)
	lw.stats = new(serverStats)
	lw.logger = ctx.Logger()
	if err := metrics.Register(ctx.GetMetricsRegistry(), requestsTotal, delegatedTotal, onGauge); err != nil {
		return err
	}
	// The decision is the server's options' alone (serverReasons), so it
	// is logged here, once per load, and by `caddy validate` too, which
	// provisions but never listens.
	name := srv.Name()
	if r := serverReasons(srv); len(r) > 0 {
		lw.reason = strings.Join(r, "; ")
		lw.logger.Warn("fast path off", zap.String("server", name), zap.String("reason", lw.reason), zap.Strings("reasons", r))
		return nil
	}
	lw.logger.Info("fast path on", zap.String("server", name), zap.Int("routes", len(srv.Routes)), zap.String("lanes", lanesLog()))
	// (the status is set when the server listens: a config that fails to
	// load must not replace the running one's)
	return nil
}

var errNotInServer = caddyError("apigate is a listener wrapper of an HTTP server (servers { listener_wrappers { apigate } })")

type caddyError string

func (e caddyError) Error() string { return string(e) }

// requestsTotal counts the requests the plan served, per server.
var requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "gateway",
	Subsystem: "fastpath",
	Name:      "requests_total",
	Help:      "Requests the fast path (caddy.listeners.apigate) served, per server.",
}, []string{"server"})

// delegatedTotal counts the requests the fast path's connections served
// through Caddy's server handler, per server and reason.
var delegatedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "gateway",
	Subsystem: "fastpath",
	Name:      "delegated_total",
	Help:      "Requests the fast path's connections served through Caddy's handler chain, per server and reason.",
}, []string{"server", "reason"})

// onGauge is 1 for a server of the running config the fast path serves, 0
// for one with the apigate wrapper that stays on Caddy's path.
var onGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: "gateway",
	Subsystem: "fastpath",
	Name:      "on",
	Help:      "1 when the fast path (caddy.listeners.apigate) serves the server, 0 when it stays on Caddy's path.",
}, []string{"server"})

// WrapListener compiles the server's plan (once per config) and wraps ln
// when the plan runs; otherwise ln is Caddy's as it is.
func (lw *ListenerWrapper) WrapListener(ln net.Listener) net.Listener {
	lw.once.Do(lw.compile)
	if lw.plan == nil {
		return ln
	}
	s := lw.settings(ln)
	return newListener(ln, lw.plan, s, lw.stats, lw.logger, requestsTotal.WithLabelValues(lw.plan.name))
}

func (lw *ListenerWrapper) compile() {
	name := lw.srv.Name()
	if lw.reason != "" {
		lw.setStatus(name, false, lw.reason, nil) // (logged at provisioning)
		return
	}
	var app *caddyhttp.App
	if a, err := lw.ctx.App("http"); err == nil {
		app, _ = a.(*caddyhttp.App)
	}
	p, reason := compileServer(lw.ctx, lw.srv, app, lw.logger)
	if reason != "" {
		lw.reason = reason
		lw.logger.Warn("fast path off", zap.String("server", name), zap.String("reason", reason))
		lw.setStatus(name, false, reason, nil)
		return
	}
	lw.plan = p
	lw.setStatus(name, true, "", describeRoutes(p.routes))
}

func (lw *ListenerWrapper) settings(ln net.Listener) settings {
	srv := lw.srv
	s := settings{
		maxHeaderBytes:    srv.MaxHeaderBytes,
		readTimeout:       time.Duration(srv.ReadTimeout),
		readHeaderTimeout: time.Duration(srv.ReadHeaderTimeout),
		writeTimeout:      time.Duration(srv.WriteTimeout),
		idleTimeout:       time.Duration(srv.IdleTimeout),
		readIdleTimeout:   time.Duration(srv.ReadIdleTimeout),
		writeIdleTimeout:  time.Duration(srv.WriteIdleTimeout),
		maxWriteChunk:     srv.MaxWriteChunk,
	}
	if a, err := lw.ctx.App("http"); err == nil {
		s.gracePeriod = time.Duration(a.(*caddyhttp.App).GracePeriod)
	}
	s.h2, s.h2c = h2Protocols(srv)
	if s.maxHeaderBytes <= 0 {
		s.maxHeaderBytes = 16 << 10
	}
	// net/http's tlsHandshakeTimeout: the smallest of the set timeouts
	for _, d := range []time.Duration{s.readHeaderTimeout, s.readTimeout, s.writeTimeout} {
		if d > 0 && (s.tlsHandshakeTimeout == 0 || d < s.tlsHandshakeTimeout) {
			s.tlsHandshakeTimeout = d
		}
	}
	if len(srv.TLSConnPolicies) > 0 {
		s.useTLS = true
		if _, port, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			httpPort := caddyhttp.DefaultHTTPPort
			if a, err := lw.ctx.App("http"); err == nil {
				if hp := a.(*caddyhttp.App).HTTPPort; hp != 0 {
					httpPort = hp
				}
			}
			if port == strconv.Itoa(httpPort) {
				s.useTLS = false
			}
		}
	}
	return s
}

// h2Protocols says whether the server takes HTTP/2 over TLS (h2) and
// cleartext HTTP/2 with prior knowledge (h2c), as Caddy's server does from
// its protocols (h1, h2 and h3 when unset); with per-listener protocols,
// only what every listener of the server takes.
func h2Protocols(srv *caddyhttp.Server) (h2, h2c bool) {
	protos := srv.Protocols
	if len(protos) == 0 {
		protos = []string{"h1", "h2", "h3"}
	}
	h2, h2c = slices.Contains(protos, "h2"), slices.Contains(protos, "h2c")
	for _, lp := range srv.ListenProtocols {
		if lp != nil {
			h2 = h2 && slices.Contains(lp, "h2")
			h2c = h2c && slices.Contains(lp, "h2c")
		}
	}
	return h2, h2c
}

// UnmarshalCaddyfile sets up the wrapper from Caddyfile tokens:
//
//	listener_wrappers {
//		apigate
//	}
func (lw *ListenerWrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the wrapper's name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("unrecognized apigate option '%s' (apigate has none)", d.Val())
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*ListenerWrapper)(nil)
	_ caddy.CleanerUpper    = (*ListenerWrapper)(nil)
	_ caddy.ListenerWrapper = (*ListenerWrapper)(nil)
	_ caddyfile.Unmarshaler = (*ListenerWrapper)(nil)
)
