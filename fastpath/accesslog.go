package fastpath

import (
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// accessLog is a server's access logging (`log`) on the plan, as Caddy's
// Server.ServeHTTP and logRequest do it: the same loggers (the http app's,
// so that custom logs, their outputs, filters and sampling apply), the
// same per-host logger names, skip_hosts and skip_unmapped_hosts, the same
// record (message, level, fields and their values), log_skip, log_name
// and log_level, and log_append's extra fields.
type accessLog struct {
	cfg   *caddyhttp.ServerLogConfig
	base  *zap.Logger            // http.log.access
	named map[string]*zap.Logger // http.log.access.<name>, for the names the config has
}

func newAccessLog(cfg *caddyhttp.ServerLogConfig, httpLogger *zap.Logger) *accessLog {
	a := &accessLog{cfg: cfg, base: httpLogger.Named("log.access"), named: map[string]*zap.Logger{}}
	add := func(name string) {
		if _, ok := a.named[name]; !ok && name != "" {
			a.named[name] = a.base.Named(name)
		}
	}
	add(cfg.DefaultLoggerName)
	for _, names := range cfg.LoggerNames {
		for _, n := range names {
			add(n)
		}
	}
	return a
}

// shouldLog is Server.shouldLogRequest: whether a request to host is
// logged at all.
func (a *accessLog) shouldLog(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	for name := range a.cfg.LoggerNames {
		if certmagic.MatchWildcard(host, name) {
			return true
		}
	}
	for _, skip := range a.cfg.SkipHosts {
		if certmagic.MatchWildcard(host, skip) {
			return false
		}
	}
	return !a.cfg.SkipUnmappedHosts
}

// loggers is ServerLogConfig.wrapLogger for base (the access or the error
// logger): the request's log_name, else the names its host maps to, else
// the default name. dst is scratch space.
func (a *accessLog) loggers(dst []*zap.Logger, base *zap.Logger, vars map[string]any, host string) []*zap.Logger {
	named := func(name string) *zap.Logger {
		if name == "" {
			return base
		}
		if base == a.base {
			if l, ok := a.named[name]; ok {
				return l
			}
		}
		return base.Named(name)
	}
	if names, ok := vars[caddyhttp.AccessLoggerNameVarKey].([]any); ok {
		for _, n := range names {
			s, _ := n.(string)
			dst = append(dst, named(s))
		}
		return dst
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	for _, n := range a.hostNames(host) {
		dst = append(dst, named(n))
	}
	return dst
}

// hostNames is ServerLogConfig.getLoggerHosts.
func (a *accessLog) hostNames(host string) []string {
	cfg := a.cfg
	if len(cfg.LoggerNames) > 0 {
		host = strings.ToLower(host)
		if names, ok := cfg.LoggerNames[host]; ok {
			return names
		}
		labels := strings.Split(host, ".")
		for i := range labels {
			if labels[i] == "" {
				continue
			}
			labels[i] = "*"
			if names, ok := cfg.LoggerNames[strings.Join(labels, ".")]; ok {
				return names
			}
		}
	}
	return []string{cfg.DefaultLoggerName}
}

// logAccess writes the request's access log records (Server.logRequest).
func (ex *exchange) logAccess(duration time.Duration, writeErr error) {
	a := ex.plan.access
	if skip, ok := ex.vars[caddyhttp.LogSkipVar].(bool); ok && skip {
		return
	}
	status, size64 := ex.writer().logged()
	size := int(size64)
	if ex.repl != nil {
		ex.repl.Set("http.response.status", status)
		ex.repl.Set("http.response.size", size)
		ex.repl.Set("http.response.duration", duration)
		ex.repl.Set("http.response.duration_ms", duration.Seconds()*1e3)
	}
	msg := "handled request"
	if nop, ok := ex.vars["unhandled"].(bool); ok && nop {
		msg = "NOP"
	}
	lvl := zapcore.InfoLevel
	if status >= 500 {
		lvl = zapcore.ErrorLevel
	}
	if name, ok := ex.vars[caddyhttp.LogLevelVar].(string); ok {
		if l, err := zapcore.ParseLevel(name); err == nil && l >= zapcore.DebugLevel && l <= zapcore.ErrorLevel {
			lvl = l
		}
	}
	ex.logScratch = a.loggers(ex.logScratch[:0], a.base, ex.vars, ex.st.head.host)
	var fields []zap.Field
	for _, l := range ex.logScratch {
		ce := l.Check(lvl, msg)
		if ce == nil {
			continue
		}
		if fields == nil {
			fields = ex.accessFields(duration, status, size, writeErr)
		}
		ce.Write(fields...)
	}
	clear(ex.logScratch)
}

// accessFields are logRequest's fields, after the request (which Caddy
// adds to the logger with WithLazy: the same place in the record).
func (ex *exchange) accessFields(duration time.Duration, status, size int, writeErr error) []zap.Field {
	userID := ""
	if ex.repl != nil {
		userID, _ = ex.repl.GetString("http.auth.user.id")
	}
	creds := ex.plan.access.cfg.ShouldLogCredentials
	f := append(ex.fieldScratch[:0],
		zap.Object("request", (*loggedRequest)(ex)),
		zap.Int("bytes_read", int(ex.bodyRead())),
		zap.String("user_id", userID),
		zap.Duration("duration", duration),
		zap.Int("size", size),
		zap.Int("status", status),
		zap.Object("resp_headers", caddyhttp.LoggableHTTPHeader{Header: ex.writer().handlerHdr(), ShouldLogCredentials: creds}),
	)
	if writeErr != nil {
		f = append(f, zap.NamedError("write_error", writeErr))
	}
	if ex.extra != nil {
		f = append(f, extraLogFields(ex.extra)...)
	}
	ex.fieldScratch = f
	return f
}

// loggedRequest is the request as Caddy's logs show it: the request as it
// came in (Caddy logs a clone made before any handler ran, with every
// header field the client sent), the client's address as the request ends.
type loggedRequest exchange

// MarshalLogObject is caddyhttp.LoggableHTTPRequest's, for the request
// the exchange's head holds.
func (lr *loggedRequest) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	ex := (*exchange)(lr)
	r := &ex.logReq
	if r.Header == nil {
		ex.fillLogReq()
	}
	creds := ex.plan.access != nil && ex.plan.access.cfg.ShouldLogCredentials
	return caddyhttp.LoggableHTTPRequest{Request: r, ShouldLogCredentials: creds}.MarshalLogObject(enc)
}

// fillLogReq makes the logged request from the head: net/http's request
// before Caddy's server dropped any field (names with "_" or "." included).
func (ex *exchange) fillLogReq() {
	h := &ex.st.head
	c := ex.st.c
	hdr := ex.logHdr
	if hdr == nil {
		hdr = make(http.Header, len(h.fields))
		ex.logHdr = hdr
	}
	ex.logVals = h.fillHeader(hdr, ex.logVals, false)
	r := &ex.logReq
	*r = ex.tmpl // (its context: the request's)
	r.Method, r.Proto, r.Host, r.RequestURI = h.method, h.proto, h.host, h.target
	r.ProtoMajor, r.ProtoMinor = h.protoVersion()
	r.RemoteAddr, r.Header, r.TLS = c.remoteAddr, hdr, c.tlsState
	if ex.st.h2 != nil {
		r.TLS = ex.st.h2.tls
		r.ContentLength = ex.st.h2.declLen
	}
	if h.chunked {
		r.TransferEncoding = chunkedEncoding
	}
}

// traceStep is Caddy's Server.logTrace (the `trace` server option): each
// handler invoked, at debug level.
func (p *plan) traceStep(s step) {
	if ce := p.trace.Check(zapcore.DebugLevel, caddy.GetModuleName(s.module())); ce != nil {
		ce.Write(zap.Any("module", s.module()))
	}
}
