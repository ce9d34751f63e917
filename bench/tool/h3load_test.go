package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// TestH3Load runs the HTTP/3 client against a real HTTP/3 server (quic-go's,
// as Caddy's is): it counts answers, tells 4xx/5xx apart with the first
// one's status and body, and a run that got no HTTP/3 answer is an error,
// not a row of zeros.
func TestH3Load(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: k}}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer ok" {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			w.Write([]byte(`{"ok":true}`))
		}),
	}
	go srv.Serve(pc)
	defer srv.Close()
	url := "https://" + pc.LocalAddr().String() + "/items/1"

	r, err := h3Load(url, 2, 3, 300*time.Millisecond, "Authorization", "Bearer ok")
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.result()
	if err != nil || w.Requests == 0 || w.Non2xx != 0 || w.Errors != 0 || w.RPS <= 0 || r.Proto != "HTTP/3.0" {
		t.Fatalf("%+v -> %+v, %v", r, w, err)
	}
	r, err = h3Load(url, 1, 2, 200*time.Millisecond, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Non2xx == 0 || r.Non2xx != r.Requests || !strings.HasPrefix(r.FirstBad, "401 no token") {
		t.Fatalf("401s: %+v", r)
	}
	// nothing listens on the other port: no answer is an error
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "https://" + dead.LocalAddr().String() + "/"
	dead.Close()
	r, err = h3Load(deadURL, 1, 1, 300*time.Millisecond, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.result(); err == nil || !strings.Contains(err.Error(), "no answer over HTTP/3") {
		t.Fatalf("a run without answers: %+v, %v", r, err)
	}
}
