// Command gatewayctl holds the gateway's small operator and developer tools.
// Its usage (gatewayctl -h) lists the commands; each command's -h has the
// details. Errors, and an audit trail that does not verify, exit with status
// 2; -h, --help and help print usage to stdout and exit 0.
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

const usage = `usage: gatewayctl <command> [flags]

commands:
  secret [-file F]                  print (or create once in F) a random HMAC secret
  token [flags]                     sign a JWT for testing the gateway (HS256 or RS256)
  keygen -dir D                     create an RSA key pair and a JWKS for it in D
  audit keygen -out D               create the Ed25519 key pair that signs audit checkpoints
  audit verify -key K FILE...       verify audit trails against the public key K
  audit tail --nats URL [--since D] print the audit events of the JetStream stream (--follow: and new ones)
  audit count --nats URL [--since D] [--client-request-id ID]
                                    count the stream's events, per node and decision
  apikey new --sub S [...]          make an API key: print it once, and its keys file entry
                                    (--file keys.json adds the entry to the file)
  fleet init --nats URL [--replicas N]
                                    create the fleet's audit stream and buckets on NATS
  usage [--admin A] [--consumer K]  what consumers used of their quota plans (admin API)
  help [<command>]                  this text, or a command's usage

gatewayctl <command> -h prints a command's flags. Flags take one dash or two
(-key or --key). Exit status: 0 on success, 2 on an error or an audit trail
that does not verify.
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gatewayctl:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("no command\n" + usage)
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
	case "fleet":
		return cmdFleet(args[1:], out)
	case "usage":
		return cmdUsage(args[1:], out)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			// help <command> [<subcommand>]: that command's usage
			return run(append(args[1:], "-h"), out)
		}
		_, err := io.WriteString(out, usage)
		return err
	default:
		return fmt.Errorf("unknown command %q: want secret, token, keygen, audit, apikey, fleet or usage (gatewayctl -h for help)", args[0])
	}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// parseFlags parses args with fs. -h (or --help) prints usage and fs's
// flags to out and returns done; a bad flag is an error that says where
// help is. Nothing goes to stderr from here: main prints the error.
func parseFlags(fs *flag.FlagSet, args []string, usage string, out io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return true, printUsage(fs, usage, out)
	}
	if err != nil {
		return true, fmt.Errorf("%s: %v (gatewayctl %s -h for help)", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// printUsage writes usage and fs's flags with their defaults to out.
func printUsage(fs *flag.FlagSet, usage string, out io.Writer) error {
	if _, err := io.WriteString(out, usage); err != nil {
		return err
	}
	if _, err := io.WriteString(out, "\nflags:\n"); err != nil {
		return err
	}
	fs.SetOutput(out)
	fs.PrintDefaults()
	return nil
}

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
