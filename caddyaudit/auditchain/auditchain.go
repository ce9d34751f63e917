// Package auditchain is the tamper-evidence format of the gateway's audit
// events: how an event's hash links it to the one before, how checkpoints
// are signed, and how a trail is verified (Verify). It imports nothing of
// Caddy, so `caddy gateway audit verify`, gatewayctl and third-party checkers can use it.
//
// A chain is the sequence of events one gateway process records with the
// same key. Every event of a chain carries
//
//	"chain": the chain's id (16 hex digits, random at the chain's start),
//	"seq":   its position, from 0,
//	"hash":  hex(SHA-256(previous hash + "\n" + canonical JSON of the event
//	         without its "hash" member)); the previous hash of seq 0 is
//	         64 zeros (Genesis).
//
// The canonical JSON is RFC 8785 (JCS): members sorted by name, no spaces,
// numbers in their shortest form, strings escaped minimally (Canonical).
//
// Seq 0 is a "kind":"chain_start" event (time, node, key_id). Every
// checkpoint interval, and when the gateway stops, a "kind":"checkpoint"
// event follows with last_seq, last_hash (the event before it) and
// signature: base64 of the Ed25519 signature of CheckpointMessage. Anyone
// with the public key can then check that no event up to last_seq was
// removed, added, reordered or changed, and an edit cannot be hidden by
// recomputing the hashes after it: the signatures would not match.
package auditchain

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"strconv"
)

// Genesis is the previous hash of an event with seq 0.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// Kinds of events that are not requests.
const (
	KindStart      = "chain_start"
	KindCheckpoint = "checkpoint"
)

// Link returns the hash of an event: prev is the previous event's hash
// (Genesis for seq 0) and canonical the event's canonical JSON without its
// "hash" member.
func Link(prev string, canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{'\n'})
	h.Write(canonical)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// CheckpointMessage is what a checkpoint's signature signs.
func CheckpointMessage(chain string, lastSeq uint64, lastHash string) []byte {
	b := []byte("apigate-audit-checkpoint-v1\n")
	b = append(b, chain...)
	b = append(b, '\n')
	b = strconv.AppendUint(b, lastSeq, 10)
	b = append(b, '\n')
	return append(b, lastHash...)
}

// KeyID names a public key in events: the first 16 hex digits of the
// SHA-256 of its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadPrivateKey reads an Ed25519 private key from a PEM file holding a
// PKCS #8 "PRIVATE KEY" block (as `openssl genpkey -algorithm ed25519` or
// `caddy gateway audit keygen` write it).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	blk, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: PEM block %q, want PRIVATE KEY", path, blk.Type)
	}
	return parsePrivateKey(path, blk.Bytes)
}

// LoadPublicKey reads an Ed25519 public key from a PEM file holding a PKIX
// "PUBLIC KEY" block, or the public half of a private key file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	blk, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: not a PKIX public key: %w", path, err)
		}
		return asEd25519[ed25519.PublicKey](path, k)
	case "PRIVATE KEY":
		priv, err := parsePrivateKey(path, blk.Bytes)
		if err != nil {
			return nil, err
		}
		return priv.Public().(ed25519.PublicKey), nil
	}
	return nil, fmt.Errorf("%s: PEM block %q, want PUBLIC KEY", path, blk.Type)
}

func parsePrivateKey(path string, der []byte) (ed25519.PrivateKey, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PKCS #8 private key: %w", path, err)
	}
	return asEd25519[ed25519.PrivateKey](path, k)
}

func asEd25519[K ed25519.PublicKey | ed25519.PrivateKey](path string, k any) (K, error) {
	key, ok := k.(K)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, k)
	}
	return key, nil
}

func readPEM(path string) (*pem.Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return blk, nil
}

// MarshalKeys returns PEM encodings of a key pair, for files.
func MarshalKeys(priv ed25519.PrivateKey) (privPEM, pubPEM []byte, err error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pder, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), nil
}
