// Package apikeys is the format of the gateway's API keys and of the keys
// file that holds their hashes: making a key, hashing it, reading the file,
// and checking a presented key against it. It imports nothing of Caddy, so
// `caddy gateway apikey new` uses it, and gatewayctl without compiling in the gateway.
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
	"bytes"
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

	"github.com/apigate/gateway/internal/planname"
)

// FileFormat is what a keys file holds, for errors about keys files.
const FileFormat = "a keys file is a JSON array of entries " + EntryFormat + " ([] for none)"

// EntryFormat is one entry of a keys file, for errors about entries.
const EntryFormat = `{"id":"<id>","hash":"sha256:<64 hex digits>","sub":"<subject>"} (optional: "roles", "scope", "plan", "expires")`

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
	// Plan, when set, is the quota plan of the key's consumer (the
	// quota duty's plans; a plan claim in a token takes precedence).
	Plan string `json:"plan,omitempty"`

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

// KeyFormat is how a key is written, for errors about keys.
const KeyFormat = Prefix + "<id>_<secret>"

// SplitKey returns the id of a well-formed key, or an error (ErrMalformed)
// saying what is wrong with it and what a key looks like (never quoting
// the key): the reason a client is given.
func SplitKey(key string) (id string, err error) {
	if len(key) > MaxKeyLen {
		return "", ErrTooLong
	}
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		return "", malformed("does not start with " + Prefix)
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || !ValidID(id) {
		return "", malformed(fmt.Sprintf("the <id> is not 1 to %d letters, digits, '-' or '.' followed by _", MaxIDLen))
	}
	if len(secret) < minSecretLen {
		return "", malformed(fmt.Sprintf("the <secret> is shorter than %d characters", minSecretLen))
	}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return "", malformed("the <secret> has a character other than a letter, digit or '-'")
		}
	}
	return id, nil
}

// malformed is ErrMalformed with what is wrong and the key's format.
func malformed(what string) error {
	return fmt.Errorf("%w: %s (a key is %s)", ErrMalformed, what, KeyFormat)
}

// Reasons a presented key is refused; safe to show clients and to log.
// A malformed key's error wraps ErrMalformed with what is malformed.
var (
	ErrMalformed = errors.New("malformed key")
	ErrUnknown   = errors.New("unknown key")
	ErrExpired   = errors.New("key expired")
	// ErrTooLong is a key longer than MaxKeyLen (the handler does not
	// read such a key: a request's credential is bounded).
	ErrTooLong = malformed(fmt.Sprintf("longer than %d characters", MaxKeyLen))
)

// Check returns the entry of key when key is in the set and not expired at
// now. The hash comparison takes constant time. Errors are ErrMalformed
// (wrapped, with what is malformed), ErrUnknown (no such id, or the secret
// does not match) or ErrExpired.
func (s *Set) Check(key string, now time.Time) (*Entry, error) {
	id, err := SplitKey(key)
	if err != nil {
		return nil, err
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
// (index from 1, and id) and the field that is wrong.
func Parse(data []byte) (*Set, error) {
	raws, err := splitArray(data)
	if err != nil {
		return nil, err
	}
	entries := make([]*Entry, len(raws))
	for i, raw := range raws {
		if entries[i], err = decodeEntry(i+1, raw); err != nil {
			return nil, err
		}
	}
	set := &Set{byID: make(map[string]*Entry, len(entries))}
	for i, e := range entries {
		where := entryName(i+1, e.ID)
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
		if e.Plan != "" && !planname.Valid(e.Plan) {
			return nil, fmt.Errorf("%s: invalid plan %q: use 1 to %d letters, digits, '-' or '_'", where, e.Plan, planname.MaxLen)
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

// fields are the keys file's field names, with what each holds.
var fields = []struct{ name, want string }{
	{"id", "a string"}, {"hash", "a string"}, {"sub", "a string"},
	{"roles", "an array of strings"}, {"scope", "a string"}, {"expires", "a string"}, {"plan", "a string"},
}

// entryName names an entry in errors: `entry 2 (id "ci-deploy")`.
func entryName(n int, id string) string {
	if id == "" {
		return fmt.Sprintf("entry %d (no id)", n)
	}
	return fmt.Sprintf("entry %d (id %s)", n, strconv.Quote(id))
}

// splitArray returns the elements of the keys file's JSON array, saying
// what is wrong with a file that is not one.
func splitArray(data []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("empty: " + FileFormat)
	case trimmed[0] == '{':
		return nil, errors.New("not a JSON array of keys but a single object: put it in [ ] (" + FileFormat + ")")
	case trimmed[0] != '[':
		return nil, errors.New("not a JSON array of keys: it does not start with [ (" + FileFormat + ")")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raws []json.RawMessage
	if err := dec.Decode(&raws); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(data, se.Offset)
			return nil, fmt.Errorf("not a JSON array of keys: line %d, column %d: %v (%s)", line, col, err, FileFormat)
		}
		return nil, fmt.Errorf("not a JSON array of keys: %v (%s)", err, FileFormat)
	}
	if dec.More() {
		return nil, errors.New("not a JSON array of keys: data after the array")
	}
	return raws, nil
}

// position returns the line and column (from 1) of byte offset off.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// decodeEntry decodes the n-th entry strictly (no unknown field), with an
// error that names the entry and the field.
func decodeEntry(n int, raw json.RawMessage) (*Entry, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, fmt.Errorf("entry %d: null, want an object %s", n, EntryFormat)
	}
	// the id, for errors, even when the rest does not decode
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("entry %d: not an object %s", n, EntryFormat)
	}
	var id string
	for k, v := range probe {
		if strings.EqualFold(k, "id") {
			_ = json.Unmarshal(v, &id)
		}
	}
	where := entryName(n, id)
	e := new(Entry)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(e); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field, _, _ := strings.Cut(te.Field, ".")
			want := "another type"
			for _, f := range fields {
				if f.name == field {
					want = f.want
				}
			}
			return nil, fmt.Errorf("%s: field %s: want %s, got a JSON %s", where, field, want, te.Value)
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			name, _ = strconv.Unquote(name)
			return nil, fmt.Errorf("%s: unknown field %q%s", where, name, suggest(name))
		}
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	return e, nil
}

// suggest names the known field a misspelled one probably meant, and
// lists the fields otherwise.
func suggest(name string) string {
	lower := strings.ToLower(name)
	for _, f := range fields {
		if strings.HasPrefix(f.name, lower) || strings.HasPrefix(lower, f.name) {
			return fmt.Sprintf(" (did you mean %q?)", f.name)
		}
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return " (the fields are " + strings.Join(names, ", ") + ")"
}

// Append returns the keys file data with e added at the end of its array:
// data is the file as it is (nil or empty when there is none yet), and
// stays as it was written, entry for entry. e must not reuse an id of the
// file, and the result must load (Parse), or Append returns an error
// naming what is wrong; a file that does not load as it is is an error
// too, not something to add to.
func Append(data []byte, e Entry) ([]byte, error) {
	line, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	var out []byte
	if len(bytes.TrimSpace(data)) == 0 {
		out = []byte("[\n  " + string(line) + "\n]\n")
	} else {
		set, err := Parse(data)
		if err != nil {
			return nil, err
		}
		if set.byID[e.ID] != nil {
			return nil, fmt.Errorf("id %q is already in the keys file: choose another id", e.ID)
		}
		// the array's closing bracket is the last non-space byte
		body := bytes.TrimRight(data, " \t\r\n")
		head := bytes.TrimRight(body[:len(body)-1], " \t\r\n")
		out = append(out, head...)
		if head[len(head)-1] != '[' {
			out = append(out, ',')
		}
		out = append(out, "\n  "...)
		out = append(out, line...)
		out = append(out, "\n]\n"...)
	}
	if _, err := Parse(out); err != nil {
		return nil, fmt.Errorf("the new entry does not load: %v", err)
	}
	return out, nil
}
