package etcdsnap_test

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
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	rt "github.com/rigger/rigger/reconcile/reconciletest"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// TestEtcdSandbox is one cluster's life: a real 3-member etcd on a 3-node
// sandbox, converged once, with a real S3 server (versitygw over TLS with
// a private CA) on the host's loopback. Starting a sandbox and converging
// a cluster take a minute or more each on a 2-core machine, so the
// snapshot operations, the restores and the schedule share one of each, as
// phases run in this order:
//
//   - snapshots: save, verify, list, delete, upload to S3 (snapshotPhase);
//   - restore: a damaged copy refused, a restore stopped half-way and
//     finished, a snapshot fetched from S3 (restorePhase);
//   - schedule: the schedule and retention with a fake clock, then the
//     restore request of cluster.yml (schedulePhase).
//
// No phase depends on what an earlier one left: each starts with the three
// members healthy and no snapshot on the nodes (startPhase), and writes
// etcd keys under a prefix, snapshots under names and S3 objects in a
// folder of its own. A phase runs alone too:
// go test -run 'TestEtcdSandbox/restore'.
func TestEtcdSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 4, Nodes: 3, Images: true})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := &etcdSandbox{s: s, a: rt.New(t), gw: startVersitygw(t)}
	e.a.Apply(ctx, t, e.cluster(t))
	for _, p := range []struct {
		name string
		run  func(context.Context, *testing.T, *etcdSandbox)
	}{
		{"snapshots", snapshotPhase},
		{"restore", restorePhase},
		{"schedule", schedulePhase},
	} {
		t.Run(p.name, func(t *testing.T) {
			e.startPhase(ctx, t)
			p.run(ctx, t, e)
		})
	}
}

// etcdSandbox is what the phases of TestEtcdSandbox share: the sandbox,
// the Applier whose state directory holds the cluster's CA (which every
// snapshot's sidecar names), and the S3 server.
type etcdSandbox struct {
	s  *sandbox.Sandbox
	a  *rt.Applier
	gw *gateway
}

// cluster is the cluster the test converged, changed by each change. The
// phases change backup_config and addon_job_timeout only, which change
// nothing on the nodes: the cluster stays converged.
func (e *etcdSandbox) cluster(t testing.TB, changes ...func(*spec.Cluster)) *spec.Cluster {
	return loadCluster(t, e.s, changes...)
}

// withS3 sets backup_config.s3backupconfig: the test's S3 server, with
// the snapshots in folder, and secret as the secret key.
func (e *etcdSandbox) withS3(folder, secret string) func(*spec.Cluster) {
	return func(c *spec.Cluster) {
		c.Services.Etcd.BackupConfig.S3BackupConfig = &spec.S3BackupConfig{
			Endpoint: e.gw.endpoint, Region: "us-east-1", BucketName: e.gw.bucket, Folder: folder,
			AccessKey: e.gw.access, SecretKey: secret, CustomCA: e.gw.caPEM,
		}
	}
}

// shortAddonWait sets addon_job_timeout for the phases that restore. A
// restore's apply waits for the add-ons to be ready, and when they are not
// it says so in its result (RestoreResult.Apply.AddonsErr) without
// failing: their pods restart by themselves once the API servers are back.
// After the API servers were down, flannel's pods can stay in crash-loop
// back-off for longer than the default 45 s (seen under CI load), which a
// restore then waits out. These phases test etcd, not the add-ons
// (reconcile's TestClusterSandbox does): a flannel that runs is seen ready
// in 10 s, one that backs off is not waited for.
func shortAddonWait(c *spec.Cluster) { c.AddonJobTimeout = 10 }

// snapDir is node n's snapshot directory, seen from the host.
func snapDir(n sandbox.Node) string { return filepath.Join(n.Dir, "opt-rke", "etcd-snapshots") }

// startPhase is where every phase starts: it waits until the three etcd
// members are healthy (an earlier phase stops one, and restores them all)
// and removes every snapshot from the nodes (the schedule counts from the
// newest one, and list lists them all).
func (e *etcdSandbox) startPhase(ctx context.Context, t *testing.T) {
	t.Helper()
	n1 := e.s.Nodes[0]
	etcdctl := etcdctlTry(t, e.cluster(t), sandboxtest.DockerClient(t, n1), n1.Address)
	rt.Eventually(ctx, t, 2*time.Minute, "the three etcd members healthy", func(ctx context.Context) (bool, error) {
		_, err := etcdctl(ctx, "endpoint", "health", "--cluster")
		return err == nil, err
	})
	for _, n := range e.s.Nodes {
		entries, err := os.ReadDir(snapDir(n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range entries {
			if err := os.RemoveAll(filepath.Join(snapDir(n), de.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// gateway is a versitygw serving S3 over TLS on the host's loopback.
type gateway struct {
	endpoint, bucket, access, secret, caPEM string
	client                                  *minio.Client
}

// startVersitygw starts versitygw (installed by hack/install-versitygw.sh
// when missing) with a bucket, and stops it by its pid when the test ends.
// Its credentials are passed in its environment, not its arguments.
func startVersitygw(t *testing.T) *gateway {
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
	caPEM, certFile, keyFile := tlsFiles(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := l.Addr().String()
	l.Close()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	gw := &gateway{endpoint: endpoint, bucket: "etcd-snapshots", access: "riggerE2EAccess",
		secret: "riggerE2ESecret-" + hex.EncodeToString([]byte(time.Now().String()))[:16], caPEM: caPEM}
	logFile, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", endpoint, "--cert", certFile, "--key", keyFile, "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+gw.access, "ROOT_SECRET_ACCESS_KEY="+gw.secret)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its pid: the process this test started
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("versitygw log:\n%s", b)
			}
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	gw.client, err = minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(gw.access, gw.secret, ""),
		Secure: true, Transport: tr, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = gw.client.MakeBucket(ctx, gw.bucket, minio.MakeBucketOptions{Region: "us-east-1"})
		cancel()
		if err == nil {
			return gw
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw on %s did not make a bucket in 30s: %v", endpoint, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func cacheDir() string {
	if d := os.Getenv("RIGGER_CACHE"); d != "" {
		return d
	}
	return "/var/cache/rigger"
}

// findUp finds rel in the test's directory or above.
func findUp(t *testing.T, rel string) string {
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

// tlsFiles makes a CA and a certificate for 127.0.0.1 signed by it, writes
// the certificate and key to dir, and returns the CA's PEM.
func tlsFiles(t *testing.T, dir string) (caPEM, certFile, keyFile string) {
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
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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
