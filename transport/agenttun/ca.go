package agenttun

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// Lifetimes of the tunnel's certificates.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 365 * 24 * time.Hour
	// NodeValidity is how long a node's client certificate is valid. A node
	// whose certificate expired joins again with a token.
	NodeValidity = 365 * 24 * time.Hour
)

// CA is the tunnel's certificate authority. It signs the server's serving
// certificate and every node's client certificate, and is the only
// authority an agent trusts once it has checked the CA's checksum. It is
// not the cluster's Kubernetes CA.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// certPEM is what the server serves at PathCACerts: the bytes
	// --ca-checksum is the SHA-256 of.
	certPEM []byte
}

// NewCA creates a CA.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("create tunnel CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "rigger-agent-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create tunnel CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// ParseCA reads a CA written by CertPEM and KeyPEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("tunnel CA certificate: not a CA")
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil || b.Type != "EC PRIVATE KEY" {
		return nil, errors.New("tunnel CA key: no EC PRIVATE KEY block")
	}
	key, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tunnel CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("tunnel CA key does not match its certificate")
	}
	return &CA{cert: cert, key: key, certPEM: certPEM}, nil
}

// CertPEM is the CA certificate, PEM-encoded, exactly as the server
// serves it at PathCACerts.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Checksum is the value of the agent's --ca-checksum for this CA.
func (ca *CA) Checksum() string { return Checksum(ca.certPEM) }

// Checksum is the lower-case hex SHA-256 of the bytes served at
// PathCACerts (the PEM-encoded CA certificate, trailing newline included):
// what an agent's --ca-checksum must equal. `curl -k
// https://SERVER/agent/cacerts | sha256sum` computes the same.
func Checksum(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// TLSConfig is the configuration of the tunnel endpoint's listener: a
// serving certificate issued by the CA for hosts (the DNS names and IP
// addresses agents reach it at), and client certificates of the CA checked
// when given.
func (ca *CA) TLSConfig(hosts []string, now time.Time) (*tls.Config, error) {
	cert, err := ca.serverCert(hosts, now)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.pool(),
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// pool holds the CA alone.
func (ca *CA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// serverCert issues the serving certificate for hosts (DNS names and IP
// addresses).
func (ca *CA) serverCert(hosts []string, now time.Time) (tls.Certificate, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "rigger-agent-server"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(ServerValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl, "the tunnel's serving certificate")
}

// issue issues tmpl, with a serial of its own, for a new key.
func (ca *CA) issue(tmpl *x509.Certificate, what string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return tls.Certificate{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue %s: %w", what, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// signNode issues node's client certificate for the public key of csrPEM.
// The certificate names the node (CN) and cluster (OU) the token holder
// joined, never what the CSR's subject says, and is good for client
// authentication only, so that it can never serve as the tunnel server's
// certificate.
func (ca *CA) signNode(cluster, node string, csrPEM []byte, now time.Time) (*x509.Certificate, []byte, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, nil, errors.New("csr: no CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("csr: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node, Organization: []string{nodeOrganization}, OrganizationalUnit: []string{cluster}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(NodeValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue node certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// nodeOrganization marks the node certificates the tunnel CA issues.
const nodeOrganization = "rigger:agents"

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return s, nil
}

func serialString(c *x509.Certificate) string { return strings.ToLower(c.SerialNumber.Text(16)) }

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE block")
	}
	return x509.ParseCertificate(blk.Bytes)
}
