// Package apikeys is the format of the gateway's API keys and of the keys
// file that holds their hashes: making a key, hashing it, reading the file,
// and checking a presented key against it. It imports nothing of Caddy, so
// `gatewayctl apikey new` uses it without compiling in the gateway.
//
// A key is `gk_<id>_<secret>`: the prefix makes a leaked key recognizable
// (secret scanners, logs), the id finds the key's entry in one map lookup,
// and the secret is 32 random bytes in hex. The file stores only
// `sha256:<hex>` of the whole key. A fast hash is right here: a key carries
// 256 random bits, so nobody can guess it from its hash by trying
// candidates, and a slow password hash (bcrypt, argon2) would only cost CPU
// on every request.
package apikeys

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Prefix starts every key.
const Prefix = "gk_"

// HashPrefix starts every hash in the keys file.
const HashPrefix = "sha256:"

// MaxIDLen bounds a key id; MaxKeyLen bounds a presented key.
const (
	MaxIDLen  = 64
	MaxKeyLen = 512
)

// minSecretLen is the shortest secret accepted in a presented key (128 bits
// in hex); New makes 64 hex digits.
const minSecretLen = 32

// Entry is one key in the keys file. It holds the key's hash, never the key.
type Entry struct {
	// ID names the key; it is part of the key and is the identity's
	// CredentialID (logged and audited; not secret).
	ID string `json:"id"`
	// Hash is "sha256:<64 hex digits>" of the whole key.
	Hash string `json:"hash"`
	// Sub is the subject the key authenticates.
	Sub string `json:"sub"`
	// Roles become the identity's `roles` claim.
	Roles []string `json:"roles,omitempty"`
	// Scope becomes the identity's `scope` claim (space-separated).
	Scope string `json:"scope,omitempty"`
	// Expires, when set, is the RFC 3339 time after which the key is
	// refused.
	Expires string `json:"expires,omitempty"`

	sum     [sha256.Size]byte
	expires time.Time
}

// ExpiresAt is the parsed Expires (zero: never).
func (e *Entry) ExpiresAt() time.Time { return e.expires }

// Set is a parsed keys file, by id.
type Set struct {
	byID map[string]*Entry
}

// Len is the number of keys.
func (s *Set) Len() int { return len(s.byID) }

// ValidID reports whether id can be a key id: 1 to 64 ASCII letters,
// digits, '-' and '.'. ('_' separates the parts of a key.)
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// New makes a key with the given id (a random one when id is empty) and
// returns it with its hash for the keys file.
func New(id string) (key, hash string, err error) {
	if id == "" {
		b := make([]byte, 6)
		if _, err := rand.Read(b); err != nil {
			return "", "", err
		}
		id = hex.EncodeToString(b)
	}
	if !ValidID(id) {
		return "", "", fmt.Errorf("invalid key id %q: use 1 to %d letters, digits, '-' or '.'", id, MaxIDLen)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", err
	}
	key = Prefix + id + "_" + hex.EncodeToString(secret)
	return key, Hash(key), nil
}

// Hash returns "sha256:<hex>" of key, as the keys file stores it.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// SplitKey returns the id of a well-formed key, or an error saying what
// is wrong with it (never quoting the key).
func SplitKey(key string) (id string, err error) {
	if len(key) > MaxKeyLen {
		return "", errors.New("malformed key: too long")
	}
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return "", errors.New("malformed key: no " + Prefix + " prefix")
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || !ValidID(id) {
		return "", errors.New("malformed key: bad id")
	}
	if len(secret) < minSecretLen {
		return "", errors.New("malformed key: secret too short")
	}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "", errors.New("malformed key: bad character in secret")
		}
	}
	return id, nil
}

// Reasons a presented key is refused; safe to show clients and to log.
var (
	ErrMalformed = errors.New("malformed key")
	ErrUnknown   = errors.New("unknown key")
	ErrExpired   = errors.New("key expired")
)

// Check returns the entry of key when key is in the set and not expired at
// now. The hash comparison takes constant time. Errors are ErrMalformed,
// ErrUnknown (no such id, or the secret does not match) or ErrExpired.
func (s *Set) Check(key string, now time.Time) (*Entry, error) {
	id, err := SplitKey(key)
	if err != nil {
		return nil, ErrMalformed
	}
	e := s.byID[id]
	if e == nil {
		return nil, ErrUnknown
	}
	sum := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 {
		return nil, ErrUnknown
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return nil, ErrExpired
	}
	return e, nil
}

// Parse reads a keys file: a JSON array of entries. Errors name the entry
// (index and id) and the field that is wrong.
func Parse(data []byte) (*Set, error) {
	var entries []*Entry
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("not a JSON array of keys: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not a JSON array of keys: data after the array")
	}
	set := &Set{byID: make(map[string]*Entry, len(entries))}
	for i, e := range entries {
		if e == nil {
			return nil, fmt.Errorf("entry %d: null", i+1)
		}
		where := fmt.Sprintf("entry %d (id %s)", i+1, strconv.Quote(e.ID))
		if !ValidID(e.ID) {
			return nil, fmt.Errorf("%s: invalid id: use 1 to %d letters, digits, '-' or '.'", where, MaxIDLen)
		}
		if set.byID[e.ID] != nil {
			return nil, fmt.Errorf("%s: duplicate id", where)
		}
		h, ok := strings.CutPrefix(e.Hash, HashPrefix)
		if !ok || len(h) != 2*sha256.Size {
			return nil, fmt.Errorf("%s: invalid hash: want %s<64 hex digits>", where, HashPrefix)
		}
		if _, err := hex.Decode(e.sum[:], []byte(h)); err != nil {
			return nil, fmt.Errorf("%s: invalid hash: want %s<64 hex digits>", where, HashPrefix)
		}
		if e.Sub == "" {
			return nil, fmt.Errorf("%s: sub is empty", where)
		}
		for _, r := range e.Roles {
			if r == "" || strings.ContainsAny(r, " ,\t") {
				return nil, fmt.Errorf("%s: invalid role %q: empty or contains a space or comma", where, r)
			}
		}
		if e.Expires != "" {
			t, err := time.Parse(time.RFC3339, e.Expires)
			if err != nil {
				return nil, fmt.Errorf("%s: invalid expires %q: want an RFC 3339 time such as 2027-01-31T00:00:00Z", where, e.Expires)
			}
			e.expires = t
		}
		set.byID[e.ID] = e
	}
	return set, nil
}
