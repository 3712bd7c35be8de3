package pki

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// rsaCA is a CA as RKE makes them: RSA 2048, CA:TRUE, no extended key
// usage; edit changes it first.
func rsaCA(t *testing.T, edit func(*x509.Certificate)) Cert {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: CACertName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
}

func TestProveCA(t *testing.T) {
	req := Request{ClusterName: "prod", ServiceClusterIPRange: "10.43.0.0/16", ClusterDomain: "cluster.local",
		Nodes: []Node{{Name: "10.0.0.1", Address: "10.0.0.1", Hostname: "node1", Etcd: true, ControlPlane: true, Worker: true}}}
	if err := ProveCA(CACertName, rsaCA(t, nil), req, time.Now()); err != nil {
		t.Errorf("RKE's kind of CA: %v", err)
	}
	err := ProveCA(CACertName, rsaCA(t, func(c *x509.Certificate) { c.ExcludedDNSDomains = []string{"kubernetes.default"} }), req, time.Now())
	if err == nil || !strings.Contains(err.Error(), "server certificate like kube-apiserver") || !strings.Contains(err.Error(), "kubernetes.default") {
		t.Errorf("a CA that excludes kubernetes.default: %v", err)
	}
}
