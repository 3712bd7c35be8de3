package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestServeGuardsPageAndMetrics runs serve with a token and a client CA:
// the status page and /metrics need both, over TLS; the probes need
// neither.
func TestServeGuardsPageAndMetrics(t *testing.T) {
	dir := t.TempDir()
	bare := filepath.Join(dir, "origin.git")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"clone", "-q", bare, filepath.Join(dir, "work")},
		{"-C", filepath.Join(dir, "work"), "checkout", "-q", "-b", "main"},
		{"-C", filepath.Join(dir, "work"), "commit", "-q", "--allow-empty", "-m", "empty"},
		{"-C", filepath.Join(dir, "work"), "push", "-q", "origin", "main"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}

	// One CA signs the server's certificate and the client's.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "x"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth)
	cc, ck := issue(3, x509.ExtKeyUsageClientAuth)
	caFile := write("ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	const token = "page-token"

	o := serveOptions{repo: "file://" + bare, branch: "main", path: ".", interval: time.Hour, driftInterval: time.Hour, maxConcurrent: 1,
		stateDir: filepath.Join(dir, "state"), gitUser: "git", listen: "127.0.0.1:0", author: "rigger <rigger@example.test>",
		logFormat: "text", logLevel: "info", httpTokenFile: write("token", []byte(token+"\n")),
		tlsCert: write("tls.crt", sc), tlsKey: write("tls.key", sk), clientCA: caFile}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- o.run(ctx, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	url := regexp.MustCompile(`msg="status page" url=(https://\S+/) token=true client_certificate=true`)
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == ""; {
		if m := url.FindStringSubmatch(logs.String()); m != nil {
			base = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log its status page's URL within 30s:\n%s", logs)
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, logs)
		case <-time.After(50 * time.Millisecond): // polls the log with a deadline
		}
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	pair, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, tc := range []struct {
		name   string
		client *http.Client
		path   string
		bearer bool
		want   int
	}{
		{"page, certificate and token", withCert, "", true, 200},
		{"page, certificate, no token", withCert, "", false, 401},
		{"page, token, no certificate", noCert, "", true, 401},
		{"metrics, certificate and token", withCert, "metrics", true, 200},
		{"metrics, no token", withCert, "metrics", false, 401},
		{"events, no certificate", noCert, "events", true, 401},
		{"probe, nothing", noCert, "healthz", false, 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+tc.path, nil)
		if tc.bearer {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.path != "events" || resp.StatusCode != 200 {
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET /%s answered %d, want %d", tc.name, tc.path, resp.StatusCode, tc.want)
		}
	}
}
