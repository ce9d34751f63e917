package caddyjwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"strconv"
	"strings"
	"sync"
)

// keyFamily is the kind of a verification key. The family of the key that
// verifies a token decides which algorithms are possible, so a token's
// header can never make an RSA public key act as an HMAC secret.
type keyFamily uint8

const (
	familyHMAC keyFamily = iota + 1
	familyRSA
	familyEC
	familyEd25519
)

func (f keyFamily) String() string {
	switch f {
	case familyHMAC:
		return "HMAC"
	case familyRSA:
		return "RSA"
	case familyEC:
		return "EC"
	case familyEd25519:
		return "Ed25519"
	}
	return "unknown"
}

// alg describes one JWS algorithm.
type alg struct {
	name   string
	family keyFamily
	hash   crypto.Hash
	pss    bool
	curve  elliptic.Curve // ES*: the only curve this algorithm may use
	keyLen int            // ES*: bytes of r and of s in the signature
}

// algs lists the supported algorithms. "none" is deliberately absent.
var algs = []*alg{
	{name: "HS256", family: familyHMAC, hash: crypto.SHA256},
	{name: "HS384", family: familyHMAC, hash: crypto.SHA384},
	{name: "HS512", family: familyHMAC, hash: crypto.SHA512},
	{name: "RS256", family: familyRSA, hash: crypto.SHA256},
	{name: "RS384", family: familyRSA, hash: crypto.SHA384},
	{name: "RS512", family: familyRSA, hash: crypto.SHA512},
	{name: "PS256", family: familyRSA, hash: crypto.SHA256, pss: true},
	{name: "PS384", family: familyRSA, hash: crypto.SHA384, pss: true},
	{name: "PS512", family: familyRSA, hash: crypto.SHA512, pss: true},
	{name: "ES256", family: familyEC, hash: crypto.SHA256, curve: elliptic.P256(), keyLen: 32},
	{name: "ES384", family: familyEC, hash: crypto.SHA384, curve: elliptic.P384(), keyLen: 48},
	{name: "ES512", family: familyEC, hash: crypto.SHA512, curve: elliptic.P521(), keyLen: 66},
	{name: "EdDSA", family: familyEd25519},
	{name: "Ed25519", family: familyEd25519}, // RFC 9864 fully-specified name
}

// lookupAlg returns the algorithm of that exact name, or nil.
func lookupAlg(name string) *alg {
	for _, a := range algs {
		if a.name == name {
			return a
		}
	}
	return nil
}

// SupportedAlgorithms returns the names of the algorithms jwt_auth verifies.
func SupportedAlgorithms() []string {
	out := make([]string, len(algs))
	for i, a := range algs {
		out[i] = a.name
	}
	return out
}

// Key is a verification key: an HMAC secret or a public key, with the key
// ID (`kid`) it answers to and, optionally, the one algorithm it is pinned
// to (a JWK's `alg`). Keys are immutable once built.
type Key struct {
	// ID is the key ID a token names in its `kid` header; empty for keys
	// that have none (a plain HMAC secret or PEM file).
	ID string
	// Algorithm, when set, is the only algorithm this key verifies.
	Algorithm string
	// Source says where the key came from (for logs, never the material).
	Source string

	family keyFamily
	secret []byte
	rsa    *rsa.PublicKey
	ec     *ecdsa.PublicKey
	ed     ed25519.PublicKey
	fp     [32]byte     // fingerprint of the key material, to detect changes
	macs   [3]sync.Pool // HMAC states keyed with secret, for SHA-256/384/512
}

func macIndex(h crypto.Hash) int {
	switch h {
	case crypto.SHA384:
		return 1
	case crypto.SHA512:
		return 2
	}
	return 0
}

// Family names the key type: HMAC, RSA, EC or Ed25519.
func (k *Key) Family() string { return k.family.String() }

// NewHMACKey returns a key that verifies HS256/384/512 with secret.
func NewHMACKey(secret []byte, kid string) (*Key, error) {
	if len(secret) == 0 {
		return nil, errors.New("empty HMAC secret")
	}
	k := &Key{ID: kid, family: familyHMAC, secret: append([]byte(nil), secret...), Source: "hmac_secret"}
	k.fp = sha256.Sum256(append([]byte("hmac:"), secret...))
	return k, nil
}

// NewPublicKey wraps an *rsa.PublicKey, *ecdsa.PublicKey or
// ed25519.PublicKey as a verification key.
func NewPublicKey(pub crypto.PublicKey, kid string) (*Key, error) {
	k := &Key{ID: kid}
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if p.N == nil || p.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits: at least 2048 are required", bitLen(p.N))
		}
		k.family, k.rsa = familyRSA, p
	case *ecdsa.PublicKey:
		switch p.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return nil, fmt.Errorf("unsupported elliptic curve %s", p.Curve.Params().Name)
		}
		k.family, k.ec = familyEC, p
	case ed25519.PublicKey:
		if len(p) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("Ed25519 key of %d bytes", len(p))
		}
		k.family, k.ed = familyEd25519, p
	case *ed25519.PublicKey:
		return NewPublicKey(*p, kid)
	default:
		return nil, fmt.Errorf("unsupported public key type %T", pub)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %v", err)
	}
	k.fp = sha256.Sum256(der)
	return k, nil
}

func bitLen(n *big.Int) int {
	if n == nil {
		return 0
	}
	return n.BitLen()
}

// Allows reports whether the key may verify a token of algorithm name.
func (k *Key) Allows(name string) bool {
	a := lookupAlg(name)
	return a != nil && k.allows(a)
}

func (k *Key) allows(a *alg) bool {
	if a.family != k.family {
		return false
	}
	if k.Algorithm != "" && k.Algorithm != a.name {
		return false
	}
	if a.family == familyEC && k.ec.Curve != a.curve {
		return false
	}
	return true
}

var errSignature = errors.New("invalid signature")

// verify checks sig over signed with algorithm a; the caller has checked
// k.allows(a).
func (k *Key) verify(a *alg, signed, sig []byte) error {
	switch a.family {
	case familyHMAC:
		// a keyed HMAC state is reused: no key schedule per token
		pool := &k.macs[macIndex(a.hash)]
		mac, _ := pool.Get().(hash.Hash)
		if mac == nil {
			mac = hmac.New(hashFunc(a.hash), k.secret)
		}
		mac.Write(signed)
		var buf [sha512.Size]byte
		ok := hmac.Equal(sig, mac.Sum(buf[:0]))
		mac.Reset()
		pool.Put(mac)
		if !ok {
			return errSignature
		}
		return nil
	case familyEd25519:
		if len(sig) != ed25519.SignatureSize || !ed25519.Verify(k.ed, signed, sig) {
			return errSignature
		}
		return nil
	}
	var buf [sha512.Size]byte
	digest := digestOf(a.hash, signed, buf[:0])
	switch a.family {
	case familyRSA:
		var err error
		if a.pss {
			err = rsa.VerifyPSS(k.rsa, a.hash, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto})
		} else {
			err = rsa.VerifyPKCS1v15(k.rsa, a.hash, digest, sig)
		}
		if err != nil {
			return errSignature
		}
		return nil
	case familyEC:
		if len(sig) != 2*a.keyLen {
			return errSignature
		}
		var der [2*66 + 12]byte
		asn1Sig, ok := ecdsaDER(der[:0], sig[:a.keyLen], sig[a.keyLen:])
		if !ok || !ecdsa.VerifyASN1(k.ec, digest, asn1Sig) {
			return errSignature
		}
		return nil
	}
	return errSignature
}

// ecdsaDER encodes a JWS ECDSA signature (r||s, RFC 7518 3.4) as the
// ASN.1 SEQUENCE of two INTEGERs that crypto/ecdsa verifies, without the
// big.Int round trip of ecdsa.Verify. It fails for a zero r or s.
func ecdsaDER(buf, r, s []byte) ([]byte, bool) {
	r, s = trimZeros(r), trimZeros(s)
	if len(r) == 0 || len(s) == 0 {
		return nil, false
	}
	intLen := func(b []byte) int {
		if b[0]&0x80 != 0 {
			return len(b) + 1
		}
		return len(b)
	}
	body := 2 + intLen(r) + 2 + intLen(s)
	buf = append(buf, 0x30)
	if body >= 0x80 {
		buf = append(buf, 0x81)
	}
	buf = append(buf, byte(body))
	for _, n := range [2][]byte{r, s} {
		buf = append(buf, 0x02, byte(intLen(n)))
		if n[0]&0x80 != 0 {
			buf = append(buf, 0)
		}
		buf = append(buf, n...)
	}
	return buf, true
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[0] == 0 {
		b = b[1:]
	}
	return b
}

func hashFunc(h crypto.Hash) func() hash.Hash {
	switch h {
	case crypto.SHA384:
		return sha512.New384
	case crypto.SHA512:
		return sha512.New
	default:
		return sha256.New
	}
}

func digestOf(h crypto.Hash, data, buf []byte) []byte {
	switch h {
	case crypto.SHA384:
		d := sha512.Sum384(data)
		return append(buf, d[:]...)
	case crypto.SHA512:
		d := sha512.Sum512(data)
		return append(buf, d[:]...)
	default:
		d := sha256.Sum256(data)
		return append(buf, d[:]...)
	}
}

// ParsePEMKeys reads every public key in PEM data: `PUBLIC KEY` (PKIX: RSA,
// ECDSA, Ed25519), `RSA PUBLIC KEY` (PKCS#1) and `CERTIFICATE` blocks.
// Private keys are refused so that a misplaced private key is noticed.
func ParsePEMKeys(data []byte, source string) ([]*Key, error) {
	var keys []*Key
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var pub crypto.PublicKey
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			pub, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			cert, err = x509.ParseCertificate(block.Bytes)
			if err == nil {
				pub = cert.PublicKey
			}
		case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("%s: PEM block %d is a private key (%s); give the public key", source, n, block.Type)
		default:
			return nil, fmt.Errorf("%s: PEM block %d has unsupported type %q", source, n, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: PEM block %d: %v", source, n, err)
		}
		k, err := NewPublicKey(pub, "")
		if err != nil {
			return nil, fmt.Errorf("%s: PEM block %d: %v", source, n, err)
		}
		k.Source = source
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key found", source)
	}
	return keys, nil
}

// jwk is one JSON Web Key (RFC 7517), with the members this package reads.
type jwk struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid"`
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
	Alg    string   `json:"alg"`
	Crv    string   `json:"crv"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
}

// ParseJWKS parses a JWK Set document. Keys that cannot verify signatures
// here (encryption keys, symmetric keys, unknown types or curves, weak RSA
// keys, algorithms that do not match the key) are skipped, and each skipped
// key is described in skipped; err is set only when the document itself is
// not a JWK Set.
func ParseJWKS(data []byte, source string) (keys []*Key, skipped []string, err error) {
	keys, skipped, enc, err := parseJWKS(data, source)
	return keys, append(skipped, enc...), err
}

// parseJWKS is ParseJWKS with the encryption keys (`use: enc`, an
// encryption `alg` or `key_ops`) described apart: identity providers such
// as Keycloak publish them beside their signature keys, so skipping them is
// no sign of trouble.
func parseJWKS(data []byte, source string) (keys []*Key, skipped, enc []string, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, nil, fmt.Errorf("not a JWK Set: %v", err)
	}
	if doc.Keys == nil {
		return nil, nil, nil, errors.New(`not a JWK Set: no "keys" array`)
	}
	for i, raw := range doc.Keys {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		if why := j.encryption(); why != "" {
			enc = append(enc, fmt.Sprintf("key %d (kid %s): encryption key (%s)", i, strconv.Quote(j.Kid), why))
			continue
		}
		k, err := j.key()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %s): %v", i, strconv.Quote(j.Kid), err))
			continue
		}
		k.Source = source
		keys = append(keys, k)
	}
	return keys, skipped, enc, nil
}

// encryption says why j is an encryption key, or "" when it is not one:
// `use: enc`, a JWE key-management `alg` (RFC 7518 section 4), or key_ops
// that only encrypt or wrap.
func (j *jwk) encryption() string {
	if j.Use == "enc" {
		return `use "enc"`
	}
	switch a := j.Alg; {
	case a == "RSA1_5", a == "dir", strings.HasPrefix(a, "RSA-OAEP"), strings.HasPrefix(a, "ECDH-ES"),
		strings.HasPrefix(a, "PBES2-"), len(a) >= 5 && a[0] == 'A' && (strings.HasSuffix(a, "KW") || strings.HasSuffix(a, "GCM")):
		return fmt.Sprintf("alg %q", a)
	}
	if len(j.KeyOps) > 0 {
		for _, op := range j.KeyOps {
			switch op {
			case "encrypt", "decrypt", "wrapKey", "unwrapKey", "deriveKey", "deriveBits":
			default:
				return ""
			}
		}
		return fmt.Sprintf("key_ops %q", j.KeyOps)
	}
	return ""
}

func b64(field, s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("missing %q", field)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		// some issuers pad
		b, err = base64.URLEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("%q is not base64url", field)
	}
	return b, nil
}

func (j *jwk) key() (*Key, error) {
	if j.Use != "" && j.Use != "sig" {
		return nil, fmt.Errorf("use %q is not sig", j.Use)
	}
	if len(j.KeyOps) > 0 {
		ok := false
		for _, op := range j.KeyOps {
			if op == "verify" {
				ok = true
			}
		}
		if !ok {
			return nil, errors.New(`key_ops lacks "verify"`)
		}
	}
	var pub crypto.PublicKey
	switch j.Kty {
	case "RSA":
		n, err := b64("n", j.N)
		if err != nil {
			return nil, err
		}
		e, err := b64("e", j.E)
		if err != nil {
			return nil, err
		}
		if len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA exponent")
		}
		ei := new(big.Int).SetBytes(e)
		if !ei.IsInt64() || ei.Int64() < 3 || ei.Int64() > 1<<31-1 {
			return nil, errors.New("bad RSA exponent")
		}
		pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(ei.Int64())}
	case "EC":
		var curve elliptic.Curve
		var size int
		switch j.Crv {
		case "P-256":
			curve, size = elliptic.P256(), 32
		case "P-384":
			curve, size = elliptic.P384(), 48
		case "P-521":
			curve, size = elliptic.P521(), 66
		default:
			return nil, fmt.Errorf("unsupported curve %q", j.Crv)
		}
		x, err := b64("x", j.X)
		if err != nil {
			return nil, err
		}
		y, err := b64("y", j.Y)
		if err != nil {
			return nil, err
		}
		if len(x) > size || len(y) > size {
			return nil, errors.New("coordinates too long for the curve")
		}
		pt := make([]byte, 1+2*size)
		pt[0] = 4
		copy(pt[1+size-len(x):1+size], x)
		copy(pt[1+2*size-len(y):], y)
		p, err := ecdsa.ParseUncompressedPublicKey(curve, pt)
		if err != nil {
			return nil, fmt.Errorf("invalid EC point: %v", err)
		}
		pub = p
	case "OKP":
		if j.Crv != "Ed25519" {
			return nil, fmt.Errorf("unsupported OKP curve %q", j.Crv)
		}
		x, err := b64("x", j.X)
		if err != nil {
			return nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, errors.New("Ed25519 key must be 32 bytes")
		}
		pub = ed25519.PublicKey(x)
	case "oct":
		return nil, errors.New("symmetric keys are not accepted from a JWKS URL")
	case "":
		return nil, errors.New(`missing "kty"`)
	default:
		return nil, fmt.Errorf("unsupported kty %q", j.Kty)
	}
	k, err := NewPublicKey(pub, j.Kid)
	if err != nil {
		return nil, err
	}
	if j.Alg != "" {
		a := lookupAlg(j.Alg)
		if a == nil {
			return nil, fmt.Errorf("unsupported alg %q", j.Alg)
		}
		k.Algorithm = j.Alg
		if !k.allows(a) {
			return nil, fmt.Errorf("alg %q does not match the %s key", j.Alg, k.family)
		}
	}
	return k, nil
}
