// Command gatewayctl holds the gateway's small operator and developer tools:
//
//	gatewayctl secret [-file F]          print (or create once in F) a random HMAC secret
//	gatewayctl token  [flags]            sign a token for testing the gateway
//	gatewayctl keygen -dir D             create an RSA key pair and a JWKS for it in D
//	gatewayctl audit keygen -out D       create the Ed25519 key pair that signs audit checkpoints in D
//	gatewayctl audit verify -key K F...  verify audit trails (JSON lines) against public key K
//	gatewayctl apikey new --sub S ...    make an API key; print it once and its keys file entry
//
// Errors, and an audit trail that does not verify, exit with status 2.
//
// `make run` uses it to create the development secret on first run and to print
// a demo token; nothing secret is kept in the repository.
package main

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

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gatewayctl:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: gatewayctl secret|token|keygen|audit|apikey [flags] (-h for help)")
	}
	switch args[0] {
	case "secret":
		return cmdSecret(args[1:], out)
	case "token":
		return cmdToken(args[1:], out)
	case "keygen":
		return cmdKeygen(args[1:], out)
	case "audit":
		return cmdAudit(args[1:], out)
	case "apikey":
		return cmdAPIKey(args[1:], out)
	default:
		return fmt.Errorf("unknown command %q: want secret, token, keygen, audit or apikey", args[0])
	}
}

// cmdSecret prints a secret; with -file it creates the file (mode 0600) only
// when it does not exist yet, and prints its content.
func cmdSecret(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("secret", flag.ContinueOnError)
	file := fs.String("file", "", "keep the secret in this file, creating it once")
	if err := fs.Parse(args); err != nil {
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

func cmdToken(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	secretFile := fs.String("secret-file", "", "HS256: file holding the HMAC secret")
	secretEnv := fs.String("secret-env", "", "HS256: environment variable holding the HMAC secret")
	keyFile := fs.String("key", "", "RS256: PEM private key file (from keygen)")
	kid := fs.String("kid", "", "key id for the header (default: from keygen's key)")
	sub := fs.String("sub", "demo-user", "subject")
	iss := fs.String("iss", "", "issuer")
	aud := fs.String("aud", "", "audience")
	roles := fs.String("roles", "", "comma-separated roles, set as the claim named by -roles-claim")
	rolesClaim := fs.String("roles-claim", "roles", "claim that carries the roles")
	scope := fs.String("scope", "", "space-separated OAuth scopes (claim scope)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	var extra listFlag
	fs.Var(&extra, "claim", "extra claim name=value (repeatable; value parsed as JSON when it can be)")
	if err := fs.Parse(args); err != nil {
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
		t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		if *kid != "" {
			t.Header["kid"] = *kid
		}
		signed, err = t.SignedString([]byte(secret))
	default:
		return errors.New("token needs -secret-file, -secret-env or -key")
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

func cmdKeygen(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for rsa.key, rsa.pub.pem and jwks.json (kept if present)")
	if err := fs.Parse(args); err != nil {
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
