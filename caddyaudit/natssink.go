package caddyaudit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/natsconn"
)

// natsSink publishes one message per event: core NATS (flushed per batch)
// or JetStream (each message acknowledged, with Nats-Msg-Id =
// "<node>/<request id>" so that the server drops the duplicates of a
// retried batch). The request id is the gateway's own
// ({http.request.uuid}), never a client's header: JetStream drops a
// message whose id it stored within the stream's duplicate window, so an
// id a client could choose would let it erase its own events.
type natsSink struct {
	conn      *natsconn.Conn
	node      string
	release   func()
	subject   string
	jetstream bool
	stream    string
	timeout   time.Duration
	js        jetstream.JetStream
	ensured   bool
	futures   []jetstream.PubAckFuture
	ready     chan struct{} // signalled when the connection is (re)established
	unhook    func()
}

// Ready is signalled when NATS is reachable again: a batch waiting to be
// retried goes at once, not after its backoff (up to retry_max).
func (s *natsSink) Ready() <-chan struct{} { return s.ready }

func newNATSSink(opts natsconn.Options, node, subject string, useJS bool, stream string, timeout time.Duration) (*natsSink, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c, release, err := natsconn.Get(opts)
	if err != nil {
		return nil, err
	}
	s := &natsSink{conn: c, node: node, release: release, subject: subject, jetstream: useJS || stream != "", stream: stream, timeout: timeout,
		ready: make(chan struct{}, 1)}
	s.unhook = c.OnReconnect(func() {
		select {
		case s.ready <- struct{}{}:
		default:
		}
	})
	if s.jetstream {
		js, err := c.JetStream()
		if err != nil {
			s.unhook()
			release()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		s.js = js
	}
	return s, nil
}

var errNotConnected = errors.New("not connected to NATS")

func (s *natsSink) Send(ctx context.Context, recs []record) error {
	nc := s.conn.NATS()
	if !nc.IsConnected() {
		// Do not fill the reconnect buffer with a batch that will be
		// retried anyway.
		return errNotConnected
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if !s.jetstream {
		for _, r := range recs {
			if err := nc.Publish(s.subject, r.data); err != nil {
				return err
			}
		}
		return nc.FlushWithContext(ctx)
	}
	if s.stream != "" && !s.ensured {
		if err := s.ensureStream(ctx); err != nil {
			return err
		}
	}
	s.futures = s.futures[:0]
	for _, r := range recs {
		msg := &nats.Msg{Subject: s.subject, Data: r.data, Header: nats.Header{}}
		if id := recordID(r); id != "" {
			msg.Header.Set(jetstream.MsgIDHeader, s.msgID(id))
		}
		f, err := s.js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		s.futures = append(s.futures, f)
	}
	for _, f := range s.futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for JetStream acknowledgements: %w", ctx.Err())
		}
	}
	return nil
}

// msgID is the JetStream message id of the event with request id id.
func (s *natsSink) msgID(id string) string { return s.node + "/" + id }

// ensureStream creates the configured stream for the subject when it does
// not exist.
func (s *natsSink) ensureStream(ctx context.Context) error {
	_, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.subject}, Storage: jetstream.FileStorage})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("stream %q: %w", s.stream, err)
	}
	s.ensured = true
	return nil
}

func (s *natsSink) Close() error {
	s.unhook()
	s.release()
	return nil
}
