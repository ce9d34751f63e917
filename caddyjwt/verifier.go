package caddyjwt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"
)

// Defaults of Options.
const (
	DefaultMaxTokenSize = 8 << 10
	DefaultCacheSize    = 10000
	DefaultCacheTTL     = 5 * time.Minute
)

// Options are the rules a Verifier applies besides the signature.
type Options struct {
	// Algorithms is the allow-list of algorithms; empty allows every
	// supported algorithm that a configured key can verify. "none" is
	// never accepted.
	Algorithms []string
	// Issuers: when set, `iss` must be one of them.
	Issuers []string
	// Audiences: when set, `aud` (a string or an array) must hold one of them.
	Audiences []string
	// Leeway is the clock skew tolerated on exp, nbf and iat.
	Leeway time.Duration
	// RequireClaims are claim paths (see ParseClaimPath) that must be present.
	RequireClaims []string
	// MaxTokenSize bounds the token length in bytes (0: DefaultMaxTokenSize).
	MaxTokenSize int
	// CacheSize bounds the verified-token cache (0: DefaultCacheSize;
	// negative: no cache).
	CacheSize int
	// CacheTTL caps how long a verified token is cached; an entry never
	// outlives the token's exp (0: DefaultCacheTTL).
	CacheTTL time.Duration
	// Now returns the current time (nil: time.Now). For tests.
	Now func() time.Time `json:"-"`
}

// KeySet is a source of keys that can change, such as a JWKS URL.
type KeySet interface {
	// Keys returns the current keys; the slice must not be modified.
	Keys() []*Key
	// Generation changes whenever the keys change.
	Generation() uint64
	// RefreshEarly fetches the keys again now unless that was done less
	// than a cooldown ago; it reports whether it fetched.
	RefreshEarly(ctx context.Context) bool
}

// Error is a verification failure. Reason is safe to show to the client
// and to log: it never holds key material or the token. Label is the
// low-cardinality form of Reason used as a metrics label.
type Error struct {
	Reason string
	Label  string
}

func (e *Error) Error() string { return e.Reason }

func newErr(reason string) *Error { return &Error{Reason: reason, Label: reason} }

// Verification failures.
var (
	ErrTooLarge         = newErr("token too large")
	ErrMalformed        = newErr("malformed token")
	ErrBadEncoding      = newErr("malformed token encoding")
	ErrBadHeader        = newErr("malformed token header")
	ErrBadClaims        = newErr("malformed token claims")
	ErrAlgNone          = newErr("unsigned token")
	ErrUnsupportedAlg   = newErr("unsupported algorithm")
	ErrAlgNotAllowed    = newErr("algorithm not allowed")
	ErrCritical         = newErr("unsupported critical header")
	ErrUnknownKey       = newErr("unknown key")
	ErrKeyMismatch      = newErr("algorithm does not match key")
	ErrSignature        = newErr("invalid signature")
	ErrExpired          = newErr("token expired")
	ErrNotYetValid      = newErr("token not yet valid")
	ErrIssuedInFuture   = newErr("token issued in the future")
	ErrIssuer           = newErr("invalid issuer")
	ErrUnknownIssuer    = newErr("unknown issuer")
	ErrAudience         = newErr("invalid audience")
	errMissingClaimBase = "missing claim"
	errClaimTypeBase    = "invalid claim"
)

func claimErr(base, name string) *Error {
	return &Error{Reason: base + " " + name, Label: base}
}

// Verifier verifies JWTs against static keys and key sets, applies the
// claim rules of its Options and caches verified tokens. It is safe for
// concurrent use and has no Caddy dependency.
//
// A Verifier made by NewVerifier has one set of keys and rules for every
// token (any of its keys verifies a token of any of its issuers). One made
// by NewProvidersVerifier picks, by the token's `iss`, exactly one
// Provider, and only that provider's keys and rules apply.
type Verifier struct {
	opts     Options
	flat     *rules            // NewVerifier: the one set of keys and rules
	byIssuer map[string]*rules // NewProvidersVerifier: iss -> its provider
	sets     []KeySet          // every key set, for the cache generation
	required []ClaimPath
	maxSize  int
	ttl      time.Duration
	cache    *Cache
	now      func() time.Time
}

// rules are the keys and checks of one provider.
type rules struct {
	name      string
	allowed   map[string]bool // nil: every algorithm
	static    []*Key
	sets      []KeySet
	issuers   []string
	audiences []string
	leeway    float64
}

// Provider is one identity provider of a Verifier: tokens whose `iss`
// equals Issuer are verified with its keys and rules, and with no other.
type Provider struct {
	// Name identifies the provider in errors and logs.
	Name string
	// Issuer is the exact `iss` of the provider's tokens.
	Issuer string
	// Keys and Sets are the provider's keys; at least one is required.
	Keys []*Key
	Sets []KeySet
	// Algorithms is the provider's allow-list (empty: every algorithm
	// its keys can verify).
	Algorithms []string
	// Audiences: when set, `aud` must hold one of them.
	Audiences []string
	// Leeway is the clock skew tolerated on exp, nbf and iat.
	Leeway time.Duration
}

func newRules(name string, algorithms, issuers, audiences []string, leeway time.Duration, keys []*Key, sets []KeySet) (*rules, error) {
	if len(keys) == 0 && len(sets) == 0 {
		return nil, errors.New("no key configured: set hmac_secret, public_key or jwks_url")
	}
	p := &rules{name: name, static: keys, sets: sets, issuers: issuers, audiences: audiences}
	if len(algorithms) > 0 {
		p.allowed = make(map[string]bool)
		for _, name := range algorithms {
			if strings.EqualFold(name, "none") {
				return nil, errors.New(`algorithm "none" is never accepted`)
			}
			if lookupAlg(name) == nil {
				return nil, fmt.Errorf("unsupported algorithm %q (supported: %s)", name, strings.Join(SupportedAlgorithms(), ", "))
			}
			p.allowed[name] = true
		}
	}
	if leeway < 0 {
		return nil, fmt.Errorf("invalid leeway %s: must not be negative", leeway)
	}
	p.leeway = leeway.Seconds()
	return p, nil
}

// NewVerifier builds a Verifier. At least one key or key set is required.
// Every key verifies tokens of every issuer in opts.Issuers: use
// NewProvidersVerifier to bind keys to an issuer.
func NewVerifier(opts Options, keys []*Key, sets ...KeySet) (*Verifier, error) {
	p, err := newRules("", opts.Algorithms, opts.Issuers, opts.Audiences, opts.Leeway, keys, sets)
	if err != nil {
		return nil, err
	}
	v := &Verifier{opts: opts, flat: p, sets: sets}
	return v, v.init()
}

// NewProvidersVerifier builds a Verifier whose tokens are each verified by
// the one provider their `iss` names; a token of another issuer fails with
// ErrUnknownIssuer. opts.Algorithms, Issuers, Audiences and Leeway are not
// used (each provider has its own).
func NewProvidersVerifier(opts Options, providers []Provider) (*Verifier, error) {
	if len(providers) == 0 {
		return nil, errors.New("no provider configured")
	}
	v := &Verifier{opts: opts, byIssuer: make(map[string]*rules, len(providers))}
	names := make(map[string]bool, len(providers))
	for _, pc := range providers {
		if pc.Name == "" {
			return nil, errors.New("provider without a name")
		}
		if names[pc.Name] {
			return nil, fmt.Errorf("provider %q is defined twice", pc.Name)
		}
		names[pc.Name] = true
		if pc.Issuer == "" {
			return nil, fmt.Errorf("provider %q: no issuer", pc.Name)
		}
		if other, dup := v.byIssuer[pc.Issuer]; dup {
			return nil, fmt.Errorf("providers %q and %q have the same issuer %q: a token's iss must pick one provider", other.name, pc.Name, pc.Issuer)
		}
		p, err := newRules(pc.Name, pc.Algorithms, []string{pc.Issuer}, pc.Audiences, pc.Leeway, pc.Keys, pc.Sets)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %v", pc.Name, err)
		}
		v.byIssuer[pc.Issuer] = p
		v.sets = append(v.sets, pc.Sets...)
	}
	return v, v.init()
}

func (v *Verifier) init() error {
	opts := v.opts
	v.now = opts.Now
	if v.now == nil {
		v.now = time.Now
	}
	for _, rc := range opts.RequireClaims {
		p, err := ParseClaimPath(rc)
		if err != nil {
			return fmt.Errorf("require_claims: %v", err)
		}
		v.required = append(v.required, p)
	}
	v.maxSize = opts.MaxTokenSize
	if v.maxSize <= 0 {
		v.maxSize = DefaultMaxTokenSize
	}
	v.ttl = opts.CacheTTL
	if v.ttl <= 0 {
		v.ttl = DefaultCacheTTL
	}
	switch {
	case opts.CacheSize == 0:
		v.cache = NewCache(DefaultCacheSize)
	case opts.CacheSize > 0:
		v.cache = NewCache(opts.CacheSize)
	}
	return nil
}

// MaxTokenSize returns the largest token accepted, in bytes.
func (v *Verifier) MaxTokenSize() int { return v.maxSize }

// Cache returns the verified-token cache, or nil when caching is off.
func (v *Verifier) Cache() *Cache { return v.cache }

func (v *Verifier) generation() uint64 {
	var g uint64
	for _, s := range v.sets {
		g += s.Generation()
	}
	return g
}

// Verify checks token and returns its identity. Failures are *Error.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	id, _, err := v.VerifyCached(ctx, token)
	return id, err
}

// VerifyCached is Verify that also reports whether the answer came from
// the cache of verified tokens.
func (v *Verifier) VerifyCached(ctx context.Context, token string) (*Identity, bool, error) {
	if len(token) > v.maxSize {
		return nil, false, ErrTooLarge
	}
	if v.cache == nil {
		id, err := v.verify(ctx, token, v.now(), 0, nil)
		return id, false, err
	}
	key := hashToken(token)
	now := v.now()
	gen := v.generation()
	if id, ok := v.cache.get(&key, now.UnixNano(), gen); ok {
		return id, true, nil
	}
	id, err := v.verify(ctx, token, now, gen, &key)
	return id, false, err
}

type header struct {
	Alg  string          `json:"alg"`
	Kid  string          `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

var b64url = base64.RawURLEncoding.Strict()

// bytesOf views s as bytes without copying; the callee must not modify or
// retain them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (v *Verifier) verify(ctx context.Context, token string, now time.Time, gen uint64, key *tokenKey) (*Identity, error) {
	// encoding/base64 skips \r and \n even in Strict mode, so a token
	// with one inside its signature would verify as the same token under
	// another string (another cache key, another value for any list of
	// tokens kept by their text). A JWT never contains them.
	if strings.ContainsAny(token, "\r\n") {
		return nil, ErrBadEncoding
	}
	d1 := strings.IndexByte(token, '.')
	if d1 <= 0 {
		return nil, ErrMalformed
	}
	rest := token[d1+1:]
	d2 := strings.IndexByte(rest, '.')
	if d2 <= 0 || strings.IndexByte(rest[d2+1:], '.') >= 0 {
		return nil, ErrMalformed
	}
	hSeg, pSeg, sSeg := token[:d1], rest[:d2], rest[d2+1:]

	hLen, pLen, sLen := b64url.DecodedLen(len(hSeg)), b64url.DecodedLen(len(pSeg)), b64url.DecodedLen(len(sSeg))
	buf := make([]byte, hLen+pLen+sLen)
	n, err := b64url.Decode(buf[:hLen], bytesOf(hSeg))
	if err != nil {
		return nil, ErrBadEncoding
	}
	hdrJSON := buf[:n]
	var h header
	if err := json.Unmarshal(hdrJSON, &h); err != nil {
		return nil, ErrBadHeader
	}
	if h.Alg == "" || strings.EqualFold(h.Alg, "none") {
		return nil, ErrAlgNone
	}
	a := lookupAlg(h.Alg)
	if a == nil {
		return nil, ErrUnsupportedAlg
	}
	p := v.flat
	if p != nil && p.allowed != nil && !p.allowed[a.name] {
		return nil, ErrAlgNotAllowed
	}
	if len(h.Crit) > 0 && string(h.Crit) != "null" {
		return nil, ErrCritical
	}
	if sSeg == "" {
		return nil, ErrSignature
	}
	n, err = b64url.Decode(buf[hLen:hLen+pLen], bytesOf(pSeg))
	if err != nil {
		return nil, ErrBadEncoding
	}
	payload := buf[hLen : hLen+n]
	n, err = b64url.Decode(buf[hLen+pLen:], bytesOf(sSeg))
	if err != nil {
		return nil, ErrBadEncoding
	}
	sig := buf[hLen+pLen : hLen+pLen+n]
	signed := token[:d1+1+d2]

	var claims map[string]any
	if p == nil {
		// providers: the unverified iss picks the one provider whose keys
		// and rules apply; the signature check below proves it
		if err := json.Unmarshal(payload, &claims); err != nil || claims == nil {
			return nil, ErrBadClaims
		}
		iss, _ := claims["iss"].(string)
		if p = v.byIssuer[iss]; p == nil {
			return nil, ErrUnknownIssuer
		}
		if p.allowed != nil && !p.allowed[a.name] {
			return nil, ErrAlgNotAllowed
		}
	}

	k, err := v.checkSignature(ctx, p, a, h.Kid, bytesOf(signed), sig)
	if err != nil {
		return nil, err
	}

	if claims == nil {
		if err := json.Unmarshal(payload, &claims); err != nil || claims == nil {
			return nil, ErrBadClaims
		}
	}
	id := &Identity{Algorithm: a.name, KeyID: h.Kid, Claims: claims, Method: MethodJWT}
	if k.ID != "" {
		id.KeyID = k.ID
	}
	exp, err := v.checkClaims(p, id, now)
	if err != nil {
		return nil, err
	}
	if key != nil {
		deadline := now.Add(v.ttl).UnixNano()
		if exp != 0 {
			// entries die at exp even if the leeway would still accept it
			if e := exp * 1e9; e < float64(deadline) {
				deadline = int64(e)
			}
		}
		if deadline > now.UnixNano() {
			v.cache.put(key, cacheEntry{id: id, expires: deadline, gen: gen}, now.UnixNano())
		}
	}
	return id, nil
}

// checkSignature finds the key for kid and alg, and verifies sig with it.
// The algorithm must fit the key's type (and the key's own alg if it has
// one): the header alone never chooses how a key is used.
func (v *Verifier) checkSignature(ctx context.Context, p *rules, a *alg, kid string, signed, sig []byte) (*Key, error) {
	var (
		found    bool // a key answered to kid
		mismatch bool // a candidate key cannot do alg
		tried    bool // a signature check ran
	)
	try := func(k *Key) bool {
		if !k.allows(a) {
			mismatch = true
			return false
		}
		tried = true
		return k.verify(a, signed, sig) == nil
	}
	search := func() *Key {
		if kid != "" {
			for _, k := range p.static {
				if k.ID == kid {
					found = true
					if try(k) {
						return k
					}
				}
			}
			for _, s := range p.sets {
				for _, k := range s.Keys() {
					if k.ID == kid {
						found = true
						if try(k) {
							return k
						}
					}
				}
			}
			if found {
				return nil
			}
		}
		// no kid, or a kid no key claims: keys without an ID (plain
		// secrets, PEM files, JWKs without kid) may verify it; a token
		// without kid may match any key
		for _, k := range p.static {
			if k.ID == "" || kid == "" {
				if try(k) {
					return k
				}
			}
		}
		for _, s := range p.sets {
			for _, k := range s.Keys() {
				if kid == "" || k.ID == "" {
					if try(k) {
						return k
					}
				}
			}
		}
		return nil
	}
	if k := search(); k != nil {
		return k, nil
	}
	if (kid != "" && !found || kid == "" && !tried) && len(p.sets) > 0 {
		// a key the sets do not know yet: maybe the issuer rotated, or the
		// first fetch has not ended (then RefreshEarly waits for it)
		refreshed := false
		for _, s := range p.sets {
			if s.RefreshEarly(ctx) {
				refreshed = true
			}
		}
		if refreshed {
			found, mismatch, tried = false, false, false
			if k := search(); k != nil {
				return k, nil
			}
		}
	}
	switch {
	case tried:
		return nil, ErrSignature
	case mismatch && (kid == "" || found):
		// (a kid no key claims is an unknown key, even when keys without
		// an ID, say an HMAC secret, do not fit the algorithm: an RS256
		// token while the JWKS has not loaded yet said "algorithm does
		// not match key")
		return nil, ErrKeyMismatch
	default:
		return nil, ErrUnknownKey
	}
}

func numClaim(claims map[string]any, name string) (float64, bool, *Error) {
	v, ok := claims[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	f, isNum := v.(float64)
	if !isNum {
		return 0, false, claimErr(errClaimTypeBase, name)
	}
	return f, true, nil
}

// checkClaims applies the time, issuer, audience and required-claim rules
// and fills the identity's typed fields. It returns exp (0 if absent).
func (v *Verifier) checkClaims(p *rules, id *Identity, now time.Time) (float64, error) {
	c := id.Claims
	t := float64(now.UnixNano()) / 1e9
	exp, hasExp, err := numClaim(c, "exp")
	if err != nil {
		return 0, err
	}
	if hasExp {
		if t >= exp+p.leeway {
			return 0, ErrExpired
		}
		sec := int64(exp)
		id.ExpiresAt = time.Unix(sec, int64((exp-float64(sec))*1e9))
	}
	nbf, hasNbf, err := numClaim(c, "nbf")
	if err != nil {
		return 0, err
	}
	if hasNbf && t+p.leeway < nbf {
		return 0, ErrNotYetValid
	}
	iat, hasIat, err := numClaim(c, "iat")
	if err != nil {
		return 0, err
	}
	if hasIat && t+p.leeway < iat {
		return 0, ErrIssuedInFuture
	}
	if sub, ok := c["sub"]; ok && sub != nil {
		s, isStr := sub.(string)
		if !isStr {
			return 0, claimErr(errClaimTypeBase, "sub")
		}
		id.Subject = s
	}
	if iss, ok := c["iss"]; ok && iss != nil {
		s, isStr := iss.(string)
		if !isStr {
			return 0, claimErr(errClaimTypeBase, "iss")
		}
		id.Issuer = s
	}
	if len(p.issuers) > 0 {
		ok := false
		for _, want := range p.issuers {
			if id.Issuer == want {
				ok = true
				break
			}
		}
		if !ok {
			return 0, ErrIssuer
		}
	}
	switch aud := c["aud"].(type) {
	case nil:
	case string:
		id.Audience = []string{aud}
	case []any:
		id.Audience = make([]string, 0, len(aud))
		for _, e := range aud {
			s, ok := e.(string)
			if !ok {
				return 0, claimErr(errClaimTypeBase, "aud")
			}
			id.Audience = append(id.Audience, s)
		}
	default:
		return 0, claimErr(errClaimTypeBase, "aud")
	}
	if len(p.audiences) > 0 {
		ok := false
	outer:
		for _, have := range id.Audience {
			for _, want := range p.audiences {
				if have == want {
					ok = true
					break outer
				}
			}
		}
		if !ok {
			return 0, ErrAudience
		}
	}
	for _, p := range v.required {
		if val, ok := p.Lookup(c); !ok || val == nil {
			return 0, claimErr(errMissingClaimBase, p.String())
		}
	}
	return exp, nil
}
