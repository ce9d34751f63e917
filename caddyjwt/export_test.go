package caddyjwt

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"testing"
)

// The test helpers the external test package's end-to-end tests use
// (they live there so that caddy-ratelimit is initialized after caddyjwt,
// as in the real binary: see golden_test.go).
var (
	JWKOf         = jwkOf
	JWKSDoc       = jwksDoc
	Sign          = sign
	PEMOf         = pemOf
	WritePEM      = writePEM
	ClaimsFor     = claimsFor
	NewJWKSServer = newJWKSServer
	NewOIDCServer = newOIDCServer
	TestSecret    = testSecret
)

// Keys returns the keys of the package's tests.
func Keys(t testing.TB) (rsa1, rsa2 *rsa.PrivateKey, p256, p256b *ecdsa.PrivateKey) {
	k := keys(t)
	return k.rsa, k.rsa2, k.p256, k.p256b
}

// SetDiscoveryDown takes the discovery document down or up.
func (s *oidcServer) SetDiscoveryDown(down bool) {
	s.update(func(s *oidcServer) { s.discoveryDown = down })
}

// SetJWKSDown takes the JWK Set down or up.
func (s *oidcServer) SetJWKSDown(down bool) { s.update(func(s *oidcServer) { s.jwksDown = down }) }

// SetJWKS sets the JWK Set document.
func (s *oidcServer) SetJWKS(doc []byte) { s.update(func(s *oidcServer) { s.jwks = doc }) }

// SetIssuer sets the issuer the discovery document names ("": the
// server's own URL).
func (s *oidcServer) SetIssuer(iss string) { s.update(func(s *oidcServer) { s.issuer = iss }) }
