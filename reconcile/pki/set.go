package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Set is the cluster's PKI: a certificate and its private key per name.
type Set struct {
	Certs map[string]Cert
	// Trust are CA certificates (PEM) trusted besides a CA of Certs, by
	// that CA's name: the other generation of the CA while the CA is
	// rotated. NodeFiles appends them to the CA's file and to the
	// kubeconfigs' CA, ClientTLS trusts them; Save does not keep them.
	Trust map[string][]byte
}

// Trusted is what trusting the CA name means in files: its certificate,
// then those Trust adds for it.
func (s *Set) Trusted(name string) []byte {
	c := s.Certs[name].CertPEM
	if extra := s.Trust[name]; len(extra) > 0 {
		out := slices.Clip(c)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		return append(out, extra...)
	}
	return c
}

// Cert is one name's material, PEM-encoded. For the service-account token key
// CertPEM holds the public key ("PUBLIC KEY"), or the certificate RKE made for
// it when the PKI was taken over from RKE.
type Cert struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Names is the set's names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.Certs))
}

// Action is what Ensure did to a name.
type Action string

// Actions of a Change.
const (
	ActionCreate  Action = "create"
	ActionReissue Action = "reissue"
	ActionRemove  Action = "remove"
)

// Change is one difference between the PKI that existed and the one Ensure
// returned. Reason is for people.
type Change struct {
	Name   string `json:"name"`
	Action Action `json:"action"`
	Reason string `json:"reason"`
}

// Expiry is when each certificate of the set expires, for status. The
// service-account token key does not expire and is left out, as is anything
// that does not parse.
func Expiry(s *Set) map[string]time.Time {
	out := map[string]time.Time{}
	if s == nil {
		return out
	}
	for name, c := range s.Certs {
		if name == ServiceAccountTokenKeyName {
			continue
		}
		if crt, err := parseCert(c.CertPEM); err == nil {
			out[name] = crt.NotAfter
		}
	}
	return out
}

// parseCert reads the one certificate of a PEM block.
func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// parseKey reads a private key in any form Kubernetes and RKE write: EC,
// PKCS#1 (RKE's RSA keys) or PKCS#8. Its errors never quote the key.
func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM private key")
	}
	switch blk.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, errors.New("private key cannot sign")
		}
		return s, nil
	}
	return nil, errors.New("unknown PEM type " + blk.Type + " for a private key")
}

// publicOf reads the public key of a CertPEM: a certificate or a bare key.
func publicOf(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	switch blk.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(blk.Bytes)
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		return c.PublicKey, nil
	}
	return nil, errors.New("unknown PEM type " + blk.Type + " for a public key")
}

// samePublic says whether pub is the public half of key.
func samePublic(key crypto.Signer, pub crypto.PublicKey) bool {
	switch k := key.Public().(type) {
	case *ecdsa.PublicKey:
		return k.Equal(pub)
	case *rsa.PublicKey:
		return k.Equal(pub)
	case ed25519.PublicKey:
		return k.Equal(pub)
	}
	return false
}

// pair is a parsed certificate and key.
type pair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// parsePair reads a Cert and checks that its key belongs to its certificate.
func parsePair(c Cert) (pair, error) {
	crt, err := parseCert(c.CertPEM)
	if err != nil {
		return pair{}, err
	}
	if len(c.KeyPEM) == 0 {
		return pair{}, errors.New("no private key")
	}
	key, err := parseKey(c.KeyPEM)
	if err != nil {
		return pair{}, err
	}
	if !samePublic(key, crt.PublicKey) {
		return pair{}, errors.New("private key does not match the certificate")
	}
	return pair{crt, key}, nil
}

// ClientTLS is the TLS configuration rigger speaks to etcd and the API
// servers with: the kube-node certificate, which both accept, and the
// cluster CA to verify them. ServerName is left to the caller.
func (s *Set) ClientTLS() (*tls.Config, error) {
	node, ok := s.Certs[KubeNodeCertName]
	if !ok {
		return nil, fmt.Errorf("no %s certificate in the set", KubeNodeCertName)
	}
	cert, err := tls.X509KeyPair(node.CertPEM, node.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("the %s certificate: %w", KubeNodeCertName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Trusted(CACertName)) {
		return nil, fmt.Errorf("the %s certificate does not parse", CACertName)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
