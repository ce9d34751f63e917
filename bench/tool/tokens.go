package main

import (
	"bufio"
	"crypto"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Token parameters shared by every verifier in the benchmark.
const (
	tokenIssuer   = "https://idp.bench.local"
	tokenAudience = "bench-api"
	tokenLifetime = 30 * 24 * time.Hour
)

// Keys are the benchmark's signing keys: an HMAC secret and an RSA-2048 key
// pair, kept under work/keys so token pools survive between runs.
type Keys struct {
	HMAC      []byte
	RSA       *rsa.PrivateKey
	Dir       string
	SecretTxt string // path of the HMAC secret (raw text)
	PubPEM    string // path of the RSA public key (PKIX PEM)
	AuditKey  string // path of the Ed25519 key that signs audit checkpoints (PKCS #8 PEM)
}

func loadOrCreateKeys(dir string) (*Keys, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k := &Keys{Dir: dir, SecretTxt: filepath.Join(dir, "hs256.secret"), PubPEM: filepath.Join(dir, "rs256.pub.pem")}
	privPath := filepath.Join(dir, "rs256.key.pem")
	if b, err := os.ReadFile(k.SecretTxt); err == nil {
		k.HMAC = []byte(strings.TrimSpace(string(b)))
	} else {
		raw := make([]byte, 32)
		rand.Read(raw)
		k.HMAC = []byte(base64.RawURLEncoding.EncodeToString(raw)) // printable: usable in every config
		if err := os.WriteFile(k.SecretTxt, k.HMAC, 0o600); err != nil {
			return nil, err
		}
	}
	if b, err := os.ReadFile(privPath); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s: not PEM", privPath)
		}
		key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", privPath, err)
		}
		rk, ok := key.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s: not an RSA key", privPath)
		}
		k.RSA = rk
	} else {
		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		der, _ := x509.MarshalPKCS8PrivateKey(rk)
		if err := os.WriteFile(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, err
		}
		k.RSA = rk
	}
	pub, _ := x509.MarshalPKIXPublicKey(&k.RSA.PublicKey)
	if err := os.WriteFile(k.PubPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return nil, err
	}
	k.AuditKey = filepath.Join(dir, "audit-ed25519.pem")
	if _, err := os.Stat(k.AuditKey); err != nil {
		_, ek, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, _ := x509.MarshalPKCS8PrivateKey(ek)
		if err := os.WriteFile(k.AuditKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, err
		}
	}
	return k, nil
}

var b64 = base64.RawURLEncoding

// Sign makes a token for subject sub with alg HS256 or RS256. The claims
// carry the roles and scope the rbac scenarios require.
func (k *Keys) Sign(alg, sub string, now time.Time) (string, error) {
	hdr := map[string]string{"alg": alg, "typ": "JWT"}
	if alg == "RS256" {
		hdr["kid"] = "bench-rsa"
	}
	claims := map[string]any{
		"sub": sub, "iss": tokenIssuer, "aud": tokenAudience,
		"iat": now.Unix(), "exp": now.Add(tokenLifetime).Unix(),
		"realm_access": map[string]any{"roles": []string{"user", "editor"}},
		"scope":        "orders:read orders:write",
	}
	h, _ := json.Marshal(hdr)
	c, _ := json.Marshal(claims)
	signing := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	var sig []byte
	switch alg {
	case "HS256":
		m := hmac.New(sha256.New, k.HMAC)
		m.Write([]byte(signing))
		sig = m.Sum(nil)
	case "RS256":
		d := sha256.Sum256([]byte(signing))
		var err error
		if sig, err = rsa.SignPKCS1v15(nil, k.RSA, crypto.SHA256, d[:]); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unsupported alg %q", alg)
	}
	return signing + "." + b64.EncodeToString(sig), nil
}

// Verify checks a token signed by these keys; it returns the subject.
func (k *Keys) Verify(tok string, now time.Time) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("malformed")
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return "", err
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return "", err
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return "", err
	}
	signing := tok[:len(parts[0])+1+len(parts[1])]
	switch hdr.Alg {
	case "HS256":
		m := hmac.New(sha256.New, k.HMAC)
		m.Write([]byte(signing))
		if subtle.ConstantTimeCompare(m.Sum(nil), sig) != 1 {
			return "", errors.New("bad signature")
		}
	case "RS256":
		d := sha256.Sum256([]byte(signing))
		if err := rsa.VerifyPKCS1v15(&k.RSA.PublicKey, crypto.SHA256, d[:], sig); err != nil {
			return "", err
		}
	default:
		return "", errors.New("alg not allowed")
	}
	cb, err := b64.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	var c struct {
		Sub string `json:"sub"`
		Iss string `json:"iss"`
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
	}
	if err := json.Unmarshal(cb, &c); err != nil {
		return "", err
	}
	if c.Exp <= now.Unix() || c.Iss != tokenIssuer || c.Aud != tokenAudience {
		return "", errors.New("claims rejected")
	}
	return c.Sub, nil
}

// tokenPool returns the path of a file of n distinct tokens (one a line,
// subjects user-0..user-n-1), made once and reused while the tokens have
// more than a week to live.
func (k *Keys) tokenPool(alg string, n int) (string, error) {
	path := filepath.Join(k.Dir, fmt.Sprintf("pool-%s-%d.txt", strings.ToLower(alg), n))
	if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) < tokenLifetime-7*24*time.Hour {
		return path, nil
	}
	progress("making %d distinct %s tokens (once; kept in %s)", n, alg, path)
	toks := make([]string, n)
	now := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	workers := runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				t, err := k.Sign(alg, fmt.Sprintf("user-%d", i), now)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				toks[i] = t
			}
		}(w)
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	bw := bufio.NewWriter(f)
	for _, t := range toks {
		bw.WriteString(t)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	return path, os.Rename(tmp, path)
}
