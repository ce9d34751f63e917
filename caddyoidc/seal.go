package caddyoidc

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// A Keyring seals what the gateway keeps of a session (in the storage, and
// in the pending-login cookie) and signs session ids. It holds one or more
// keys: the first seals and signs, every one opens and verifies, so a key
// can be rotated without ending the sessions sealed with the one before
// (docs/oidc.md, "Key rotation").
//
// Each key is derived from a secret with HKDF-SHA256: an AES-256-GCM key
// for sealing, an HMAC-SHA256 key for session ids, and a 4-byte key id that
// sealed records carry so that opening picks the right key at once.
type Keyring struct {
	keys []ringKey
}

type ringKey struct {
	id   [4]byte
	aead cipher.AEAD
	mac  [32]byte
}

// IDs names the ring's keys, in order, by their derived key ids (no key
// material): two rings with the same IDs open and verify the same records.
func (k *Keyring) IDs() string {
	var b strings.Builder
	for _, rk := range k.keys {
		b.WriteString(hex.EncodeToString(rk.id[:]))
		b.WriteByte(' ')
	}
	return b.String()
}

// MinSecretLen is the shortest secret a key is derived from.
const MinSecretLen = 32

// NewKeyring derives a keyring from secrets, the current one first.
func NewKeyring(secrets ...[]byte) (*Keyring, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no session key")
	}
	kr := &Keyring{}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("session key #%d is %d bytes: at least %d are needed (e.g. `openssl rand -base64 32`)", i+1, len(s), MinSecretLen)
		}
		var k ringKey
		enc, err := hkdf.Key(sha256.New, s, nil, "apigate oidc_login seal v1", 32)
		if err != nil {
			return nil, err
		}
		mac, err := hkdf.Key(sha256.New, s, nil, "apigate oidc_login session id v1", 32)
		if err != nil {
			return nil, err
		}
		id, err := hkdf.Key(sha256.New, s, nil, "apigate oidc_login key id v1", 4)
		if err != nil {
			return nil, err
		}
		block, err := aes.NewCipher(enc)
		if err != nil {
			return nil, err
		}
		if k.aead, err = cipher.NewGCM(block); err != nil {
			return nil, err
		}
		copy(k.mac[:], mac)
		copy(k.id[:], id)
		for _, o := range kr.keys {
			if o.id == k.id {
				return nil, fmt.Errorf("session key #%d is given twice", i+1)
			}
		}
		kr.keys = append(kr.keys, k)
	}
	return kr, nil
}

// sealVersion is the first byte of a sealed record.
const sealVersion = 1

// ErrOpen is the one error of a record that does not open: tampered,
// truncated, sealed with a key the ring does not hold, or bound to other
// associated data. It says nothing more on purpose.
var ErrOpen = errors.New("sealed record does not open")

// Seal encrypts and authenticates plaintext with the current key, bound to
// ad (the record's storage key, so that a record copied under another key
// does not open). The result is version, key id, nonce, ciphertext.
func (kr *Keyring) Seal(plaintext, ad []byte) []byte {
	k := &kr.keys[0]
	ns := k.aead.NonceSize()
	out := make([]byte, 1+4+ns, 1+4+ns+len(plaintext)+k.aead.Overhead())
	out[0] = sealVersion
	copy(out[1:5], k.id[:])
	if _, err := rand.Read(out[5 : 5+ns]); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return k.aead.Seal(out, out[5:5+ns], plaintext, ad)
}

// Open reverses Seal, with any key of the ring.
func (kr *Keyring) Open(sealed, ad []byte) ([]byte, error) {
	if len(sealed) < 5 || sealed[0] != sealVersion {
		return nil, ErrOpen
	}
	for i := range kr.keys {
		k := &kr.keys[i]
		if subtle.ConstantTimeCompare(k.id[:], sealed[1:5]) != 1 {
			continue
		}
		ns := k.aead.NonceSize()
		if len(sealed) < 5+ns+k.aead.Overhead() {
			return nil, ErrOpen
		}
		pt, err := k.aead.Open(nil, sealed[5:5+ns], sealed[5+ns:], ad)
		if err != nil {
			return nil, ErrOpen
		}
		return pt, nil
	}
	return nil, ErrOpen
}

// Session ids: 32 random bytes and a 16-byte tag (HMAC-SHA256 with the
// ring's current id key, truncated), base64url without padding: 64
// characters. The tag lets a gateway refuse a forged or altered id without
// a storage read; the random part alone names the session (its storage key
// is a hash of it, so reading the storage gives no usable cookie).
const (
	idRandomLen = 32
	idTagLen    = 16
	// SessionIDLen is the length of a session id in a cookie.
	SessionIDLen = (idRandomLen + idTagLen) * 4 / 3
)

// NewSessionID returns a new session id (signed with the current key).
func (kr *Keyring) NewSessionID() string {
	var raw [idRandomLen + idTagLen]byte
	if _, err := rand.Read(raw[:idRandomLen]); err != nil {
		panic(err)
	}
	tag := kr.keys[0].tag(raw[:idRandomLen])
	copy(raw[idRandomLen:], tag[:idTagLen])
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

func (k *ringKey) tag(random []byte) [32]byte {
	m := hmac.New(sha256.New, k.mac[:])
	m.Write(random)
	var out [32]byte
	m.Sum(out[:0])
	return out
}

// CheckSessionID verifies a session id's tag with any key of the ring and
// returns its storage name: the hex SHA-256 of its random part. A
// malformed or forged id is false.
func (kr *Keyring) CheckSessionID(id string) (string, bool) {
	if len(id) != SessionIDLen {
		return "", false
	}
	var raw [idRandomLen + idTagLen]byte
	n, err := base64.RawURLEncoding.Strict().Decode(raw[:], []byte(id))
	if err != nil || n != len(raw) {
		return "", false
	}
	ok := false
	for i := range kr.keys {
		tag := kr.keys[i].tag(raw[:idRandomLen])
		if hmac.Equal(tag[:idTagLen], raw[idRandomLen:]) {
			ok = true
			break
		}
	}
	if !ok {
		return "", false
	}
	return storageName(raw[:idRandomLen]), true
}

// storageName is the hex SHA-256 of b: how a session, a subject or a
// provider session id is named in the storage.
func storageName(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// putUint64 and getUint64 frame the clear-text expiry stored before a
// sealed session (the sweeper reads it without opening the record).
func putUint64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }
func getUint64(b []byte) uint64    { return binary.BigEndian.Uint64(b) }
