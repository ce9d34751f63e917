package ctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

func runOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	err := run(args, &out)
	return strings.TrimSpace(out.String()), err
}

func TestSecretIsCreatedOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dev", "secret")
	first, err := runOut(t, "secret", "-file", file)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Fatalf("secret %q: want 64 hex characters", first)
	}
	again, err := runOut(t, "secret", "-file", file)
	if err != nil || again != first {
		t.Fatalf("second call: %q, %v; want the same secret", again, err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runOut(t, "secret", "-file", file); err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("a short secret must be refused, got %v", err)
	}
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	secret, err := runOut(t, "secret", "-file", secretFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runOut(t, "keygen", "-dir", filepath.Join(dir, "keys")); err != nil {
		t.Fatal(err)
	}

	t.Run("HS256 with roles, scope and extra claims", func(t *testing.T) {
		tok, err := runOut(t, "token", "-secret-file", secretFile, "-sub", "alice", "-roles", "admin,editor",
			"-scope", "orders:read orders:write", "-aud", "orders-api", "-claim", `tenant={"id":7}`)
		if err != nil {
			t.Fatal(err)
		}
		claims := jwt.MapClaims{}
		_, err = jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return []byte(secret), nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithAudience("orders-api"))
		if err != nil {
			t.Fatalf("token does not verify: %v", err)
		}
		if claims["sub"] != "alice" || claims["scope"] != "orders:read orders:write" {
			t.Errorf("claims %v", claims)
		}
		if roles, _ := claims["roles"].([]any); len(roles) != 2 || roles[1] != "editor" {
			t.Errorf("roles %v", claims["roles"])
		}
		if tenant, _ := claims["tenant"].(map[string]any); tenant["id"] != float64(7) {
			t.Errorf("tenant %v", claims["tenant"])
		}
	})

	t.Run("RS256 verifies with the JWKS's key and kid", func(t *testing.T) {
		tok, err := runOut(t, "token", "-key", filepath.Join(dir, "keys", "rsa.key"), "-sub", "bob")
		if err != nil {
			t.Fatal(err)
		}
		var jwks struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, "keys", "jwks.json"))
		if err := json.Unmarshal(b, &jwks); err != nil || len(jwks.Keys) != 1 {
			t.Fatalf("jwks.json: %v %s", err, b)
		}
		pub, _ := os.ReadFile(filepath.Join(dir, "keys", "rsa.pub.pem"))
		key, err := jwt.ParseRSAPublicKeyFromPEM(pub)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return key, nil }, jwt.WithValidMethods([]string{"RS256"}))
		if err != nil {
			t.Fatalf("token does not verify: %v", err)
		}
		if parsed.Header["kid"] != jwks.Keys[0].Kid {
			t.Errorf("kid %v, jwks kid %s", parsed.Header["kid"], jwks.Keys[0].Kid)
		}
	})

	t.Run("keygen keeps an existing key", func(t *testing.T) {
		before, _ := os.ReadFile(filepath.Join(dir, "keys", "rsa.key"))
		if _, err := runOut(t, "keygen", "-dir", filepath.Join(dir, "keys")); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, "keys", "rsa.key"))
		if string(before) != string(after) {
			t.Error("keygen replaced an existing key")
		}
	})

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"token without key", []string{"token"}, "needs -secret-file"},
		{"bad claim", []string{"token", "-secret-file", secretFile, "-claim", "novalue"}, "name=value"},
		{"keygen without dir", []string{"keygen"}, "needs -dir"},
		{"empty env secret", []string{"token", "-secret-env", "GATEWAYCTL_TEST_UNSET"}, "empty"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runOut(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestTokenKidFromJWKS: with -jwks, an RS256 token names the kid a JWKS
// of the user's own gives the key (not keygen's default), so the gateway
// finds the key; a JWKS without the key is an error, not a token the
// gateway would refuse with "unknown key".
func TestTokenKidFromJWKS(t *testing.T) {
	dir := t.TempDir()
	if _, err := runOut(t, "keygen", "-dir", dir); err != nil {
		t.Fatal(err)
	}
	var jwks map[string][]map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "jwks.json"))
	if err := json.Unmarshal(b, &jwks); err != nil {
		t.Fatal(err)
	}
	own := jwks["keys"][0]
	own["kid"] = "my-signing-key"
	other := map[string]any{"kty": "RSA", "kid": "not-this-one", "n": "AQAB", "e": "AQAB"}
	write := func(name string, keys ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"keys": keys})
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine := write("mine.json", other, own)
	tok, err := runOut(t, "token", "-key", filepath.Join(dir, "rsa.key"), "-jwks", mine, "-iss", "http://127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["kid"] != "my-signing-key" {
		t.Fatalf("kid %v, want my-signing-key", parsed.Header["kid"])
	}
	if iss, _ := parsed.Claims.(jwt.MapClaims)["iss"].(string); iss != "http://127.0.0.1:9000" {
		t.Fatalf("iss %q", iss)
	}
	if _, err := runOut(t, "token", "-key", filepath.Join(dir, "rsa.key"), "-jwks", write("other.json", other)); err == nil || !strings.Contains(err.Error(), "no key in it matches -key") {
		t.Fatalf("a JWKS without the key: %v", err)
	}
	if _, err := runOut(t, "token", "-key", filepath.Join(dir, "rsa.key"), "-jwks", mine, "-kid", "x"); err == nil {
		t.Fatal("-kid with -jwks: no error")
	}
}
