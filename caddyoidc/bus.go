package caddyoidc

import (
	"encoding/json"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// natsBus carries invalidations between the gateways of a fleet on a core
// NATS subject (one per login): each gateway publishes what it revoked or
// refreshed and drops what the others name from its cache. A gateway
// that was disconnected may have missed messages: it empties its cache
// when it reconnects, and reads sessions from the storage again.
type natsBus struct {
	conn      *natsconn.Conn
	subject   string
	sub       *nats.Subscription
	removeRec func()
	release   func()
	log       *zap.Logger
}

// busSubject is the subject of a login's invalidations.
func busSubject(ns string) string { return "gateway.oidc_login." + ns + ".invalidate" }

// maxInvalidation bounds what is parsed: anyone allowed to publish on the
// subject can send anything.
const maxInvalidation = 4 << 10

func startNATSBus(opts natsconn.Options, ns string, c *cache, log *zap.Logger) (*natsBus, error) {
	conn, release, err := natsconn.Get(opts)
	if err != nil {
		return nil, err
	}
	b := &natsBus{conn: conn, subject: busSubject(ns), release: release, log: log}
	b.sub, err = conn.NATS().Subscribe(b.subject, func(msg *nats.Msg) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic handling a session invalidation", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			}
		}()
		var m Invalidation
		if len(msg.Data) > maxInvalidation || json.Unmarshal(msg.Data, &m) != nil || m.Session == "" && m.Subject == "" {
			log.Warn("ignoring an invalid session invalidation", zap.String("subject", msg.Subject), zap.Int("bytes", len(msg.Data)))
			return
		}
		c.Apply(m)
	})
	if err != nil {
		release()
		return nil, err
	}
	// the server must have the subscription before this gateway serves:
	// an invalidation sent right after must not be missed (while NATS
	// is down, the reconnect empties the cache anyway)
	if err := conn.NATS().FlushTimeout(time.Second); err != nil {
		log.Warn("oidc_login: NATS did not confirm the invalidation subscription yet; it is sent when the connection is up", zap.Error(err))
	}
	b.removeRec = conn.OnReconnect(func() {
		n := c.purge()
		log.Info("NATS reconnected: emptied the session cache, since invalidations may have been missed", zap.Int("dropped", n))
	})
	return b, nil
}

// Publish sends m (buffered by the connection while NATS is down).
func (b *natsBus) Publish(m Invalidation) {
	data, _ := json.Marshal(m)
	if err := b.conn.NATS().Publish(b.subject, data); err != nil {
		b.log.Warn("could not publish a session invalidation; other gateways drop the session when their cached copy is checked again", zap.Error(err))
	}
}

func (b *natsBus) stop() {
	_ = b.sub.Unsubscribe()
	b.removeRec()
	b.release()
}
