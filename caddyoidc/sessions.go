package caddyoidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/apigate/gateway/identity"
)

// Session is what the gateway keeps of one login, sealed (Keyring.Seal) in
// the storage: the identity and the provider's tokens.
type Session struct {
	Subject string `json:"sub"`
	Issuer  string `json:"iss"`
	// Claims are the ID token's claims, with the userinfo claims the ID
	// token does not have.
	Claims       map[string]any `json:"claims"`
	IDToken      string         `json:"id_token,omitempty"`
	AccessToken  string         `json:"access_token,omitempty"`
	RefreshToken string         `json:"refresh_token,omitempty"`
	// TokenExpiry is when the access token expires (zero: unknown).
	TokenExpiry time.Time `json:"token_expiry,omitzero"`
	// ProviderSID is the ID token's `sid`: the provider's session, which
	// a back-channel logout may name instead of the subject.
	ProviderSID string    `json:"provider_sid,omitempty"`
	Created     time.Time `json:"created"`
	// Expires is when the session ends whatever happens (created +
	// session_ttl).
	Expires  time.Time `json:"expires"`
	LastSeen time.Time `json:"last_seen"`
}

// Identity returns the identity of the session, as jwt_auth gives one for
// a token: Subject and the `sub` claim, the claims, Method
// identity.MethodOIDCSession.
func (s *Session) Identity() *identity.Identity {
	id := &identity.Identity{
		Subject: s.Subject, Issuer: s.Issuer, ExpiresAt: s.Expires,
		Claims: s.Claims, Method: identity.MethodOIDCSession,
	}
	if aud, ok := s.Claims["aud"]; ok {
		if strs, err := identity.Strings(aud); err == nil {
			id.Audience = strs
		}
	}
	if alg, ok := s.Claims["alg"].(string); ok {
		id.Algorithm = alg
	}
	return id
}

// entry is a session held in a gateway's cache.
type entry struct {
	name    string // storage name: hash of the id's random part
	subject string // storage name of the subject
	psid    string // storage name of the provider's session id ("" without)
	sess    *Session
	id      *identity.Identity
	expires int64 // unix nanoseconds
	loaded  int64 // when it was read from the storage (unix nanoseconds)
	// mapper answers the claims placeholders (made once: a request
	// costs no allocation for it)
	mapper func(string) (any, bool)

	lastSeen  atomic.Int64 // unix nanoseconds, this gateway's view
	persisted atomic.Int64 // the last LastSeen written to the storage

	// the refresh of the session's tokens (Sessions.Refresh)
	refreshing  atomic.Bool
	nextRefresh atomic.Int64
}

// Invalidation is a message between the gateways of a fleet: drop what
// the cache holds of a session (Session), of every session of a subject
// (Subject), both storage names; the storage says what is true.
type Invalidation struct {
	Session string `json:"session,omitempty"`
	Subject string `json:"subject,omitempty"`
}

// Bus carries invalidations to the other gateways (their caches); nil
// publishes nothing (one gateway).
type Bus interface {
	Publish(Invalidation)
}

// cache is a gateway's sessions in memory, keyed by cookie value, shared
// by every config that uses the same storage and login (a UsagePool keeps
// it across reloads).
type cache struct {
	mu  sync.RWMutex
	m   map[string]*entry
	max int
}

func newCache(max int) *cache { return &cache{m: map[string]*entry{}, max: max} }

func (c *cache) get(cookie string) *entry {
	c.mu.RLock()
	e := c.m[cookie]
	c.mu.RUnlock()
	return e
}

func (c *cache) put(cookie string, e *entry, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[cookie]; !ok && len(c.m) >= c.max {
		for k, o := range c.m { // expired first, else any: the storage still has it
			if o.expires <= now || len(c.m) >= c.max {
				delete(c.m, k)
				cachedSessions.Dec()
			}
			if len(c.m) < c.max*9/10 {
				break
			}
		}
	}
	if _, ok := c.m[cookie]; !ok {
		cachedSessions.Inc()
	}
	c.m[cookie] = e
}

// drop removes the entries fn selects and returns how many.
func (c *cache) drop(fn func(*entry) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.m {
		if fn(e) {
			delete(c.m, k)
			n++
		}
	}
	cachedSessions.Sub(float64(n))
	return n
}

// Apply drops what an invalidation names.
func (c *cache) Apply(m Invalidation) int {
	return c.drop(func(e *entry) bool {
		return m.Session != "" && e.name == m.Session || m.Subject != "" && e.subject == m.Subject
	})
}

// purge empties the cache (after a NATS reconnect: messages were missed).
func (c *cache) purge() int { return c.drop(func(*entry) bool { return true }) }

func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// Sessions is one config's view of the sessions of a login: the storage,
// the keys and the rules of that config, over the cache shared across
// reloads.
type Sessions struct {
	Storage certmagic.Storage
	Ring    *Keyring
	// Prefix is the storage directory of this login's sessions.
	Prefix string
	// TTL is a session's whole life; Idle how long it lives unused.
	TTL, Idle time.Duration
	Bus       Bus
	Now       func() time.Time

	cache *cache
}

// ErrStorage wraps a storage failure (not a missing session).
var ErrStorage = errors.New("session storage failed")

func (s *Sessions) sessionKey(name string) string { return path.Join(s.Prefix, "sessions", name) }
func (s *Sessions) subjectDir(sub string) string  { return path.Join(s.Prefix, "subjects", sub) }
func (s *Sessions) providerDir(psid string) string {
	return path.Join(s.Prefix, "provider_sessions", psid)
}

// persistEvery is how stale the storage's LastSeen of a session in use may
// be: a quarter of the idle timeout (other gateways read it), at least 10 s.
func (s *Sessions) persistEvery() int64 {
	return int64(max(s.Idle/4, 10*time.Second))
}

// Create stores a new session and returns its cookie value.
func (s *Sessions) Create(ctx context.Context, sess *Session) (string, error) {
	cookie := s.Ring.NewSessionID()
	name, _ := s.Ring.CheckSessionID(cookie)
	now := s.Now()
	sess.Created, sess.LastSeen = now, now
	sess.Expires = now.Add(s.TTL)
	if err := s.save(ctx, name, sess); err != nil {
		return "", err
	}
	exp := expiryBytes(sess.Expires)
	e := s.newEntry(name, sess)
	if err := s.Storage.Store(ctx, path.Join(s.subjectDir(e.subject), name), exp); err != nil {
		return "", fmt.Errorf("%w: %v", ErrStorage, err)
	}
	if e.psid != "" {
		if err := s.Storage.Store(ctx, path.Join(s.providerDir(e.psid), name), exp); err != nil {
			return "", fmt.Errorf("%w: %v", ErrStorage, err)
		}
	}
	s.cache.put(cookie, e, now.UnixNano())
	return cookie, nil
}

func expiryBytes(t time.Time) []byte {
	b := make([]byte, 8)
	putUint64(b, uint64(t.Unix()))
	return b
}

// save seals sess under name: its expiry in clear (8 bytes), then the
// sealed JSON, bound to its storage key.
func (s *Sessions) save(ctx context.Context, name string, sess *Session) error {
	pt, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	key := s.sessionKey(name)
	rec := append(expiryBytes(sess.Expires), s.Ring.Seal(pt, []byte(key))...)
	if err := s.Storage.Store(ctx, key, rec); err != nil {
		return fmt.Errorf("%w: %v", ErrStorage, err)
	}
	return nil
}

// load reads and opens a session; nil, nil when there is none (missing,
// expired, or sealed with a key the ring no longer holds).
func (s *Sessions) load(ctx context.Context, name string) (*Session, error) {
	key := s.sessionKey(name)
	rec, err := s.Storage.Load(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStorage, err)
	}
	if len(rec) < 8 || time.Unix(int64(getUint64(rec)), 0).Before(s.Now()) {
		return nil, nil
	}
	pt, err := s.Ring.Open(rec[8:], []byte(key))
	if err != nil {
		return nil, nil
	}
	var sess Session
	if err := json.Unmarshal(pt, &sess); err != nil {
		return nil, nil
	}
	return &sess, nil
}

func (s *Sessions) newEntry(name string, sess *Session) *entry {
	e := &entry{name: name, subject: storageName([]byte(sess.Issuer + "\x00" + sess.Subject)), sess: sess,
		id: sess.Identity(), expires: sess.Expires.UnixNano(), loaded: s.Now().UnixNano()}
	if sess.ProviderSID != "" {
		e.psid = storageName([]byte(sess.Issuer + "\x00" + sess.ProviderSID))
	}
	e.mapper = e.placeholders
	e.lastSeen.Store(sess.LastSeen.UnixNano())
	e.persisted.Store(sess.LastSeen.UnixNano())
	return e
}

// Lookup returns the session of a cookie value, or nil: no session (never
// was, forged, expired, idle too long, revoked). Only a storage failure
// is an error. A cached session costs no storage access; one used on this
// gateway writes its LastSeen back at most every persistEvery, in the
// background.
func (s *Sessions) Lookup(ctx context.Context, cookie string) (*entry, error) {
	now := s.Now().UnixNano()
	if e := s.cache.get(cookie); e != nil {
		switch {
		case now >= e.expires:
			s.cache.drop(func(o *entry) bool { return o == e })
			return nil, nil
		case now-e.loaded > int64(revalidateEvery):
			// read again: a lost invalidation costs at most this long
		case now-e.lastSeen.Load() <= int64(s.Idle):
			e.lastSeen.Store(now)
			if now-e.persisted.Load() > s.persistEvery() {
				s.persistLastSeen(e, now)
			}
			return e, nil
		}
		// idle here: another gateway may have seen it since
		s.cache.drop(func(o *entry) bool { return o == e })
	}
	name, ok := s.Ring.CheckSessionID(cookie)
	if !ok {
		return nil, nil
	}
	sess, err := s.load(ctx, name)
	if err != nil || sess == nil {
		return nil, err
	}
	if now-sess.LastSeen.UnixNano() > int64(s.Idle) {
		_ = s.revoke(ctx, name, sess)
		return nil, nil
	}
	e := s.newEntry(name, sess)
	e.lastSeen.Store(now)
	s.cache.put(cookie, e, now)
	if now-e.persisted.Load() > s.persistEvery() {
		s.persistLastSeen(e, now)
	}
	return e, nil
}

// revalidateEvery is how long a gateway trusts its cached copy of a
// session without reading the storage again: the bound on what a lost
// invalidation (NATS down without a reconnect yet, a gateway without NATS
// sharing a file storage) can cost. Invalidations normally arrive within
// milliseconds.
const revalidateEvery = time.Minute

// persistLastSeen writes the session's LastSeen in the background (once
// at a time per entry: persisted moves first).
func (s *Sessions) persistLastSeen(e *entry, now int64) {
	old := e.persisted.Load()
	if !e.persisted.CompareAndSwap(old, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cur, err := s.load(ctx, e.name)
		if err != nil || cur == nil {
			return
		}
		cur.LastSeen = time.Unix(0, now)
		_ = s.save(ctx, e.name, cur)
	}()
}

// Revoke ends the session of a cookie value everywhere: the storage, this
// gateway's cache, and (through the bus) every other gateway's.
func (s *Sessions) Revoke(ctx context.Context, cookie string) error {
	name, ok := s.Ring.CheckSessionID(cookie)
	if !ok {
		return nil
	}
	sess, err := s.load(ctx, name)
	if err != nil {
		return err
	}
	return s.revoke(ctx, name, sess)
}

// revoke deletes a session (sess may be nil: then only its record) and
// tells the fleet.
func (s *Sessions) revoke(ctx context.Context, name string, sess *Session) error {
	var errs []error
	if err := s.Storage.Delete(ctx, s.sessionKey(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if sess != nil {
		e := s.newEntry(name, sess)
		_ = s.Storage.Delete(ctx, path.Join(s.subjectDir(e.subject), name))
		if e.psid != "" {
			_ = s.Storage.Delete(ctx, path.Join(s.providerDir(e.psid), name))
		}
	}
	s.invalidate(Invalidation{Session: name})
	if len(errs) > 0 {
		return fmt.Errorf("%w: %v", ErrStorage, errors.Join(errs...))
	}
	return nil
}

func (s *Sessions) invalidate(m Invalidation) {
	s.cache.Apply(m)
	if s.Bus != nil {
		s.Bus.Publish(m)
	}
}

// RevokeSubject ends every session of a subject (of this login's
// issuer) and returns how many it found.
func (s *Sessions) RevokeSubject(ctx context.Context, issuer, subject string) (int, error) {
	sub := storageName([]byte(issuer + "\x00" + subject))
	n, err := s.revokeListed(ctx, s.subjectDir(sub))
	s.invalidate(Invalidation{Subject: sub})
	return n, err
}

// RevokeProviderSession ends the sessions a provider session (the ID
// token's `sid`) started.
func (s *Sessions) RevokeProviderSession(ctx context.Context, issuer, sid string) (int, error) {
	return s.revokeListed(ctx, s.providerDir(storageName([]byte(issuer+"\x00"+sid))))
}

func (s *Sessions) revokeListed(ctx context.Context, dir string) (int, error) {
	keys, err := s.Storage.List(ctx, dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrStorage, err)
	}
	n := 0
	var errs []error
	for _, k := range keys {
		name := path.Base(k)
		sess, err := s.load(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sess != nil {
			n++
		}
		if err := s.revoke(ctx, name, sess); err != nil {
			errs = append(errs, err)
		}
		_ = s.Storage.Delete(ctx, k)
	}
	return n, errors.Join(errs...)
}

// Replace puts an updated session (a refresh) in the storage and in this
// gateway's cache under cookie, and tells the other gateways to read it
// again.
func (s *Sessions) Replace(ctx context.Context, cookie, name string, sess *Session) error {
	if err := s.save(ctx, name, sess); err != nil {
		return err
	}
	e := s.newEntry(name, sess)
	e.lastSeen.Store(s.Now().UnixNano())
	s.cache.Apply(Invalidation{Session: name})
	s.cache.put(cookie, e, s.Now().UnixNano())
	if s.Bus != nil {
		s.Bus.Publish(Invalidation{Session: name})
	}
	return nil
}

// Counts are the admin API's figures of a login's sessions.
type Counts struct {
	// Sessions and Subjects are in the storage (the fleet's, with
	// `storage nats`), expired ones not yet swept included.
	Sessions int `json:"sessions"`
	Subjects int `json:"subjects"`
	// Cached are the sessions this gateway holds in memory.
	Cached int `json:"cached"`
}

// Count counts the sessions in the storage and in the cache.
func (s *Sessions) Count(ctx context.Context) (Counts, error) {
	c := Counts{Cached: s.cache.len()}
	for dir, n := range map[string]*int{path.Join(s.Prefix, "sessions"): &c.Sessions, path.Join(s.Prefix, "subjects"): &c.Subjects} {
		keys, err := s.Storage.List(ctx, dir, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("%w: %v", ErrStorage, err)
		}
		*n = len(keys)
	}
	return c, nil
}

// Sweep deletes expired sessions and index entries from the storage
// (reading only their clear expiry) and returns how many sessions.
func (s *Sessions) Sweep(ctx context.Context) (int, error) {
	now := s.Now()
	n := 0
	for _, dir := range []string{"sessions", "subjects", "provider_sessions"} {
		keys, err := s.Storage.List(ctx, path.Join(s.Prefix, dir), true)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return n, err
		}
		for _, k := range keys {
			rec, err := s.Storage.Load(ctx, k)
			if err != nil || len(rec) < 8 || !time.Unix(int64(getUint64(rec)), 0).Before(now) {
				continue
			}
			if s.Storage.Delete(ctx, k) == nil && dir == "sessions" {
				n++
			}
		}
	}
	return n, nil
}
