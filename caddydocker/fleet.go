package caddydocker

// Fleet: discovery across hosts without Swarm.
//
// Each gateway discovers the containers of its own host (Watcher) and
// publishes them, through Fleet, to a NATS JetStream key-value bucket: one
// key per host (the node name), whose value is versioned JSON
//
//	{"v":1,"node":"h1","advertise":"10.0.0.5","updated":"...","instance":"...","containers":[...]}
//
// Every gateway watches the whole bucket and hands the other hosts'
// containers (Remote, each with Node and Advertise set) to its watcher,
// which routes the union: a remote container is reached at its host's
// advertise address and published port.
//
// Liveness. A gateway re-puts its entry every ttl/3 (at once when its
// containers change), so every heartbeat changes the key's revision. A
// reader keeps, per node, the LOCAL time at which it received the node's
// last good update and drops the node once that is older than ttl. The
// writer's "updated" field is for people: hosts' clocks differ, so it is
// never compared with the reader's clock. A graceful Stop does not take
// the host's containers away (they keep running while the gateway
// restarts): it re-puts the entry marked "restarting" with the writer's
// restart grace, and readers keep the node for that long after they
// received it (on their clock), or until it heartbeats again. Only with
// no grace does Stop delete the key, and readers drop the node at once. A
// killed gateway's entry expires after ttl, as any silent node's. The
// bucket's max age (4 ttl when this package creates it) lets the server
// clean keys of gateways that died.
//
// A restart under the same node name takes its records over: the entries
// of earlier runs (revisions up to this run's first put) are not a
// namesake's, and the old run writes its "restarting" entry only over its
// own last put (compare-and-set), never over the new run's.
//
// Expiry needs evidence that the watch works. Silence from a node means
// the node is gone only if the watch would have delivered its heartbeats:
// while this gateway is cut off from NATS (or its watch is stuck) every
// node is silent, and dropping them all would take other hosts' routes away
// because of a NATS outage. So expiry is measured against the last time the
// watch delivered anything (this node's own heartbeat echo is a steady
// supply, and an ordered consumer delivers in stream order): a node expires
// when (last delivery + ttl/2, capped at now) - (its last update) > ttl.
// Nothing expires while disconnected or while no delivery arrives. A watch
// that does not echo an acknowledged put of this node within ttl/2 is
// considered broken and re-created; so is the watch after each reconnect
// (the OnReconnect hook), when this node also re-puts its entry at once.
// Each new watch, and the first delivery after a gap of more than ttl/2,
// gives every known node a fresh ttl from that moment: the node may have
// been cut off too and be re-putting. (The ttl/2 horizon and gap are below
// 2/3 ttl, the longest silence of a live node that heartbeats every ttl/3,
// leaving ttl/6 for delivery jitter.)
//
// Bad values. A value that does not decode, has an unknown version, or
// names another node than its key is skipped, logged once per node per
// distinct error, and shown in Status. It does not drop the node's previous
// good entry (a transient bad write must not flap routes), but it does not
// refresh it either: the previous entry expires ttl after its own arrival,
// so routes are never built on data older than ttl while a node sends
// values this gateway cannot read (a newer gateway version during an
// upgrade, say).
//
// Nothing on the caller's path touches the network: NewFleet validates,
// Start starts goroutines (the bucket is bound or created in the
// background, retried), Publish compares and signals, Remote and Status
// read memory.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/apigate/gateway/internal/natsconn"
)

// Fleet defaults and limits.
const (
	// DefaultFleetBucket is the KV bucket of FleetConfig.Bucket's default.
	DefaultFleetBucket = "gateway_routes"
	// DefaultFleetTTL is FleetConfig.TTL's default.
	DefaultFleetTTL = 15 * time.Second
	// MinFleetTTL is the shortest TTL: below it the heartbeats (ttl/3)
	// load the bucket and scheduling and network jitter eat the margin
	// between a heartbeat and the expiry.
	MinFleetTTL = time.Second
	// fleetVersion is the entry format this gateway writes and reads.
	fleetVersion = 1
	// fleetForget is how long an expired node stays listed in Status.
	fleetForget = 30 * time.Minute
	// DefaultRestartGrace is FleetConfig.RestartGrace's default.
	DefaultRestartGrace = time.Minute
	// maxRestartGrace bounds the grace a reader grants an entry.
	maxRestartGrace = 24 * time.Hour
	// stateRestarting marks the entry a gracefully stopped gateway
	// leaves.
	stateRestarting = "restarting"
)

// FleetConfig configures a Fleet.
type FleetConfig struct {
	// Node is this host's name and its key in the bucket. Default: the
	// host name. It must be a valid KV key (letters, digits and - _ = . /,
	// not starting or ending with a dot) and unique in the fleet.
	Node string
	// Advertise is the address (host name or IP, without a port) at which
	// other hosts reach this host's published ports. Required.
	Advertise string
	// Bucket is the KV bucket (default "gateway_routes").
	Bucket string
	// TTL is how long a node's entry counts without a heartbeat (default
	// 15s, at least 1s). Heartbeats go every TTL/3.
	TTL time.Duration
	// RestartGrace is how long the other gateways keep routing this host's
	// containers after this gateway stops gracefully (a restart, an
	// upgrade), unless it returns sooner. 0 means the default (1m); a
	// negative value withdraws the host at Stop (its key is deleted).
	RestartGrace time.Duration
}

// FleetStatus is what a Fleet knows, for status pages.
type FleetStatus struct {
	// Node, Advertise and Bucket are this gateway's settings.
	Node      string `json:"node"`
	Advertise string `json:"advertise"`
	Bucket    string `json:"bucket"`
	// Replicas of the bucket, once bound (0 before).
	Replicas int `json:"replicas,omitempty"`
	// Connected is true while the NATS connection is up.
	Connected bool `json:"connected"`
	// Watching is true while the bucket watch runs and NATS is
	// connected; WatchSince is when the current watch started (a new
	// one after each reconnect).
	Watching   bool      `json:"watching"`
	WatchSince time.Time `json:"watch_since,omitzero"`
	// LastPublish is when this node's entry was last stored (local time).
	LastPublish time.Time `json:"last_publish,omitzero"`
	// LastError is the current error of binding, publishing or watching
	// ("" when all work).
	LastError string `json:"last_error,omitempty"`
	// Nodes are the other nodes, sorted by name.
	Nodes []FleetNodeStatus `json:"nodes"`
	// Namesakes are the other gateways that wrote this node's key within
	// the last TTL: gateways configured with the same node name (by
	// default the host name), each overwriting the other's containers in
	// the bucket. Each gateway needs its own `node`.
	Namesakes []FleetNamesake `json:"namesakes,omitempty"`
}

// FleetNamesake is another gateway that writes this node's key.
type FleetNamesake struct {
	// Instance is the other gateway's random instance id (a new one at
	// each start).
	Instance string `json:"instance"`
	// Advertise is the address its entry advertises.
	Advertise string `json:"advertise,omitempty"`
	// LastSeen is the local time its last write arrived.
	LastSeen time.Time `json:"last_seen"`
}

// FleetNodeStatus is one other node of the fleet.
type FleetNodeStatus struct {
	Node      string `json:"node"`
	Advertise string `json:"advertise,omitempty"`
	// LastSeen is the local time at which its last update arrived (good
	// or not); expiry counts from its last good update.
	LastSeen time.Time `json:"last_seen"`
	// Containers is the number of its containers in Remote (0 when
	// expired).
	Containers int `json:"containers"`
	// Expired is true when it stopped heart-beating for TTL (or its
	// restart grace ran out); it stays listed for a while.
	Expired bool `json:"expired"`
	// Restarting is true while its gateway stopped gracefully and its
	// containers stay routed for its restart grace; RestartingUntil is
	// when that ends (local time).
	Restarting      bool      `json:"restarting,omitempty"`
	RestartingUntil time.Time `json:"restarting_until,omitzero"`
	// Error says why its last update was skipped.
	Error string `json:"error,omitempty"`
}

// fleetEntry is the value of one key. Containers stays raw so that a
// heartbeat with unchanged containers is recognised without decoding them.
type fleetEntry struct {
	V          int             `json:"v"`
	Node       string          `json:"node"`
	Advertise  string          `json:"advertise"`
	Updated    time.Time       `json:"updated"`
	Instance   string          `json:"instance,omitempty"`
	Containers json.RawMessage `json:"containers"`
	// State is "restarting" in the entry a gracefully stopped gateway
	// leaves, with Grace: how long the others keep its containers.
	State string `json:"state,omitempty"`
	Grace string `json:"grace,omitempty"`
}

// fleetNode is what this gateway holds of another node.
type fleetNode struct {
	advertise  string
	raw        []byte      // containers JSON of the last good entry
	containers []Container // decoded, Node and Advertise set
	good       bool        // a good entry has arrived
	expired    bool
	rev        uint64    // revision of the last update (good or not)
	seen       time.Time // local time of the last good update (or watch start)
	heard      time.Time // local time of the last update of any kind
	err        string    // why the last update was skipped
	logged     string    // the error last logged
	// restartUntil is set while the node's gateway is restarting: it
	// stays live until then (local time), whatever its heartbeats.
	restartUntil time.Time
	// seeded is true for a node known only from the state file of this
	// gateway's previous run: kept until the first watch has delivered
	// the bucket's values, dropped then unless they include it.
	seeded bool
}

func (n *fleetNode) live() bool { return n.good && !n.expired }

// Fleet publishes this host's containers and follows the other hosts'.
// Its methods are safe for concurrent use.
type Fleet struct {
	cfg      FleetConfig
	conn     *natsconn.Conn
	log      *zap.Logger
	instance string // random per Fleet: tells own heartbeats from a namesake's

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	stopOnce  sync.Once
	unhook    func()

	published chan struct{} // Publish changed the local containers
	reput     chan struct{} // put at once (reconnected, own key removed)
	rewatch   chan struct{} // re-create the watch (reconnected)
	changed   chan struct{} // Remote may have changed
	ready     chan struct{} // closed when the bucket is bound
	readyOnce sync.Once

	pubMu sync.Mutex
	local []byte // JSON of this host's containers; nil before Publish

	mu       sync.Mutex
	kv       jetstream.KeyValue
	replicas int
	nodes    map[string]*fleetNode
	remote   []Container
	watching bool
	proof    time.Time // last delivery of the current watch
	putAt    time.Time // last acknowledged put
	putRev   uint64
	firstRev uint64    // revision of this Fleet's first put
	watchAt  time.Time // start of the current watch
	echoRev  uint64    // revision of the last own heartbeat the watch delivered
	stale    bool      // the watch missed an own heartbeat (logged once)
	errs     [3]string
	// namesakes are the other instances seen writing this node's key.
	namesakes map[string]*FleetNamesake

	// canary holds the canary releases' records (keys under
	// canaryKeyPrefix), as the watch delivered them.
	canary        map[string]fleetCanary
	canaryChanged chan struct{}
}

// fleetCanary is one canary record of the bucket.
type fleetCanary struct {
	rec CanaryRecord
	rev uint64
	at  time.Time // local time of its delivery
}

// error slots of Fleet.errs
const (
	errBind = iota
	errPut
	errWatch
)

// NewFleet validates cfg (filling defaults) and returns a Fleet; it does
// no network I/O. Start begins publishing and following; Stop ends both.
// The caller keeps conn for the Fleet's lifetime and releases it after
// Stop.
func NewFleet(cfg FleetConfig, conn *natsconn.Conn, log *zap.Logger) (*Fleet, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, errors.New("fleet: no NATS connection")
	}
	if log == nil {
		log = zap.NewNop()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Fleet{
		cfg: cfg, conn: conn, instance: hex.EncodeToString(id[:]),
		log: log.With(zap.String("node", cfg.Node), zap.String("bucket", cfg.Bucket)),
		ctx: ctx, cancel: cancel,
		published: make(chan struct{}, 1),
		reput:     make(chan struct{}, 1),
		rewatch:   make(chan struct{}, 1),
		changed:   make(chan struct{}, 1),
		ready:     make(chan struct{}),
		nodes:     map[string]*fleetNode{},
		namesakes: map[string]*FleetNamesake{},
		canary:    map[string]fleetCanary{},

		canaryChanged: make(chan struct{}, 1),
	}, nil
}

func (c FleetConfig) withDefaults() (FleetConfig, error) {
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("fleet node: no host name to default to (%v); set node", err)
		}
		if err := validKVKey(h); err != nil {
			return c, fmt.Errorf("fleet node: the host name %q is not usable as node: %v; set node", h, err)
		}
		c.Node = h
	} else if err := validKVKey(c.Node); err != nil {
		return c, fmt.Errorf("invalid fleet node %q: %v", c.Node, err)
	}
	if strings.HasPrefix(c.Node, canaryKeyPrefix) {
		return c, fmt.Errorf("invalid fleet node %q: names starting with %q are the keys of canary releases", c.Node, canaryKeyPrefix)
	}
	if err := validAdvertise(c.Advertise); err != nil {
		return c, err
	}
	if c.Bucket == "" {
		c.Bucket = DefaultFleetBucket
	}
	if !natsconn.ValidBucket(c.Bucket) {
		return c, fmt.Errorf("invalid fleet bucket %q: only letters, digits, _ and -", c.Bucket)
	}
	switch {
	case c.TTL == 0:
		c.TTL = DefaultFleetTTL
	case c.TTL < MinFleetTTL:
		return c, fmt.Errorf("invalid fleet ttl %q: must be at least %v (heartbeats go every ttl/3)", c.TTL, MinFleetTTL)
	}
	switch {
	case c.RestartGrace == 0:
		c.RestartGrace = DefaultRestartGrace
	case c.RestartGrace > maxRestartGrace:
		return c, fmt.Errorf("invalid fleet restart_grace %q: at most %v", c.RestartGrace, maxRestartGrace)
	}
	return c, nil
}

// validKVKey checks a key as JetStream KV takes it: letters, digits and
// - _ = . /, no dot at either end, no empty token (two dots).
func validKVKey(k string) error {
	if k == "" {
		return errors.New("empty")
	}
	for i, r := range k {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./", r)
		if !ok {
			return fmt.Errorf("%q at offset %d: a KV key has only letters, digits and - _ = . /", r, i)
		}
	}
	if k[0] == '.' || k[len(k)-1] == '.' {
		return errors.New("a KV key cannot start or end with a dot")
	}
	if strings.Contains(k, "..") {
		return errors.New("a KV key cannot have two dots in a row")
	}
	return nil
}

// validAdvertise checks an advertise address: a host name or an IP, no
// port, no scheme, reachable from another host (not 0.0.0.0).
func validAdvertise(a string) error {
	if a == "" {
		return errors.New("fleet advertise is required: the host name or IP at which other hosts reach this host's published ports")
	}
	bad := func(why string) error { return fmt.Errorf("invalid fleet advertise %q: %s", a, why) }
	if ip := net.ParseIP(a); ip != nil {
		if ip.IsUnspecified() {
			return bad("an unspecified address is not reachable from other hosts")
		}
		return nil
	}
	switch {
	case strings.Contains(a, "://"):
		return bad("a host name or IP, not a URL")
	case strings.HasPrefix(a, "["):
		return bad("write an IPv6 address without brackets")
	case strings.Contains(a, ":"):
		return bad("a host name or IP without a port (each container's published port is used)")
	case len(a) > 253:
		return bad("longer than 253 characters")
	}
	for _, label := range strings.Split(a, ".") {
		if label == "" || len(label) > 63 {
			return bad("each dot-separated part of a host name has 1 to 63 characters")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return bad(fmt.Sprintf("%q is not allowed in a host name", r))
			}
		}
	}
	return nil
}

// Config returns the configuration with its defaults filled in.
func (f *Fleet) Config() FleetConfig { return f.cfg }

// Start starts the goroutines once: the heartbeat (binds or creates the
// bucket, retrying, then puts this node's entry) and the follower (watches
// the bucket and expires silent nodes). It returns at once.
func (f *Fleet) Start() {
	f.startOnce.Do(func() {
		if f.ctx.Err() != nil {
			return // stopped before it started
		}
		f.unhook = f.conn.OnReconnect(func() {
			// On nats.go's callback goroutine: signal, never block.
			signal(f.rewatch)
			signal(f.reput)
		})
		f.wg.Add(2)
		go f.guard("heartbeat", f.heartbeat)
		go f.guard("follow", f.follow)
	})
}

// Stop stops the goroutines, waits for them, and leaves this node's
// entry marked "restarting": the other gateways keep routing this host's
// containers, which keep running, for the restart grace or until this
// node heartbeats again (a restarted gateway). With a negative restart
// grace it deletes the key instead, and the others drop this host at
// once. Either write is made only over this run's own last put (a new run
// of this node that already wrote wins), and skipped while NATS is
// unreachable (the entry then expires after ttl). Later calls do nothing.
func (f *Fleet) Stop() {
	if f.halt() {
		f.leave()
	}
}

// leave writes this node's last entry (Stop's second half): the
// restarting mark, or with a negative restart grace a delete, each only
// over this run's own last put.
func (f *Fleet) leave() {
	f.mu.Lock()
	kv, rev := f.kv, f.putRev
	f.mu.Unlock()
	if kv == nil || rev == 0 || !f.conn.NATS().IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.opTimeout())
	defer cancel()
	if f.cfg.RestartGrace < 0 {
		if err := kv.Delete(ctx, f.cfg.Node, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			f.log.Warn("fleet: deleting this node's entry failed; the other gateways drop it after ttl",
				zap.Duration("ttl", f.cfg.TTL), zap.Error(err))
		}
		return
	}
	val, err := f.entry(stateRestarting)
	if err != nil {
		return
	}
	_, err = kv.Update(ctx, f.cfg.Node, val, rev)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		f.log.Info("fleet: this node's entry was written again meanwhile (a new run of this node); leaving it")
	case err != nil:
		f.log.Warn("fleet: marking this node restarting failed; the other gateways keep its containers for ttl",
			zap.Duration("ttl", f.cfg.TTL), zap.Error(err))
	default:
		f.log.Info("fleet: stopped; the other gateways keep routing this host's containers while it restarts",
			zap.Duration("restart_grace", f.cfg.RestartGrace))
	}
}

// halt stops the goroutines without deleting the key (what a killed
// gateway does); it reports whether this call stopped them.
func (f *Fleet) halt() (first bool) {
	f.stopOnce.Do(func() {
		first = true
		f.cancel()
		f.startOnce.Do(func() {}) // a later Start starts nothing
		if f.unhook != nil {
			f.unhook()
		}
		f.wg.Wait()
		f.mu.Lock()
		f.watching = false
		f.mu.Unlock()
	})
	return first
}

// Publish sets this host's current containers. It never blocks on NATS:
// when they differ from the last published set (order aside) the
// heartbeat goroutine puts them at once, else the next heartbeat repeats
// them. Nothing is put before the first Publish, so that a restarting
// gateway does not announce an empty host before its first list.
// Containers with Node set are another node's and are left out: handing
// Publish the routed union by mistake cannot make hosts announce each
// other's containers.
func (f *Fleet) Publish(local []Container) {
	cs := make([]Container, 0, len(local))
	for _, c := range local {
		if c.Node == "" {
			c.Advertise = ""
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Name != cs[j].Name {
			return cs[i].Name < cs[j].Name
		}
		return cs[i].ID < cs[j].ID
	})
	b, err := json.Marshal(cs)
	if err != nil { // strings, ints and bools only: cannot happen
		f.log.Error("fleet: encoding this host's containers", zap.Error(err))
		return
	}
	f.pubMu.Lock()
	same := f.local != nil && bytes.Equal(f.local, b)
	if !same {
		f.local = b
	}
	f.pubMu.Unlock()
	if !same {
		signal(f.published)
	}
}

// Seed hands the Fleet the other nodes' containers of this gateway's
// previous run (from its state file), before its first watch delivers
// the bucket: a restarted gateway routes them at once, also while NATS is
// unreachable, instead of only its own host's. Each is replaced by what
// the bucket holds once the watch delivers it, and a node the bucket no
// longer has is dropped when the watch has delivered every value. It does
// nothing once the watch has delivered anything.
func (f *Fleet) Seed(remote []Container) {
	byNode := map[string][]Container{}
	for _, c := range remote {
		if c.Node != "" && c.Node != f.cfg.Node && validAdvertise(c.Advertise) == nil {
			byNode[c.Node] = append(byNode[c.Node], c)
		}
	}
	if len(byNode) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nodes) > 0 || !f.proof.IsZero() {
		return
	}
	now := time.Now()
	for node, cs := range byNode {
		f.nodes[node] = &fleetNode{good: true, seeded: true, advertise: cs[0].Advertise, containers: cs, seen: now, heard: now}
	}
	f.log.Info("fleet: routing the other nodes' containers of the previous run until the bucket is read", zap.Int("nodes", len(byNode)))
	f.rebuild()
}

// Remote returns the other nodes' live containers, each with Node and
// Advertise set to its node's, sorted by Node, Name and ID. This node's
// own entry is never part of it. The slice and the containers are shared:
// read them, do not modify them.
func (f *Fleet) Remote() []Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remote
}

// Changed is signalled (capacity 1, never blocking the Fleet) whenever
// Remote's result may have changed.
func (f *Fleet) Changed() <-chan struct{} { return f.changed }

// Status returns what the Fleet knows, for status pages.
func (f *Fleet) Status() FleetStatus {
	connected := f.conn.NATS().IsConnected()
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FleetStatus{
		Node: f.cfg.Node, Advertise: f.cfg.Advertise, Bucket: f.cfg.Bucket,
		Replicas: f.replicas, Connected: connected, Watching: f.watching && connected,
		LastPublish: f.putAt, Nodes: make([]FleetNodeStatus, 0, len(f.nodes)),
	}
	var errs []string
	for _, e := range f.errs {
		if e != "" {
			errs = append(errs, e)
		}
	}
	st.LastError = strings.Join(errs, "; ")
	if f.watching {
		st.WatchSince = f.watchAt
	}
	for name, n := range f.nodes {
		ns := FleetNodeStatus{Node: name, Advertise: n.advertise, LastSeen: n.heard,
			Expired: n.expired, Error: n.err, Restarting: !n.restartUntil.IsZero(), RestartingUntil: n.restartUntil}
		if n.live() {
			ns.Containers = len(n.containers)
		}
		st.Nodes = append(st.Nodes, ns)
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].Node < st.Nodes[j].Node })
	now := time.Now()
	for _, ns := range f.namesakes {
		if now.Sub(ns.LastSeen) <= f.cfg.TTL {
			st.Namesakes = append(st.Namesakes, *ns)
		}
	}
	sort.Slice(st.Namesakes, func(i, j int) bool { return st.Namesakes[i].Instance < st.Namesakes[j].Instance })
	return st
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// opTimeout bounds each NATS operation: ttl/3 (the heartbeat interval),
// between 500ms and 5s. With the retry backoff (at most ttl/3) a failing
// put is retried well within ttl, so that the other nodes do not expire
// this one while NATS recovers (after a restart, puts time out until the
// stream has a leader again).
func (f *Fleet) opTimeout() time.Duration {
	return min(max(f.cfg.TTL/3, 500*time.Millisecond), 5*time.Second)
}

// sleep waits d or until the Fleet stops; false when it stopped.
func (f *Fleet) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// guard runs fn, restarting it a second after a panic (logged with its
// stack), until the Fleet stops.
func (f *Fleet) guard(name string, fn func()) {
	defer f.wg.Done()
	guarded(f.ctx, f.log, "fleet: goroutine panic", name, fn)
}

// setErr records the error of one activity and logs it when it is new
// (not on every retry); err nil clears it, logging the recovery.
func (f *Fleet) setErr(slot int, what string, err error) {
	f.mu.Lock()
	prev := f.errs[slot]
	text := ""
	if err != nil {
		text = what + ": " + err.Error()
	}
	f.errs[slot] = text
	f.mu.Unlock()
	switch {
	case text == prev:
	case text == "":
		f.log.Info("fleet: " + what + " works again")
	default:
		f.log.Warn("fleet: "+what+" failed; retrying", zap.Error(err))
	}
}

// heartbeat binds the bucket, then puts this node's entry when Publish
// changed it, on reconnect, and every TTL/3; a failed put is retried
// sooner, backing off.
func (f *Fleet) heartbeat() {
	kv := f.bind()
	if kv == nil {
		return
	}
	every := f.cfg.TTL / 3
	retry := 100 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-f.published:
		case <-f.reput:
		case <-timer.C:
		}
		if f.put(kv) {
			retry = 100 * time.Millisecond
			timer.Reset(every)
		} else {
			timer.Reset(retry)
			retry = min(retry*2, every)
		}
	}
}

// bind returns the bucket, binding or creating it, retrying until it
// succeeds or the Fleet stops (nil).
func (f *Fleet) bind() jetstream.KeyValue {
	f.mu.Lock()
	kv := f.kv
	f.mu.Unlock()
	if kv != nil {
		return kv // the heartbeat restarted after a panic
	}
	backoff := 200 * time.Millisecond
	for {
		kv, replicas, err := f.bindOnce()
		if f.ctx.Err() != nil {
			return nil
		}
		f.setErr(errBind, "binding bucket "+f.cfg.Bucket, err)
		if err == nil {
			f.mu.Lock()
			f.kv, f.replicas = kv, replicas
			f.mu.Unlock()
			f.readyOnce.Do(func() { close(f.ready) })
			return kv
		}
		if !f.sleep(backoff) {
			return nil
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// bindOnce binds the bucket as it exists, whatever its settings, or
// creates it: history 1, max age 4 TTL, 3 replicas on a cluster (1 when
// the cluster has too few servers for 3, or on a single server).
func (f *Fleet) bindOnce() (jetstream.KeyValue, int, error) {
	js, err := f.conn.JetStream()
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.opTimeout())
	defer cancel()
	kv, err := js.KeyValue(ctx, f.cfg.Bucket)
	if err == nil {
		return kv, f.checkBucket(ctx, kv), nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, err
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      f.cfg.Bucket,
		Description: "containers of each gateway's host (apigate fleet discovery; one key per node)",
		History:     1,
		TTL:         4 * f.cfg.TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    3,
	}
	if f.conn.NATS().ConnectedClusterName() == "" {
		cfg.Replicas = 1 // a single server: replicas are refused
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if err != nil && cfg.Replicas > 1 && natsconn.TooFewServers(err) {
		f.log.Warn("fleet: too few NATS servers for a bucket with 3 replicas; creating it with 1. "+
			"Once 3 servers run, raise it with: nats stream edit KV_"+f.cfg.Bucket+" --replicas 3",
			zap.Error(err))
		cfg.Replicas = 1
		kv, err = js.CreateKeyValue(ctx, cfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) {
		// another gateway created it meanwhile, with other settings
		kv, err = js.KeyValue(ctx, f.cfg.Bucket)
		if err == nil {
			return kv, f.checkBucket(ctx, kv), nil
		}
	}
	if err != nil {
		return nil, 0, err
	}
	f.log.Info("fleet: created bucket", zap.Int("replicas", cfg.Replicas), zap.Duration("max_age", cfg.TTL))
	return kv, cfg.Replicas, nil
}

// checkBucket logs settings of an existing bucket that weaken the fleet
// and returns its replicas (0 when its status cannot be read).
func (f *Fleet) checkBucket(ctx context.Context, kv jetstream.KeyValue) int {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0
	}
	replicas := 0
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		replicas = bs.StreamInfo().Config.Replicas
	}
	switch age := st.TTL(); {
	case age == 0:
		f.log.Info("fleet: the bucket has no max age: the server never removes keys of gateways that died (they expire here after ttl)")
	case age < f.cfg.TTL:
		f.log.Warn("fleet: the bucket's max age is shorter than the fleet ttl: a key may vanish between heartbeats, and a gateway starting then misses that node until its next heartbeat",
			zap.Duration("max_age", age), zap.Duration("ttl", f.cfg.TTL))
	}
	return replicas
}

// entry encodes this node's entry with the last published containers,
// in state ("" running, or restarting).
func (f *Fleet) entry(state string) ([]byte, error) {
	f.pubMu.Lock()
	local := f.local
	f.pubMu.Unlock()
	e := fleetEntry{V: fleetVersion, Node: f.cfg.Node, Advertise: f.cfg.Advertise,
		Updated: time.Now().UTC(), Instance: f.instance, Containers: local, State: state}
	if state == stateRestarting {
		e.Grace = f.cfg.RestartGrace.String()
	}
	return json.Marshal(e)
}

// put stores this node's entry; false when it failed.
func (f *Fleet) put(kv jetstream.KeyValue) bool {
	f.pubMu.Lock()
	local := f.local
	f.pubMu.Unlock()
	if local == nil {
		return true // nothing published yet
	}
	val, err := f.entry("")
	if err != nil {
		f.setErr(errPut, "publishing this node's entry", err)
		return false
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.opTimeout())
	rev, err := kv.Put(ctx, f.cfg.Node, val)
	cancel()
	if f.ctx.Err() != nil {
		return true
	}
	f.setErr(errPut, "publishing this node's entry", err)
	if err != nil {
		return false
	}
	f.mu.Lock()
	f.putAt, f.putRev = time.Now(), rev
	if f.firstRev == 0 {
		f.firstRev = rev
	}
	f.mu.Unlock()
	return true
}

// follow watches the bucket until the Fleet stops, re-creating the watch
// after an error, a broken watch or a reconnect.
func (f *Fleet) follow() {
	select {
	case <-f.ready:
	case <-f.ctx.Done():
		return
	}
	f.mu.Lock()
	kv := f.kv
	f.mu.Unlock()
	backoff := 100 * time.Millisecond
	for f.ctx.Err() == nil {
		err := f.watch(kv)
		f.mu.Lock()
		f.watching = false
		f.mu.Unlock()
		if f.ctx.Err() != nil {
			return
		}
		if err == nil || errors.Is(err, errWatchStale) { // re-create it now
			backoff = 100 * time.Millisecond
			continue
		}
		f.setErr(errWatch, "watching bucket "+f.cfg.Bucket, err)
		select {
		case <-f.ctx.Done():
			return
		case <-f.rewatch:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, max(f.cfg.TTL/3, 100*time.Millisecond))
	}
}

var errWatchStale = errors.New("the watch did not deliver this node's acknowledged heartbeat")

// watch runs one watch of the whole bucket; nil means re-create it now.
func (f *Fleet) watch(kv jetstream.KeyValue) error {
	// The watch lives as long as the context given to WatchAll, which
	// also bounds the consumer creation: give up on a creation that
	// takes longer than opTimeout by cancelling it.
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	giveUp := time.AfterFunc(f.opTimeout(), cancel)
	w, err := kv.WatchAll(ctx)
	if !giveUp.Stop() {
		if err == nil {
			_ = w.Stop()
		}
		return fmt.Errorf("creating the watch: no answer within %v", f.opTimeout())
	}
	if err != nil {
		return err
	}
	defer f.stopWatch(w)
	f.setErr(errWatch, "watching bucket "+f.cfg.Bucket, nil)
	f.restartClocks(time.Now())
	tick := time.NewTicker(f.cfg.TTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return nil
		case <-f.rewatch:
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			f.deliver(e, time.Now())
		case <-tick.C:
			if f.expire(time.Now()) {
				return errWatchStale
			}
		}
	}
}

// stopWatch ends a watch: its subscription, and its consumer on the
// server, waiting at most opTimeout (nats.go waits up to 5s for the
// consumer delete). While disconnected it leaves both to the cancelled
// WatchAll context: nats.go then drops the subscription in its own
// goroutine, and the server removes the abandoned ordered consumer.
func (f *Fleet) stopWatch(w jetstream.KeyWatcher) {
	if !f.conn.NATS().IsConnected() {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Stop()
	}()
	t := time.NewTimer(f.opTimeout())
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// restartClocks starts a new watch: every known live node gets a fresh
// TTL from now (it may have been cut off too, and be re-putting), and the
// evidence of the old watch no longer counts.
func (f *Fleet) restartClocks(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watching = true
	f.watchAt = now
	f.proof = time.Time{}
	f.echoRev = 0
	f.refreshLive(now)
}

// refreshLive gives every live node a fresh TTL from now (f.mu held).
func (f *Fleet) refreshLive(now time.Time) {
	for _, n := range f.nodes {
		if n.live() && n.seen.Before(now) {
			n.seen = now
		}
	}
}

// deliver applies one watch update (nil: the initial values are in).
func (f *Fleet) deliver(e jetstream.KeyValueEntry, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.proof.IsZero() && now.Sub(f.proof) > f.cfg.TTL/2 {
		// The watch delivered nothing for a while (NATS trouble without
		// a disconnect, say, and nats.go's consumer recovered by
		// itself): that silence proves nothing about the other nodes.
		f.refreshLive(now)
	}
	f.proof = now
	if e == nil {
		// The bucket's values are in: nodes known only from the state
		// file that the bucket no longer has are gone.
		dropped := false
		for name, n := range f.nodes {
			if n.seeded {
				delete(f.nodes, name)
				dropped = true
				f.log.Info("fleet: a node of the previous run is no longer in the bucket", zap.String("other", name))
			}
		}
		if dropped {
			f.rebuild()
		}
		return
	}
	key := e.Key()
	if strings.HasPrefix(key, canaryKeyPrefix) {
		f.deliverCanary(e, now)
		return
	}
	if key == f.cfg.Node {
		f.own(e)
		return
	}
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		n, ok := f.nodes[key]
		if !ok {
			return
		}
		delete(f.nodes, key)
		if n.live() {
			f.log.Info("fleet: node left", zap.String("other", key))
			f.rebuild()
		}
		return
	}
	n := f.nodes[key]
	if n == nil {
		n = &fleetNode{}
		f.nodes[key] = n
	}
	if n.rev == e.Revision() {
		return // delivered again (a new watch): not a new heartbeat
	}
	n.rev, n.heard = e.Revision(), now
	if n.seeded {
		// Known from the state file until now: take this entry's
		// containers, whatever the file had.
		n.seeded, n.good = false, false
	}
	ent, containers, err := decodeFleetEntry(key, e.Value(), n)
	if err != nil {
		n.err = err.Error()
		if n.err != n.logged {
			n.logged = n.err
			f.log.Warn("fleet: skipping another node's entry", zap.String("other", key),
				zap.Uint64("revision", e.Revision()), zap.Bool("keeping_previous", n.live()), zap.Error(err))
		}
		return
	}
	n.err, n.logged = "", ""
	n.seen = now
	wasLive := n.live()
	if n.expired {
		f.log.Info("fleet: node is back", zap.String("other", key))
	}
	n.expired = false
	wasRestarting := !n.restartUntil.IsZero()
	if ent.State == stateRestarting {
		grace, _ := time.ParseDuration(ent.Grace)
		grace = min(max(grace, 0), maxRestartGrace)
		n.restartUntil = now.Add(grace)
		f.log.Info("fleet: node's gateway is restarting; keeping its containers", zap.String("other", key),
			zap.Duration("restart_grace", grace))
	} else {
		n.restartUntil = time.Time{}
		if wasRestarting {
			f.log.Info("fleet: node's gateway is back", zap.String("other", key))
		}
	}

	if containers == nil { // same as before
		if !wasLive {
			f.rebuild()
		}
		return
	}
	if !n.good {
		f.log.Info("fleet: node joined", zap.String("other", key),
			zap.String("advertise", ent.Advertise), zap.Int("containers", len(containers)))
	}
	n.good, n.advertise, n.raw, n.containers = true, ent.Advertise, ent.Containers, containers
	f.rebuild()
}

// decodeFleetEntry decodes another node's value. containers is nil when
// they (and the advertise address) are those n already holds.
func decodeFleetEntry(key string, value []byte, n *fleetNode) (ent fleetEntry, containers []Container, err error) {
	if err := json.Unmarshal(value, &ent); err != nil {
		return ent, nil, fmt.Errorf("malformed value: %w", err)
	}
	switch {
	case ent.V != fleetVersion:
		return ent, nil, fmt.Errorf("unsupported entry version %d (this gateway reads %d)", ent.V, fleetVersion)
	case ent.Node != key:
		return ent, nil, fmt.Errorf("the entry names node %q, not its key", ent.Node)
	}
	if err := validAdvertise(ent.Advertise); err != nil {
		return ent, nil, err
	}
	if n.good && ent.Advertise == n.advertise && bytes.Equal(ent.Containers, n.raw) {
		return ent, nil, nil
	}
	containers = []Container{}
	if len(ent.Containers) > 0 {
		if err := json.Unmarshal(ent.Containers, &containers); err != nil {
			return ent, nil, fmt.Errorf("malformed containers: %w", err)
		}
	}
	if containers == nil { // "containers":null
		containers = []Container{}
	}
	for i := range containers {
		containers[i].Node, containers[i].Advertise = key, ent.Advertise
	}
	return ent, containers, nil
}

// own handles an update of this node's key (f.mu held).
func (f *Fleet) own(e jetstream.KeyValueEntry) {
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		// Removed by someone else (an operator, the max age while this
		// gateway was cut off, a namesake's Stop): put it back.
		if f.ctx.Err() == nil {
			f.log.Info("fleet: this node's entry was removed; publishing it again")
			signal(f.reput)
		}
		return
	}
	var ent struct {
		Instance  string `json:"instance"`
		Advertise string `json:"advertise"`
		State     string `json:"state"`
	}
	_ = json.Unmarshal(e.Value(), &ent)
	if ent.Instance == f.instance {
		f.echoRev = max(f.echoRev, e.Revision())
		if f.stale {
			f.stale = false
			f.log.Info("fleet: the bucket watch delivers this node's heartbeats again")
		}
		return
	}
	// An entry of this node's previous run (a crash, a restart without
	// Stop) is older than this Fleet's first put; a newer one is a
	// namesake's.
	if f.firstRev == 0 || e.Revision() <= f.firstRev {
		return
	}
	if ent.State == stateRestarting {
		// An earlier run of this node saying goodbye after this run's
		// first put (it writes only over its own put, so this is a
		// namesake's): not a heartbeat; put this run's entry back.
		signal(f.reput)
	}
	now := time.Now()
	ns := f.namesakes[ent.Instance]
	if ns == nil || now.Sub(ns.LastSeen) > f.cfg.TTL {
		// New, or back after it stopped writing for a TTL: say it again.
		f.log.Error(NamesakeMessage, zap.String("other_advertise", ent.Advertise), zap.String("other_instance", ent.Instance))
	}
	if ns == nil {
		ns = &FleetNamesake{Instance: ent.Instance}
		f.namesakes[ent.Instance] = ns
	}
	ns.Advertise, ns.LastSeen = ent.Advertise, now
	for id, other := range f.namesakes {
		if now.Sub(other.LastSeen) > fleetForget {
			delete(f.namesakes, id)
		}
	}
}

// NamesakeMessage is the error a gateway logs (with this gateway's node in
// the field "node") when another gateway writes its node's key.
const NamesakeMessage = "fleet: another gateway publishes under this node name, and each overwrites the other's containers in the bucket; " +
	"give each gateway its own `node` in its docker fleet options (the default is the host name)"

// expire drops the nodes silent for TTL, when the watch proves that their
// heartbeats would have arrived, and reports whether the watch looks
// broken (an acknowledged put of this node not delivered within TTL/2).
func (f *Fleet) expire(now time.Time) (broken bool) {
	connected := f.conn.NATS().IsConnected()
	f.mu.Lock()
	defer f.mu.Unlock()
	trust := f.cfg.TTL / 2
	if connected && f.putRev > f.echoRev && f.putAt.After(f.watchAt) && now.Sub(f.putAt) > trust {
		if !f.stale {
			f.stale = true
			f.log.Warn("fleet: the bucket watch did not deliver this node's heartbeat; re-creating it (nothing expires meanwhile)")
		}
		return true
	}
	// The watch was working at f.proof; trust it for ttl/2 more (a
	// heartbeat of this node is due every ttl/3).
	judge := connected && !f.proof.IsZero()
	evidence := f.proof.Add(trust)
	if evidence.After(now) {
		evidence = now
	}
	changed := false
	for name, n := range f.nodes {
		if !n.live() {
			if now.Sub(n.heard) > fleetForget {
				delete(f.nodes, name)
			}
			continue
		}
		if !n.restartUntil.IsZero() {
			// Its gateway stopped gracefully: its containers keep
			// running; they stay until the grace ends (or it is back).
			if judge && now.After(n.restartUntil) {
				n.expired = true
				n.restartUntil = time.Time{}
				changed = true
				f.log.Warn("fleet: node expired: its gateway did not come back within its restart grace", zap.String("other", name))
			}
			continue
		}
		if judge && evidence.Sub(n.seen) > f.cfg.TTL {
			n.expired = true
			changed = true
			f.log.Warn("fleet: node expired: no heartbeat for ttl", zap.String("other", name),
				zap.Duration("ttl", f.cfg.TTL), zap.Time("last_seen", n.seen))
		}
	}
	if changed {
		f.rebuild()
	}
	return false
}

// rebuild recomputes Remote and signals Changed (f.mu held).
func (f *Fleet) rebuild() {
	count := 0
	for _, n := range f.nodes {
		if n.live() {
			count += len(n.containers)
		}
	}
	remote := make([]Container, 0, count)
	for _, n := range f.nodes {
		if n.live() {
			remote = append(remote, n.containers...)
		}
	}
	sort.Slice(remote, func(i, j int) bool {
		a, b := remote[i], remote[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	f.remote = remote
	signal(f.changed)
}

// Canary releases (canaryctl.go) keep one record per release in the
// bucket, beside the nodes' entries, under a key no node can have:
// _canary.<service>.<release id> (a '.' of the service written =2E).
const canaryKeyPrefix = "_canary."

func canaryKey(service, release string) string {
	return canaryKeyPrefix + strings.ReplaceAll(service, ".", "=2E") + "." + release
}

// deliverCanary applies a watch update of a canary record (f.mu held).
func (f *Fleet) deliverCanary(e jetstream.KeyValueEntry, now time.Time) {
	key := e.Key()
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		delete(f.canary, key)
		signal(f.canaryChanged)
		return
	}
	var rec CanaryRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.V != 1 || canaryKey(rec.Service, rec.Release) != key {
		f.log.Warn("fleet: skipping a canary record that this gateway cannot read", zap.String("key", key),
			zap.Uint64("revision", e.Revision()), zap.Error(err), zap.Int("v", rec.V))
		return
	}
	f.canary[key] = fleetCanary{rec: rec, rev: e.Revision(), at: now}
	signal(f.canaryChanged)
}

// CanaryRecord returns a release's record as the watch last delivered it,
// its revision and the local time it arrived.
func (f *Fleet) CanaryRecord(service, release string) (CanaryRecord, uint64, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.canary[canaryKey(service, release)]
	return c.rec, c.rev, c.at, ok
}

// errNotBound is returned by canary writes before the bucket is bound.
var errNotBound = errors.New("fleet: the bucket is not bound yet")

// PutCanary creates a release's record (rev 0; it fails if the record
// exists) or replaces it if its revision is still rev. It returns the
// new revision.
func (f *Fleet) PutCanary(ctx context.Context, rec CanaryRecord, rev uint64) (uint64, error) {
	f.mu.Lock()
	kv := f.kv
	f.mu.Unlock()
	if kv == nil {
		return 0, errNotBound
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	key := canaryKey(rec.Service, rec.Release)
	if rev == 0 {
		return kv.Create(ctx, key, b)
	}
	return kv.Update(ctx, key, b, rev)
}

// GetCanary reads a release's record from the bucket.
func (f *Fleet) GetCanary(ctx context.Context, service, release string) (CanaryRecord, uint64, bool, error) {
	f.mu.Lock()
	kv := f.kv
	f.mu.Unlock()
	if kv == nil {
		return CanaryRecord{}, 0, false, errNotBound
	}
	e, err := kv.Get(ctx, canaryKey(service, release))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return CanaryRecord{}, 0, false, nil
	}
	if err != nil {
		return CanaryRecord{}, 0, false, err
	}
	var rec CanaryRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return CanaryRecord{}, 0, false, fmt.Errorf("canary record %s: %w", e.Key(), err)
	}
	return rec, e.Revision(), true, nil
}

// CanaryChanged is signalled when a canary record arrived or went.
func (f *Fleet) CanaryChanged() <-chan struct{} { return f.canaryChanged }

// CanaryRefresh is how often a running release's record is re-put, so
// that the bucket's max age (4 ttl when this package creates it) keeps
// it: ttl/3, as a node's heartbeat.
func (f *Fleet) CanaryRefresh() time.Duration { return f.cfg.TTL / 3 }

// Node returns this gateway's node name.
func (f *Fleet) Node() string { return f.cfg.Node }

// CanaryWritable reports whether the bucket is bound and NATS connected.
func (f *Fleet) CanaryWritable() bool {
	f.mu.Lock()
	bound := f.kv != nil
	f.mu.Unlock()
	return bound && f.conn.NATS().IsConnected()
}

var _ canaryStore = (*Fleet)(nil)
