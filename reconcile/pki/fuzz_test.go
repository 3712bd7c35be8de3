package pki

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

// TestFromFilesTooLarge: a file larger than any certificate or key is
// refused before it is decoded.
func TestFromFilesTooLarge(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	files := Files(s)
	cp, _ := NodePath(KubeNodeCertName)
	files[cp] = append(bytes.Repeat([]byte("\n"), maxPEMFileSize), s.Certs[KubeNodeCertName].CertPEM...)
	_, err := FromFiles(files)
	if err == nil || !strings.Contains(err.Error(), "larger than any certificate or key") || !strings.Contains(err.Error(), cp) {
		t.Fatalf("got %v, want %s refused as too large", err, cp)
	}
}

// FuzzFromFiles feeds FromFiles what a node might hold in place of
// kube-node's certificate and key: it must never panic, never accept a
// certificate kube-ca did not sign, and work in proportion to the files.
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
		size := 0
		for _, b := range files {
			size += len(b)
		}
		var got *Set
		fuzzcheck.Bounded(t, size, func() { got, err = FromFiles(files) })
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
