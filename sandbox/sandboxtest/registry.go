package sandboxtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/sandbox"
)

// RegistryBinary is Debian's docker-registry (distribution 2.8.2), which
// `make prereqs` installs.
const RegistryBinary = "/usr/bin/docker-registry"

// registryPort is the port of a sandbox's registry, on its bridge address
// (which no other sandbox has). Not 5000: the docker-registry service
// Debian's package starts where nothing stops it listens on *:5000.
const registryPort = "15000"

// Registry is a Docker Registry v2 that serves a sandbox's nodes: on the
// sandbox's bridge address, over TLS (its CA is in every node's
// /etc/docker/certs.d), behind htpasswd auth.
type Registry struct {
	// Host is the registry's host:port, as image names give it.
	Host           string
	User, Password string
}

// StartRegistry starts a registry for the nodes of s that accepts user
// with password only, and stops it when the test ends. It fails the test
// when Debian's docker-registry is not installed.
func StartRegistry(ctx context.Context, t testing.TB, s *sandbox.Sandbox, user, password string) *Registry {
	t.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("no registry to test private_registries with: %v; install Debian's docker-registry (make prereqs)", err)
	}
	r := &Registry{Host: net.JoinHostPort(s.BridgeAddress, registryPort), User: user, Password: password}
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := registryCerts(t, s.BridgeAddress)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: %s}}
http:
  addr: %s
  tls: {certificate: %s, key: %s}
auth:
  htpasswd: {realm: sandbox, path: %s}
`, filepath.Join(dir, "data"), r.Host, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "htpasswd"))
	for name, b := range map[string][]byte{
		"cert.pem": certPEM, "key.pem": keyPEM, "htpasswd": []byte(user + ":" + string(hash) + "\n"), "config.yml": []byte(config),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Every node's engine trusts the registry's CA.
	for _, n := range s.Nodes {
		certs := filepath.Join(n.Dir, "etc-docker", "certs.d", r.Host)
		if err := os.MkdirAll(certs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, "ca.crt"), caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(RegistryBinary, "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the registry: %v", err)
	}
	// exited is closed when the registry has ended, with waitErr: both the
	// readiness wait and the cleanup look at it (a registry that ended at
	// start, its port taken, must not hold the cleanup for ever).
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("registry's log:\n%s", b)
		}
	})

	// Ready once it asks for credentials.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("the registry ended: %v", waitErr)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.Host+"/v2/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized, nil
	})
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("the registry on %s does not answer: %v\n%s", r.Host, err, b)
	}
	return r
}

// Auth is the X-Registry-Auth of the registry's user.
func (r *Registry) Auth(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(registry.AuthConfig{Username: r.User, Password: r.Password})
	if err != nil {
		t.Fatal(err)
	}
	return base64.URLEncoding.EncodeToString(b)
}

// Push pushes image src, which the engine of cli has, to the registry as
// name (repository:tag), and removes that name from the engine again: a
// later use of it pulls. It returns the image's name in the registry.
func (r *Registry) Push(ctx context.Context, t testing.TB, cli *client.Client, src, name string) string {
	t.Helper()
	ref := r.Host + "/" + name
	if err := cli.ImageTag(ctx, src, ref); err != nil {
		t.Fatal(err)
	}
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: r.Auth(t)})
	if err == nil {
		err = jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil)
		rc.Close()
	}
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// registryCerts makes a CA and the registry's serving certificate for
// address, PEM encoded.
func registryCerts(t testing.TB, address string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	ip := net.ParseIP(address)
	if ip == nil {
		t.Fatal(errors.New("the sandbox's bridge address is not an IP address: " + address))
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandbox registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: address},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
