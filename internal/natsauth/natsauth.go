// Package natsauth turns a NATS client's credentials and TLS settings
// into nats.go options, in one place for the gateway's modules (through
// internal/natsconn's connection block) and for gatewayctl, which has no
// Caddy in it and so cannot import natsconn.
package natsauth

import (
	"crypto/tls"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Settings authenticate a client and secure its connection.
type Settings struct {
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// CredsFile is a path to a .creds file (JWT + NKey seed).
	CredsFile string
	// NKeyFile is a path to a file holding an NKey user seed.
	NKeyFile string
	// TLS requires TLS even on nats:// URLs (a tls:// URL requires it
	// anyway); TLSCA, TLSCert or TLSKey imply it.
	TLS bool
	// TLSCA is a PEM file of CA certificates that verify the servers
	// (default: the system pool).
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and its key, for
	// servers that require mutual TLS. Both or neither.
	TLSCert, TLSKey string
	// TLSServerName is the name the servers' certificates are verified
	// against (default: the host of the URL dialled).
	TLSServerName string
}

// Options are the nats.go options of s; the error names an NKey seed file
// that does not load.
func (s Settings) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if s.User != "" || s.Password != "" {
		opts = append(opts, nats.UserInfo(s.User, s.Password))
	}
	if s.Token != "" {
		opts = append(opts, nats.Token(s.Token))
	}
	if s.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(s.CredsFile))
	}
	if s.NKeyFile != "" {
		nk, err := nats.NkeyOptionFromSeed(s.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey %q: %w", s.NKeyFile, err)
		}
		opts = append(opts, nk)
	}
	if s.TLS || s.TLSServerName != "" {
		// first: RootCAs and ClientCert add to this tls.Config
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.TLSServerName}))
	}
	if s.TLSCA != "" {
		opts = append(opts, nats.RootCAs(s.TLSCA))
	}
	if s.TLSCert != "" {
		opts = append(opts, nats.ClientCert(s.TLSCert, s.TLSKey))
	}
	return opts, nil
}
