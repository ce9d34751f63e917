package caddyclientcert_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	_ "github.com/mholt/caddy-ratelimit"

	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyclientcert"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyquota"
	_ "github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

// Ports of this package: admin 2951, listeners 20350-20399 (caddyapikey
// has admin 2950 and 20300-20349).
const (
	adminPort   = 2951
	verifyPort  = 20351 // client_auth mode verify_if_given
	requirePort = 20352 // client_auth mode require_and_verify
	requestPort = 20353 // client_auth mode request (no verification)
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf certificate; tmpl's SANs and names are the caller's.
func (ca *testCA) issue(t *testing.T, tmpl *x509.Certificate, usage x509.ExtKeyUsage) (tls.Certificate, *x509.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return pair, leaf, certPEM, keyPEM
}

func spiffe(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClientCertAuth runs client_cert_auth behind Caddy's real TLS client
// authentication: a CA made here, real handshakes with and without client
// certificates (the site is a hostname: with client_auth, Caddy answers 421
// when the Host does not match the SNI, and clients send none for an IP),
// SPIFFE and DNS subjects, the role mapping reaching rbac, and
// the whole duty chain with a permission service, upstream and audit file.
//
// It runs on both request paths (Caddy's and the fast path: Caddy's TLS
// handshake and certificate verification, the plan serving the HTTP/1.1
// requests) and compares every response (status, header fields, body),
// whether each handshake failed, what the permission service received and
// the audit events between them.
func TestClientCertAuth(t *testing.T) {
	pathtest.Run(t, testClientCertAuth)
}

func testClientCertAuth(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	dir := t.TempDir()
	ca := newCA(t, "gateway test CA")
	other := newCA(t, "another CA")
	_, _, srvPEM, srvKey := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"}}, x509.ExtKeyUsageServerAuth)
	caPath := write(t, dir, "ca.pem", ca.pem)
	srvCertPath := write(t, dir, "server.pem", srvPEM)
	srvKeyPath := write(t, dir, "server-key.pem", srvKey) // caddytest rewrites paths ending in .key or .crt
	auditPath := filepath.Join(dir, "audit.jsonl")

	run := make([]byte, 4)
	_, _ = rand.Read(run)
	billingID := "spiffe://example.org/ns/prod/sa/billing-" + hex.EncodeToString(run)
	billing, billingLeaf, _, _ := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "billing"}, DNSNames: []string{"billing.internal"}, URIs: []*url.URL{spiffe(t, billingID)}}, x509.ExtKeyUsageClientAuth)
	webID := "spiffe://example.org/ns/prod/sa/web-" + hex.EncodeToString(run)
	web, webLeaf, _, _ := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "web"}, URIs: []*url.URL{spiffe(t, webID)}}, x509.ExtKeyUsageClientAuth)
	cnOnly, _, _, _ := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "cn-only"}}, x509.ExtKeyUsageClientAuth)
	stranger, _, _, _ := other.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "billing"}, URIs: []*url.URL{spiffe(t, billingID)}}, x509.ExtKeyUsageClientAuth)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s", r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	// echo answers with the headers forward_claim sets
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "id=%q roles=%q", r.Header.Values("X-User-Id"), r.Header.Values("X-User-Roles"))
	}))
	t.Cleanup(echo.Close)
	var permSaw bytes.Buffer
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		permSaw.Write(b)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(perm.Close)

	tlsBlock := func(mode string) string {
		return fmt.Sprintf(`tls %s %s {
		client_auth {
			mode %s
			trust_pool file %s
		}
	}`, srvCertPath, srvKeyPath, mode, caPath)
	}
	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20360
	https_port 20361
	grace_period 1s
	auto_https disable_redirects
	skip_install_trust
	audit {
		sink file %[2]s {
			flush_interval 20ms
		}
	}
	quota {
		plan free 1/day
		plan pro 3/day
		default free
		dir %[14]s
	}
}

https://localhost:%[3]d {
	%[4]s
	route /whoami {
		client_cert_auth {
			subject san_uri
		}
		respond "{http.auth.user.id} {http.auth.client_cert.fingerprint}"
	}
	route /first {
		jwt_auth {
			hmac_secret clientcert-e2e-secret-0123456789abcdef
			optional
		}
		client_cert_auth
		respond "{http.auth.user.id}"
	}
	route /fwd-jwt {
		client_cert_auth {
			role billing spiffe://example.org/ns/prod/sa/billing-*
		}
		jwt_auth {
			hmac_secret clientcert-e2e-secret-0123456789abcdef
			forward_claim sub X-User-Id
			forward_claim roles X-User-Roles
		}
		reverse_proxy %[13]s
	}
	route /fwd {
		client_cert_auth {
			role billing spiffe://example.org/ns/prod/sa/billing-*
			forward_claim sub X-User-Id
			forward_claim roles X-User-Roles
		}
		reverse_proxy %[13]s
	}
	route /quota {
		client_cert_auth {
			plan pro spiffe://example.org/ns/prod/sa/billing-*
		}
		quota
		respond "{http.auth.user.id}"
	}
	route /dns {
		client_cert_auth {
			subject san_dns
		}
		respond "{http.auth.user.id}"
	}
	route /cn {
		client_cert_auth {
			subject cn
		}
		respond "{http.auth.user.id}"
	}
	route /chain/* {
		audit
		client_cert_auth {
			role billing spiffe://example.org/ns/prod/sa/billing-*
			role reader %[9]s spiffe://example.org/ns/prod/sa/billing-*
		}
		rbac {
			require any billing
		}
		rate_limit {
			zone clientcert_e2e_%[10]s {
				key {http.auth.user.id}
				events 2
				window 1m
			}
		}
		permission {
			url %[7]s/check
			cache_ttl 0 # no caching: each request asks (1ms made hit or miss a race)
		}
		reverse_proxy %[8]s
	}
}

https://localhost:%[5]d {
	%[6]s
	client_cert_auth
	respond "{http.auth.user.id}"
}

https://localhost:%[11]d {
	%[12]s
	client_cert_auth
	respond "{http.auth.user.id}"
}
`, adminPort, auditPath, verifyPort, tlsBlock("verify_if_given"), requirePort, tlsBlock("require_and_verify"),
		perm.URL, upstream.URL, webID, hex.EncodeToString(run), requestPort, tlsBlock("request"), echo.URL, filepath.Join(dir, "quota"))
	p.Load(t, adminPort, config, "srv0", "srv1", "srv2")

	// what differs between the paths' runs: the run id, the certificates
	sum := sha256.Sum256(billingLeaf.Raw) // openssl x509 -fingerprint -sha256, lowercase, no colons
	fingerprint := hex.EncodeToString(sum[:])
	webSum := sha256.Sum256(webLeaf.Raw)
	ids := []string{hex.EncodeToString(run), "RUN", fingerprint, "FINGERPRINT", hex.EncodeToString(webSum[:]), "WEB-FINGERPRINT"}
	// record records a response (or that there was none) under the
	// subtest's name, the path and the how-many-th request of it this is
	record := func(t *testing.T, path string, value any) {
		rec.AddNext(p, p.Key(t)+" "+path, value)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(certs ...tls.Certificate) *http.Client {
		// HTTP/1.1 (HTTP/2 runs the same plan on the fast path; this test is about TLS)
		cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}
		if len(certs) > 0 {
			// sent even when the server's list of acceptable CAs does not
			// name its issuer (Go's client would otherwise send none)
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	get := func(t *testing.T, c *http.Client, port int, path string) (int, string, http.Header, error) {
		t.Helper()
		resp, err := c.Get(fmt.Sprintf("https://localhost:%d%s", port, path))
		if err != nil {
			record(t, path, "no response")
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		record(t, path, pathtest.Resp(resp.StatusCode, resp.Header, string(b), ids...))
		if resp.ProtoMajor != 1 {
			t.Fatalf("%s: the response came over %s", path, resp.Proto)
		}
		return resp.StatusCode, string(b), resp.Header, nil
	}
	must := func(t *testing.T, c *http.Client, port int, path string, status int, body string) {
		t.Helper()
		s, b, _, err := get(t, c, port, path)
		if err != nil {
			t.Fatal(err)
		}
		if status >= 400 && body != "" {
			// a refusal: the problem with the members of body
			if err := problemtest.Extends(b, status, body, path); s != status || err != nil {
				t.Fatalf("%s: %d, want %d: %v", path, s, status, err)
			}
			return
		}
		if s != status || body != "" && b != body {
			t.Fatalf("%s: %d %q, want %d %q", path, s, b, status, body)
		}
	}

	t.Run("SPIFFE URI SAN subject and fingerprint", func(t *testing.T) {
		must(t, client(billing), verifyPort, "/whoami", 200, billingID+" "+fingerprint)
	})
	t.Run("an identity from an earlier source stands", func(t *testing.T) {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "jwt-first", "exp": time.Now().Add(time.Hour).Unix()}).
			SignedString([]byte("clientcert-e2e-secret-0123456789abcdef"))
		if err != nil {
			t.Fatal(err)
		}
		// jwt_auth runs first: client_cert_auth passes the request on
		// although it carries no certificate
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://localhost:%d/first", verifyPort), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		record(t, "/first", pathtest.Resp(resp.StatusCode, resp.Header, string(b), ids...))
		if resp.StatusCode != 200 || string(b) != "jwt-first" {
			t.Fatalf("%d %q, want 200 jwt-first", resp.StatusCode, b)
		}
		must(t, client(), verifyPort, "/first", 401, `{"error":"unauthorized","reason":"missing client certificate"}`)
	})
	t.Run("forward_claim applies to the certificate's identity", func(t *testing.T) {
		for _, path := range []string{"/fwd-jwt", "/fwd"} {
			req, _ := http.NewRequest("GET", fmt.Sprintf("https://localhost:%d%s", verifyPort, path), nil)
			req.Header.Set("X-User-Id", "admin") // a client's own is never forwarded
			resp, err := client(billing).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			record(t, path, pathtest.Resp(resp.StatusCode, resp.Header, string(b), ids...))
			if want := fmt.Sprintf(`id=["%s"] roles=["billing"]`, billingID); resp.StatusCode != 200 || string(b) != want {
				t.Errorf("%s: %d %s, want 200 %s", path, resp.StatusCode, b, want)
			}
		}
	})
	t.Run("the certificate's plan reaches the quota", func(t *testing.T) {
		// billing's subject is mapped to pro (3 a day), web's to none:
		// the default, free (1 a day)
		for i := 0; i < 3; i++ {
			must(t, client(billing), verifyPort, "/quota", 200, billingID)
		}
		s, b, h, err := get(t, client(billing), verifyPort, "/quota")
		if err != nil {
			t.Fatal(err)
		}
		if s != 429 || !strings.Contains(b, `"plan":"pro"`) || h.Get("Retry-After") == "" {
			t.Fatalf("billing's 4th request: %d %q Retry-After %q, want 429 on plan pro", s, b, h.Get("Retry-After"))
		}
		must(t, client(web), verifyPort, "/quota", 200, webID)
		s, b, _, err = get(t, client(web), verifyPort, "/quota")
		if err != nil {
			t.Fatal(err)
		}
		if s != 429 || !strings.Contains(b, `"plan":"free"`) {
			t.Fatalf("web's 2nd request: %d %q, want 429 on plan free", s, b)
		}
	})
	t.Run("DNS SAN and CN subjects", func(t *testing.T) {
		must(t, client(billing), verifyPort, "/dns", 200, "billing.internal")
		must(t, client(billing), verifyPort, "/cn", 200, "billing")
		must(t, client(cnOnly), verifyPort, "/cn", 200, "cn-only")
		must(t, client(cnOnly), verifyPort, "/whoami", 401, `{"error":"invalid_token","reason":"client certificate has no URI SAN"}`)
	})
	t.Run("no certificate is 401", func(t *testing.T) {
		s, b, h, err := get(t, client(), verifyPort, "/whoami")
		if err != nil {
			t.Fatal(err)
		}
		if s != 401 || problemtest.Extends(b, 401, `{"error":"unauthorized","reason":"missing client certificate"}`, "/whoami") != nil || h.Get("WWW-Authenticate") != `Bearer realm="gateway"` {
			t.Fatalf("%d %q %q", s, b, h.Get("WWW-Authenticate"))
		}
	})
	t.Run("require_and_verify: no certificate fails the handshake", func(t *testing.T) {
		if _, _, _, err := get(t, client(), requirePort, "/"); err == nil {
			t.Fatal("handshake without a certificate succeeded")
		}
		must(t, client(web), requirePort, "/", 200, webID)
	})
	t.Run("another CA's certificate fails the handshake", func(t *testing.T) {
		if _, _, _, err := get(t, client(stranger), verifyPort, "/whoami"); err == nil {
			t.Fatal("a certificate of another CA was accepted")
		}
	})
	t.Run("mode request: an unverified certificate is 401", func(t *testing.T) {
		must(t, client(stranger), requestPort, "/", 401, `{"error":"unauthorized","reason":"missing client certificate"}`)
	})
	t.Run("roles reach rbac, then the whole chain", func(t *testing.T) {
		must(t, client(web), verifyPort, "/chain/x", 403, "")
		must(t, client(billing), verifyPort, "/chain/x", 200, "upstream /chain/x")
		must(t, client(billing), verifyPort, "/chain/x", 200, "upstream /chain/x")
		must(t, client(billing), verifyPort, "/chain/x", 429, "")
		if !strings.Contains(permSaw.String(), `"subject":"`+billingID+`","roles":["billing","reader"]`) {
			t.Fatalf("permission service saw %s", permSaw.String())
		}
		rec.Add(p, p.Key(t)+" permission service saw", strings.NewReplacer(ids...).Replace(permSaw.String()))
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, _ := os.ReadFile(auditPath)
			if bytes.Count(data, []byte(`"subject":"`+billingID+`"`)) >= 3 && bytes.Contains(data, []byte(`"subject":"`+webID+`"`)) {
				// the events name the certificate by its fingerprint
				if want := `"auth":"client_cert","bytes_out"`; !bytes.Contains(data, []byte(want)) {
					t.Fatalf("no event with %s:\n%s", want, data)
				}
				if want := `"credential_id":"` + fingerprint + `"`; !bytes.Contains(data, []byte(want)) {
					t.Fatalf("no event with %s:\n%s", want, data)
				}
				for i, ev := range pathtest.ReadEvents(t, auditPath) {
					rec.Add(p, fmt.Sprintf("%s event %d", p.Key(t), i), pathtest.Event(ev, ids...))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit file after 10s:\n%s", data)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
