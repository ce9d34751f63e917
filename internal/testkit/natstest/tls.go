package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TLSServerName is the one name the certificate of a StartTLS server
// holds: clients that dial it at 127.0.0.1 verify it only when told this
// name (tls server_name).
const TLSServerName = "nats.natstest"

// TLSServer is a NATS server with JetStream that requires TLS and a client
// certificate signed by its CA (mutual TLS, the strictest setting users
// deploy), and the PEM files a client needs to connect to it.
type TLSServer struct {
	*server.Server
	// URL is the client URL, nats://127.0.0.1:<port>: a nats:// URL, so
	// that a client uses TLS only when it is told to.
	URL string
	// CA is the CA that signed the server's and the client's
	// certificates; Cert and Key are the client's certificate and key.
	CA, Cert, Key string
}

// StartTLS starts a TLSServer on a free loopback port and waits until it
// accepts clients; it is shut down when the test ends.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "natstest CA", nil)
	srv, srvKey := newCert(t, ca, caKey, TLSServerName, []string{TLSServerName})
	cli, cliKey := newCert(t, ca, caKey, "natstest client", nil)
	files := map[string][]byte{
		"ca.pem":         pemBlock("CERTIFICATE", ca.Raw),
		"client.pem":     pemBlock("CERTIFICATE", cli.Raw),
		"client-key.pem": keyPEM(t, cliKey),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	o := server.Options{
		Host:      "127.0.0.1",
		Port:      freeport.Ports(t, 1)[0],
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoSigs:    true,
		NoLog:     true,
		TLS:       true,
		TLSVerify: true,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey, Leaf: srv}},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		},
		TLSTimeout: 2,
	}
	s, err := server.NewServer(&o)
	if err != nil {
		t.Fatalf("natstest: TLS server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(ReadyTimeout) {
		t.Fatalf("natstest: TLS server not ready after %v", ReadyTimeout)
	}
	return &TLSServer{
		Server: s,
		URL:    fmt.Sprintf("nats://127.0.0.1:%d", o.Port),
		CA:     filepath.Join(dir, "ca.pem"),
		Cert:   filepath.Join(dir, "client.pem"),
		Key:    filepath.Join(dir, "client-key.pem"),
	}
}

// Caddyfile is the connection block's tls subdirective for this server,
// with every option it needs (ca, cert, key, server_name), indented for a
// block one level deep.
func (s *TLSServer) Caddyfile() string {
	return fmt.Sprintf("tls {\n\t\tca %s\n\t\tcert %s\n\t\tkey %s\n\t\tserver_name %s\n\t}", s.CA, s.Cert, s.Key, TLSServerName)
}

// JSON is the connection block's "tls" member for this server.
func (s *TLSServer) JSON() string {
	return fmt.Sprintf(`{"ca":%q,"cert":%q,"key":%q,"server_name":%q}`, s.CA, s.Cert, s.Key, TLSServerName)
}

// Connect opens a client connection of the test's own (closed when the
// test ends), to look at what a module did through the server.
func (s *TLSServer) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: TLSServerName}),
		nats.RootCAs(s.CA), nats.ClientCert(s.Cert, s.Key))
	if err != nil {
		t.Fatalf("natstest: connecting to the TLS server: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// newCert makes a certificate for cn (a CA when parent is nil), valid for
// the DNS names given, signed by parent.
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, dns []string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     dns,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func keyPEM(t testing.TB, key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("EC PRIVATE KEY", der)
}
