package ctl

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const secretUsage = `usage: gatewayctl secret [-file F]
	print a random HMAC secret (32 bytes, hex) for jwt_auth's hmac_secret.
	With -file, the secret is kept in F (created once, mode 0600) and
	printed again on later calls.
`

// cmdSecret prints a secret; with -file it creates the file (mode 0600) only
// when it does not exist yet, and prints its content.
func cmdSecret(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("secret", flag.ContinueOnError)
	file := fs.String("file", "", "keep the secret in this file, creating it once")
	if done, err := parseFlags(fs, args, secretUsage, out); done {
		return err
	}
	if *file != "" {
		if b, err := os.ReadFile(*file); err == nil {
			s := strings.TrimSpace(string(b))
			if len(s) < 32 {
				return fmt.Errorf("secret in %s is shorter than 32 characters", *file)
			}
			_, err = fmt.Fprintln(out, s)
			return err
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	s := hex.EncodeToString(buf)
	if *file != "" {
		if err := os.MkdirAll(filepath.Dir(*file), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(*file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(f, s); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(out, s)
	return err
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

const tokenUsage = `usage: gatewayctl token (-secret-file F | -secret-env VAR | -key rsa.key [-jwks jwks.json | -kid KID]) [flags]
	sign a JWT for testing the gateway and print it. HS256 with an HMAC
	secret (jwt_auth's hmac_secret), or RS256 with an RSA private key
	(keygen's rsa.key; jwt_auth verifies it with jwks_url or public_key).
	The token's kid must name a key of the JWKS the gateway fetches, or
	the gateway answers "unknown key": -kid defaults to the kid keygen
	wrote into its jwks.json; for a JWKS of your own, -jwks takes the kid
	of its key that matches -key. -iss must be the issuer the gateway
	expects (a provider's oidc URL or issuer).
	example: gatewayctl token -key keys/rsa.key -iss http://127.0.0.1:9000 -roles admin -ttl 1h
`

func cmdToken(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	secretFile := fs.String("secret-file", "", "HS256: file holding the HMAC secret")
	secretEnv := fs.String("secret-env", "", "HS256: environment variable holding the HMAC secret")
	keyFile := fs.String("key", "", "RS256: PEM private key file (from keygen)")
	kid := fs.String("kid", "", "RS256: key id for the header (default: the kid keygen gives the key)")
	jwksFile := fs.String("jwks", "", "RS256: JWK Set file; the kid is that of its key matching -key")
	sub := fs.String("sub", "demo-user", "subject")
	iss := fs.String("iss", "", "issuer")
	aud := fs.String("aud", "", "audience")
	roles := fs.String("roles", "", "comma-separated roles, set as the claim named by -roles-claim")
	rolesClaim := fs.String("roles-claim", "roles", "claim that carries the roles")
	scope := fs.String("scope", "", "space-separated OAuth scopes (claim scope)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	var extra listFlag
	fs.Var(&extra, "claim", "extra claim name=value (repeatable; value parsed as JSON when it can be)")
	if done, err := parseFlags(fs, args, tokenUsage, out); done {
		return err
	}
	now := time.Now()
	claims := jwt.MapClaims{"sub": *sub, "iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
	if *iss != "" {
		claims["iss"] = *iss
	}
	if *aud != "" {
		claims["aud"] = *aud
	}
	if *roles != "" {
		claims[*rolesClaim] = strings.Split(*roles, ",")
	}
	if *scope != "" {
		claims["scope"] = *scope
	}
	for _, kv := range extra {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("invalid -claim %q: want name=value", kv)
		}
		var v any
		if json.Unmarshal([]byte(val), &v) != nil {
			v = val
		}
		claims[name] = v
	}
	var signed string
	var err error
	switch {
	case *keyFile != "":
		pemBytes, rerr := os.ReadFile(*keyFile)
		if rerr != nil {
			return rerr
		}
		key, perr := jwt.ParseRSAPrivateKeyFromPEM(pemBytes)
		if perr != nil {
			return fmt.Errorf("key %s: %w", *keyFile, perr)
		}
		t := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		if *jwksFile != "" {
			if *kid != "" {
				return errors.New("-kid and -jwks: give one")
			}
			if *kid, err = kidIn(*jwksFile, &key.PublicKey); err != nil {
				return err
			}
		}
		if *kid == "" {
			*kid = keyID(&key.PublicKey)
		}
		t.Header["kid"] = *kid
		signed, err = t.SignedString(key)
	case *secretFile != "" || *secretEnv != "":
		var secret string
		if *secretFile != "" {
			b, rerr := os.ReadFile(*secretFile)
			if rerr != nil {
				return rerr
			}
			secret = strings.TrimSpace(string(b))
		} else {
			secret = os.Getenv(*secretEnv)
		}
		if secret == "" {
			return errors.New("the HMAC secret is empty")
		}
		if *jwksFile != "" {
			return errors.New("-jwks is for RS256 tokens (-key)")
		}
		t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		if *kid != "" {
			t.Header["kid"] = *kid
		}
		signed, err = t.SignedString([]byte(secret))
	default:
		return errors.New("token needs -secret-file, -secret-env or -key (gatewayctl token -h for help)")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, signed)
	return err
}

// keyID is a stable kid for a public key: the start of its SHA-256 thumbprint.
func keyID(pub *rsa.PublicKey) string {
	der := x509.MarshalPKCS1PublicKey(pub)
	sum := sha256Sum(der)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// kidIn returns the kid of the RSA key in the JWK Set file that is pub.
func kidIn(file string, pub *rsa.PublicKey) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return "", fmt.Errorf("-jwks %s: not a JWK Set: %v", file, err)
	}
	n := base64.RawURLEncoding.EncodeToString(pub.N.Bytes())
	e := base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes())
	for _, k := range set.Keys {
		if k.Kty == "RSA" && strings.TrimRight(k.N, "=") == n && strings.TrimRight(k.E, "=") == e {
			if k.Kid == "" {
				return "", fmt.Errorf("-jwks %s: the key matching -key has no kid", file)
			}
			return k.Kid, nil
		}
	}
	return "", fmt.Errorf("-jwks %s: no key in it matches -key (the gateway would answer unknown key)", file)
}

const keygenUsage = `usage: gatewayctl keygen -dir D
	create an RSA key pair for RS256 test tokens in D: rsa.key (private,
	mode 0600; for gatewayctl token -key), rsa.pub.pem (for jwt_auth's
	public_key) and jwks.json (a JWK Set with the public key, for
	jwt_auth's jwks_url once served over HTTP). An existing rsa.key is
	kept. Prints the path of rsa.key.
`

func cmdKeygen(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for rsa.key, rsa.pub.pem and jwks.json (kept if present)")
	if done, err := parseFlags(fs, args, keygenUsage, out); done {
		return err
	}
	if *dir == "" {
		return errors.New("keygen needs -dir")
	}
	keyPath := filepath.Join(*dir, "rsa.key")
	if _, err := os.Stat(keyPath); err == nil {
		_, err = fmt.Fprintln(out, keyPath)
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	jwks, err := json.MarshalIndent(map[string]any{"keys": []any{map[string]string{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": keyID(&key.PublicKey),
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()),
	}}}, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"rsa.pub.pem": pubPEM, "jwks.json": jwks} {
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(keyPath, privPEM, 0o600); err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, keyPath)
	return err
}
