// Package apiservertest gives tests a real Kubernetes API server on
// 127.0.0.1: the etcd and the kube-apiserver that rigger's sandbox builds
// into its cache ($RIGGER_CACHE/etcd/<version> and kube/<version>, default
// /var/cache/rigger), and, when asked, kube-controller-manager and
// kube-scheduler. There are no nodes.
//
// Such tests run only with RIGGER_E2E=1 (`make test` sets it). Without it
// they are skipped with a message that says so; with it, a missing binary
// fails them. Every process is started on free ports with a throwaway CA,
// a service-account key pair and a token file (--authorization-mode=RBAC),
// and stopped by its pid when the test ends, also when it fails; each dies
// with the test binary if that is killed.
package apiservertest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/sandbox"
)

// EnvVar turns the real API server tests on when it is "1".
const EnvVar = "RIGGER_E2E"

// Bounds of Start.
const (
	// readyTimeout bounds the wait for /readyz (about 15 s on an idle
	// machine; these machines are shared).
	readyTimeout = 2 * time.Minute
	// buildWait bounds the wait for a Kubernetes build another package
	// runs (rigger sandbox up builds the binaries, about 9 minutes cold).
	buildWait = 15 * time.Minute
	// stopTimeout is how long a process has to end after SIGTERM before
	// it is killed.
	stopTimeout = 10 * time.Second
)

// Enabled says whether the real API server tests run.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// Options choose the components besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager runs kube-controller-manager: Deployments get
	// ReplicaSets and pods, namespaces their default ServiceAccount.
	ControllerManager bool
	// Scheduler runs kube-scheduler: with no nodes, pods stay Pending with
	// FailedScheduling events.
	Scheduler bool
	// ServiceClusterIPRange is the API server's Service range, which
	// Services with a fixed clusterIP must fall in. Default 10.0.0.0/24.
	ServiceClusterIPRange string
}

// Server is a running API server.
type Server struct {
	// Config reaches it as a cluster administrator (system:masters).
	Config *rest.Config
	// Dir holds the certificates, the token file and the logs.
	Dir string
	// EtcdURL is its etcd's client URL (plain HTTP, on 127.0.0.1), for
	// tests that look at what the API server stored.
	EtcdURL string
}

// Start starts etcd and kube-apiserver (and what opts asks for), waits
// until the API server is ready, and registers a cleanup that stops them.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if !Enabled() {
		t.Skipf("real API server test: run with %s=1 (as `make test` does); it needs the etcd and Kubernetes binaries that `rigger sandbox up` builds", EnvVar)
	}
	bins, err := binaries(t)
	if err != nil {
		t.Fatalf("%s=1 asks for a real API server, and it cannot run here: %v", EnvVar, err)
	}
	dir := t.TempDir()
	s := &Server{Dir: dir}
	p := &procs{t: t, dir: dir}
	t.Cleanup(p.stopAll)

	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	pk, err := writePKI(dir)
	if err != nil {
		t.Fatalf("write the test PKI: %v", err)
	}

	p.start("etcd", bins["etcd"],
		"--name=test",
		"--data-dir="+filepath.Join(dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=test=http://127.0.0.1:%d", etcdPeer),
	)
	p.start("kube-apiserver", bins["kube-apiserver"],
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+pk.servingCert,
		"--tls-private-key-file="+pk.servingKey,
		"--client-ca-file="+pk.caCert,
		"--token-auth-file="+pk.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pk.saPub,
		"--service-account-signing-key-file="+pk.saKey,
		"--service-cluster-ip-range="+cmp.Or(opts.ServiceClusterIPRange, "10.0.0.0/24"),
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--allow-privileged=true",
	)
	s.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	host := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	s.Config = &rest.Config{
		Host:            host,
		BearerToken:     pk.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: pk.caPEM},
		QPS:             100,
		Burst:           200,
		Timeout:         30 * time.Second,
	}
	if err := p.waitReady(host+"/readyz", pk); err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}

	if opts.ControllerManager || opts.Scheduler {
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kubeconfig, []byte(kubeconfigFor(host, pk)), 0o600); err != nil {
			t.Fatal(err)
		}
		if opts.ControllerManager {
			p.start("kube-controller-manager", bins["kube-controller-manager"],
				"--kubeconfig="+kubeconfig,
				"--leader-elect=false",
				"--secure-port=0",
				"--service-account-private-key-file="+pk.saKey,
				"--root-ca-file="+pk.caCert,
				"--use-service-account-credentials=false",
			)
		}
		if opts.Scheduler {
			p.start("kube-scheduler", bins["kube-scheduler"],
				"--kubeconfig="+kubeconfig,
				"--leader-elect=false",
				"--secure-port=0",
			)
		}
	}
	return s
}

// binaries finds etcd and the Kubernetes commands of the sandbox's
// default release in the cache, waiting for a build that another test
// package is running.
func binaries(t testing.TB) (map[string]string, error) {
	cache := os.Getenv("RIGGER_CACHE")
	if cache == "" {
		cache = "/var/cache/rigger"
	}
	bins := map[string]string{}
	for _, b := range []struct {
		what, dir string
		cmds      []string
	}{
		{"etcd " + sandbox.EtcdVersion, filepath.Join(cache, "etcd", sandbox.EtcdVersion), []string{"etcd"}},
		{"Kubernetes " + sandbox.KubernetesVersion, filepath.Join(cache, "kube", sandbox.KubernetesVersion), []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}},
	} {
		if _, err := os.Stat(filepath.Join(b.dir, ".complete")); err != nil {
			if waitForBuild(t, b.dir) != nil {
				return nil, fmt.Errorf("the %s binaries are not in %s: `rigger sandbox images` (or `make sandbox`) builds them, once", b.what, b.dir)
			}
		}
		for _, c := range b.cmds {
			p := filepath.Join(b.dir, c)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("%s is missing: %w", p, err)
			}
			bins[c] = p
		}
	}
	return bins, nil
}

// waitForBuild waits while a build holds the cache's lock (the sandbox's
// protocol: an exclusive flock on <dir>.lock, then <dir>/.complete), and
// reports whether the binaries are there after it.
func waitForBuild(t testing.TB, dir string) error {
	f, err := os.Open(dir + ".lock")
	if err != nil {
		return err
	}
	defer f.Close()
	told := false
	testwait.Until(buildWait, time.Second, func() bool {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			_, err = os.Stat(filepath.Join(dir, ".complete"))
			return true
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return true
		}
		if !told {
			t.Logf("waiting for the Kubernetes build that holds %s.lock", dir)
			told = true
		}
		return false
	})
	return err
}

// procs are the processes of one Server.
type procs struct {
	t    testing.TB
	dir  string
	list []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start starts a process with its output in <dir>/<name>.log. It dies with
// the test binary (PR_SET_PDEATHSIG) if the cleanup cannot run.
func (p *procs) start(name, bin string, args ...string) {
	p.t.Helper()
	logPath := filepath.Join(p.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("start %s: %v", name, err)
	}
	pr := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait()
		logf.Close()
		close(pr.done)
	}()
	p.list = append(p.list, pr)
	p.t.Logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
}

// stopAll stops the processes by pid, last started first: SIGTERM, then
// SIGKILL after stopTimeout. When the test failed, the end of each log is
// shown.
func (p *procs) stopAll() {
	for i := len(p.list) - 1; i >= 0; i-- {
		pr := p.list[i]
		select {
		case <-pr.done:
			p.t.Logf("%s (pid %d) had ended: %v", pr.name, pr.cmd.Process.Pid, pr.err)
			continue
		default:
		}
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(stopTimeout):
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	}
	if p.t.Failed() {
		for _, pr := range p.list {
			p.t.Logf("last lines of %s:\n%s", pr.log, tail(pr.log, 30))
		}
	}
}

// waitReady polls url until it answers 200, the API server ends, or
// readyTimeout passes.
func (p *procs) waitReady(url string, pk *pki) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pk.caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	api := p.list[len(p.list)-1]
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+pk.token)
		resp, err := client.Do(req)
		if err == nil {
			b := make([]byte, 512)
			n, _ := resp.Body.Read(b)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(b[:n]))
		} else {
			last = err.Error()
		}
		select {
		case <-api.done:
			return fmt.Errorf("ended before it was ready (%v); last lines of %s:\n%s", api.err, api.log, tail(api.log, 30))
		case <-ctx.Done():
			return fmt.Errorf("not ready within %s (last answer: %s); last lines of %s:\n%s", readyTimeout, last, api.log, tail(api.log, 30))
		case <-tick.C:
		}
	}
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts finds n free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pki is the test server's certificates, keys and token, as files in dir.
type pki struct {
	caPEM                           []byte
	caCert, servingCert, servingKey string
	saKey, saPub, tokenFile, token  string
}

// writePKI makes a throwaway CA, the API server's serving certificate
// (127.0.0.1, localhost), a service-account key pair and a token file with
// one cluster administrator.
func writePKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rigger-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p := &pki{
		caPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
		token:       hex.EncodeToString(tok),
	}
	keyPEM := func(k *ecdsa.PrivateKey) ([]byte, error) {
		der, err := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), err
	}
	srvKeyPEM, err := keyPEM(srvKey)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		p.caCert:      p.caPEM,
		p.servingCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		p.servingKey:  srvKeyPEM,
		p.saKey:       saKeyPEM,
		p.saPub:       pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		p.tokenFile:   []byte(p.token + `,admin,admin,"system:masters"` + "\n"),
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// kubeconfigFor is a kubeconfig for the controllers: the administrator's
// token and the CA.
func kubeconfigFor(host string, pk *pki) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, host, pk.caCert, pk.token)
}

// WriteKubeconfig writes a kubeconfig of the administrator into a
// directory of the test and returns its path, for the processes the test
// starts.
func (s *Server) WriteKubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, s.Config.Host, base64.StdEncoding.EncodeToString(s.Config.TLSClientConfig.CAData), s.Config.BearerToken)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
