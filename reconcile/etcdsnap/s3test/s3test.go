// Package s3test gives tests a real S3 server: versitygw (installed by
// hack/install-versitygw.sh when missing) serving S3 over TLS with a
// private CA on the host's loopback, with a bucket. Tests stop it and start
// it again to take S3 away and give it back.
package s3test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rigger/rigger/internal/testwait"
)

// Gateway is a versitygw serving S3 over TLS on the host's loopback.
type Gateway struct {
	// Endpoint is host:port; Bucket exists; Access and Secret are the
	// root credentials; CAPEM is the CA of its certificate.
	Endpoint, Bucket, Access, Secret, CAPEM string
	// Client is a client of it with those credentials.
	Client *minio.Client

	t        testing.TB
	bin, dir string
	args     []string
	mu       sync.Mutex
	cmd      *exec.Cmd
	logFile  *os.File
}

// Start starts versitygw with a bucket, and stops it by its pid when the
// test ends. Its credentials are passed in its environment, not its
// arguments.
func Start(t *testing.T) *Gateway {
	t.Helper()
	return StartAt(t, "127.0.0.1")
}

// StartAt is Start with versitygw listening on host (an IP address of this
// machine, such as a sandbox's bridge address, which the sandbox's nodes
// reach), with a certificate for it.
func StartAt(t *testing.T, host string) *Gateway {
	t.Helper()
	bin := filepath.Join(cacheDir(), "bin", "versitygw")
	if _, err := os.Stat(bin); err != nil {
		script := findUp(t, "hack/install-versitygw.sh")
		out, err := exec.Command("bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("install versitygw: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	caPEM, certFile, keyFile := tlsFiles(t, dir, net.ParseIP(host))
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	endpoint := l.Addr().String()
	l.Close()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	gw := &Gateway{Endpoint: endpoint, Bucket: "etcd-snapshots", Access: "riggerE2EAccess",
		Secret: "riggerE2ESecret-" + hex.EncodeToString([]byte(time.Now().String()))[:16], CAPEM: caPEM,
		t: t, bin: bin, dir: dir, args: []string{"--port", endpoint, "--cert", certFile, "--key", keyFile, "posix", data}}
	t.Cleanup(func() {
		gw.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "versitygw.log")); err == nil {
				t.Logf("versitygw log:\n%s", b)
			}
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	gw.Client, err = minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(gw.Access, gw.Secret, ""),
		Secure: true, Transport: tr, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	gw.Restart()
	if !testwait.Until(30*time.Second, 300*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = gw.Client.MakeBucket(ctx, gw.Bucket, minio.MakeBucketOptions{Region: "us-east-1"})
		return err == nil
	}) {
		t.Fatalf("versitygw on %s did not make a bucket in 30s: %v", endpoint, err)
	}
	return gw
}

// Stop kills versitygw by its pid (S3 is down) and waits for it to end.
func (g *Gateway) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Kill() // by its pid: the process this test started
	_ = g.cmd.Wait()
	g.logFile.Close()
	g.cmd = nil
}

// Restart starts versitygw (again) on the same endpoint and data; it
// answers soon after (Start waits for it).
func (g *Gateway) Restart() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd != nil {
		return
	}
	logFile, err := os.OpenFile(filepath.Join(g.dir, "versitygw.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		g.t.Fatal(err)
	}
	cmd := exec.Command(g.bin, g.args...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+g.Access, "ROOT_SECRET_ACCESS_KEY="+g.Secret)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		g.t.Fatal(err)
	}
	g.cmd, g.logFile = cmd, logFile
}

func cacheDir() string {
	if d := os.Getenv("RIGGER_CACHE"); d != "" {
		return d
	}
	return "/var/cache/rigger"
}

// findUp finds rel in the test's directory or above.
func findUp(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s above the test's directory", rel)
		}
		dir = parent
	}
}

// tlsFiles makes a CA and a certificate for ip signed by it, writes the
// certificate and key to dir, and returns the CA's PEM.
func tlsFiles(t testing.TB, dir string, ip net.IP) (caPEM, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rigger e2e s3 ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), certFile, keyFile
}
