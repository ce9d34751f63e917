package caddyaudit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/apigate/gateway/caddyaudit/auditchain"
)

// ChainConfig turns on tamper evidence (see package auditchain).
type ChainConfig struct {
	// KeyFile is a PEM file with the Ed25519 private key (PKCS #8) that
	// signs checkpoints.
	KeyFile string `json:"key_file"`
	// CheckpointInterval is how often a signed checkpoint is recorded
	// when events were recorded since the last one. Default: 10s.
	CheckpointInterval caddy.Duration `json:"checkpoint_interval,omitempty"`

	// node names the gateway in chain_start events (the app's node).
	node string
}

// chains holds one chain per key (and interval), so that a config reload
// that keeps the key continues the same chain; the last config using it
// records a final checkpoint.
var chains = caddy.NewUsagePool()

// chain numbers and links the events of one gateway process start, and
// signs checkpoints.
type chain struct {
	id       string
	key      ed25519.PrivateKey
	keyID    string
	interval time.Duration
	log      *zap.Logger
	// sinks are the workers of the newest config that uses the chain;
	// checkpoints go there.
	sinks atomic.Pointer[[]*worker]

	mu     sync.Mutex
	next   uint64
	prev   string
	lastCP bool // the last recorded event is a checkpoint
	buf    []byte

	stop, done chan struct{}
}

func (cc ChainConfig) poolKey() (string, ed25519.PrivateKey, error) {
	key, err := auditchain.LoadPrivateKey(cc.KeyFile)
	if err != nil {
		return "", nil, fmt.Errorf("chain key: %w", err)
	}
	sum := sha256.Sum256(key.Seed())
	return cc.KeyFile + "\x00" + hex.EncodeToString(sum[:]) + "\x00" + strconv.FormatInt(int64(cc.CheckpointInterval), 10), key, nil
}

// acquireChain returns the chain for cc, starting one (and recording its
// chain_start event to sinks) when no running config uses it yet.
func acquireChain(cc ChainConfig, sinks []*worker, log *zap.Logger) (*chain, string, error) {
	k, key, err := cc.poolKey()
	if err != nil {
		return nil, "", err
	}
	v, loaded, err := chains.LoadOrNew(k, func() (caddy.Destructor, error) {
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return nil, err
		}
		c := &chain{
			id: hex.EncodeToString(id[:]), key: key,
			keyID:    auditchain.KeyID(key.Public().(ed25519.PublicKey)),
			interval: time.Duration(cc.CheckpointInterval), log: log,
			prev: auditchain.Genesis,
			stop: make(chan struct{}), done: make(chan struct{}),
		}
		if c.interval <= 0 {
			c.interval = 10 * time.Second
		}
		c.sinks.Store(&sinks)
		node := cc.node
		if node == "" {
			node, _ = os.Hostname()
		}
		c.record(&Event{Kind: auditchain.KindStart, Time: time.Now(), KeyID: c.keyID, Node: node}, sinks)
		log.Info("audit chain started", zap.String("chain", c.id), zap.String("key_id", c.keyID))
		go c.run()
		return c, nil
	})
	if err != nil {
		return nil, "", err
	}
	c := v.(*chain)
	if loaded {
		c.sinks.Store(&sinks)
	}
	return c, k, nil
}

// record gives ev its place in the chain and hands it to the sinks, in
// chain order.
func (c *chain) record(ev *Event, sinks []*worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recordLocked(ev, sinks)
}

func (c *chain) recordLocked(ev *Event, sinks []*worker) {
	ev.Chain, ev.Seq, ev.Hash = c.id, c.next, ""
	if ev.Kind != "" {
		ev.RequestID = c.id + "-" + strconv.FormatUint(c.next, 10)
	}
	c.buf = ev.AppendJSON(c.buf[:0])
	ev.Hash = auditchain.Link(c.prev, c.buf)
	c.prev = ev.Hash
	c.next++
	c.lastCP = ev.Kind == auditchain.KindCheckpoint
	for _, w := range sinks {
		w.Enqueue(ev)
	}
}

// checkpoint records a signed checkpoint covering every event so far,
// unless the last event already is one (and final is false). Signing
// (tens of microseconds) holds the chain, every checkpoint_interval.
func (c *chain) checkpoint(final bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastCP && !final {
		return
	}
	last := c.next - 1
	sig := ed25519.Sign(c.key, auditchain.CheckpointMessage(c.id, last, c.prev))
	c.recordLocked(&Event{Kind: auditchain.KindCheckpoint, Time: time.Now(), KeyID: c.keyID,
		LastSeq: last, LastHash: c.prev, Signature: base64.StdEncoding.EncodeToString(sig), Final: final},
		*c.sinks.Load())
}

func (c *chain) run() {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.checkpoint(false)
		case <-c.stop:
			return
		}
	}
}

// Destruct records the final checkpoint when the last config using the
// chain is cleaned up.
func (c *chain) Destruct() error {
	close(c.stop)
	<-c.done
	c.checkpoint(true)
	c.log.Info("audit chain ended", zap.String("chain", c.id), zap.Uint64("last_seq", c.next-1))
	return nil
}
