package caddypermcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"

	"github.com/apigate/gateway/internal/metrics"
)

// Invalidation (fleet): with invalidate_subject set, every replica
// subscribes to that NATS subject and drops the decisions each message
// names. A message is one JSON object with exactly one of these fields:
//
//	{"subject": "alice"}                        every decision fetched for identity subject alice
//	{"prefix": ["alice", "GET"]}                every key whose leading placeholder values are these
//	                                            (in key template order; the default template is
//	                                            {http.auth.user.id} {http.request.method} {http.request.uri.path})
//	{"key": ["alice", "GET", "/orders/1"]}      one key: every placeholder value of the template
//	{"all": true}                               every decision
//
// Core NATS delivers a message to every subscriber that is connected; a
// replica that was disconnected may have missed some, so it empties its
// cache when it reconnects.

// InvalidateMessage is the JSON body of an invalidation message.
type InvalidateMessage struct {
	Subject *string  `json:"subject,omitempty"`
	Prefix  []string `json:"prefix,omitempty"`
	Key     []string `json:"key,omitempty"`
	All     bool     `json:"all,omitempty"`
}

// maxInvalidateMessage bounds what is parsed (the subject is untrusted
// input: anyone allowed to publish on it).
const maxInvalidateMessage = 64 << 10

// ParseInvalidateMessage parses and checks one message.
func ParseInvalidateMessage(data []byte) (InvalidateMessage, string, error) {
	var m InvalidateMessage
	if len(data) > maxInvalidateMessage {
		return m, "", fmt.Errorf("message of %d bytes: more than %d", len(data), maxInvalidateMessage)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, "", fmt.Errorf("invalid JSON: %v", err)
	}
	if dec.More() {
		return m, "", errors.New("invalid JSON: more than one value")
	}
	kind, n := "", 0
	if m.Subject != nil {
		kind, n = "subject", n+1
	}
	if m.Prefix != nil {
		kind, n = "prefix", n+1
	}
	if m.Key != nil {
		kind, n = "key", n+1
	}
	if m.All {
		kind, n = "all", n+1
	}
	if n != 1 {
		return m, "", errors.New(`want exactly one of "subject", "prefix", "key", "all"`)
	}
	if kind == "prefix" && len(m.Prefix) == 0 {
		return m, "", errors.New(`empty "prefix": use {"all":true} to drop every decision`)
	}
	return m, kind, nil
}

// apply drops the decisions m names and returns how many.
func (m InvalidateMessage) apply(c *Cache, t *KeyTemplate) (int, error) {
	switch {
	case m.Subject != nil:
		return c.InvalidateSubject(*m.Subject), nil
	case m.All:
		return c.Purge(), nil
	case m.Key != nil:
		if len(m.Key) != len(t.Placeholders()) {
			return 0, fmt.Errorf(`"key" has %d values; the key template has %d placeholders`, len(m.Key), len(t.Placeholders()))
		}
		return c.InvalidateKey(t.Render(m.Key...)), nil
	default:
		if len(m.Prefix) > len(t.Placeholders()) {
			return 0, fmt.Errorf(`"prefix" has %d values; the key template has %d placeholders`, len(m.Prefix), len(t.Placeholders()))
		}
		return c.InvalidatePrefix(t.Prefix(m.Prefix...)), nil
	}
}

var (
	invalidationsVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "invalidations_total",
		Help: "Invalidation messages received over NATS, by kind (subject, prefix, key, all, reconnect, invalid).",
	}, []string{"route", "kind"})
	invalidatedVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gateway", Subsystem: "permission", Name: "invalidated_decisions_total",
		Help: "Cached decisions dropped by invalidation messages (and by the purge after a NATS reconnect).",
	}, []string{"route"})
)

func registerInvalidationMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	return metrics.Register(reg, invalidationsVec, invalidatedVec)
}

// invalidation is one handler's subscription.
type invalidation struct {
	sub       *nats.Subscription
	removeRec func()
	release   func()
}

func (inv *invalidation) stop() {
	if inv == nil {
		return
	}
	_ = inv.sub.Unsubscribe()
	inv.removeRec()
	inv.release()
}

// natsConfig is the handler's connection block with the older spellings
// (nats_servers, nats_creds_file) merged in.
func (h *Handler) natsConfig() natsconn.Config {
	var c natsconn.Config
	if h.NATS != nil {
		c = *h.NATS
	}
	c.AddServers(h.NATSServers...)
	if h.NATSCredsFile != "" && c.CredsFile == "" {
		c.CredsFile = h.NATSCredsFile // an alias of creds, checked against it
	}
	return c
}

// natsOptions are the connection options for invalidation: the handler's
// own servers, else those of this config's `storage nats` global option
// (storage looks it up).
func (h *Handler) natsOptions(storage func() natsconn.OptionsProvider) (natsconn.Options, error) {
	o, err := h.natsConfig().Resolve(nil, storage)
	if err != nil {
		return o, fmt.Errorf("invalidate_subject: nats: %w", err)
	}
	return o, nil
}

// startInvalidation subscribes to InvalidateSubject (if set).
func (h *Handler) startInvalidation(ctx caddy.Context) error {
	if h.InvalidateSubject == "" {
		return nil
	}
	if err := registerInvalidationMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	if err := natsconn.RegisterMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	opts, err := h.natsOptions(natsconn.ConfigStorage(ctx))
	if err != nil {
		return err
	}
	conn, release, err := natsconn.Get(opts)
	if err != nil {
		return fmt.Errorf("invalidate_subject: %w", err)
	}
	cache, tmpl, logger, route := h.shared.cache, h.tmpl, h.logger, h.Route
	dropped := invalidatedVec.WithLabelValues(route)
	sub, err := conn.NATS().Subscribe(h.InvalidateSubject, func(msg *nats.Msg) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("panic handling an invalidation", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			}
		}()
		m, kind, err := ParseInvalidateMessage(msg.Data)
		if err == nil {
			var n int
			if n, err = m.apply(cache, tmpl); err == nil {
				invalidationsVec.WithLabelValues(route, kind).Inc()
				dropped.Add(float64(n))
				logger.Debug("invalidated cached decisions", zap.String("kind", kind), zap.Int("dropped", n))
				return
			}
		}
		invalidationsVec.WithLabelValues(route, "invalid").Inc()
		logger.Warn("ignoring an invalid invalidation message", zap.String("subject", msg.Subject), zap.Error(err))
	})
	if err != nil {
		release()
		return fmt.Errorf("invalidate_subject %q: %w", h.InvalidateSubject, err)
	}
	// Wait until the server has the subscription: an invalidation
	// published right after this config starts must not be missed. While
	// NATS is unreachable the subscription is sent on (re)connect, and a
	// reconnect empties the cache anyway.
	if err := conn.NATS().FlushTimeout(time.Second); err != nil {
		logger.Warn("invalidate_subject: NATS did not confirm the subscription yet; it is sent when the connection is up",
			zap.String("subject", h.InvalidateSubject), zap.Error(err))
	}
	removeRec := conn.OnReconnect(func() {
		n := cache.Purge()
		invalidationsVec.WithLabelValues(route, "reconnect").Inc()
		dropped.Add(float64(n))
		logger.Info("NATS reconnected: emptied the permission cache, since invalidations may have been missed", zap.Int("dropped", n))
	})
	h.inv = &invalidation{sub: sub, removeRec: removeRec, release: release}
	return nil
}
