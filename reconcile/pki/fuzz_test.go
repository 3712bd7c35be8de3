package pki

import (
	"testing"
)

// FuzzFromFiles feeds FromFiles what a node might hold in place of
// kube-node's certificate and key: it must never panic, and never accept a
// certificate kube-ca did not sign.
func FuzzFromFiles(f *testing.F) {
	s, _ := mustEnsure(f, nil, threeNodes(), t0)
	other, _ := mustEnsure(f, nil, threeNodes(), t0)
	f.Add(s.Certs[KubeNodeCertName].CertPEM, s.Certs[KubeNodeCertName].KeyPEM)
	f.Add(other.Certs[KubeNodeCertName].CertPEM, other.Certs[KubeNodeCertName].KeyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), []byte{})
	f.Add(s.Certs[ServiceAccountTokenKeyName].CertPEM, s.Certs[KubeNodeCertName].KeyPEM)
	ca, err := parseCert(s.Certs[CACertName].CertPEM)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		caCert, caKey := NodePath(CACertName)
		cp, kp := NodePath(KubeNodeCertName)
		files := map[string][]byte{
			caCert: s.Certs[CACertName].CertPEM, caKey: s.Certs[CACertName].KeyPEM,
			cp: certPEM, kp: keyPEM,
		}
		got, err := FromFiles(files)
		if err != nil {
			return
		}
		crt, err := parseCert(got.Certs[KubeNodeCertName].CertPEM)
		if err != nil {
			t.Fatalf("accepted an unreadable certificate: %v", err)
		}
		if err := crt.CheckSignatureFrom(ca); err != nil {
			t.Fatalf("accepted a certificate kube-ca did not sign: %v", err)
		}
	})
}
