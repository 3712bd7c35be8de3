package reconcile_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/crypto/ssh"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/internal/podstatus"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/pki"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// testDoctor walks the converged cluster with rigger doctor: healthy, it
// fails no check; then one thing at a time is broken on one node, and
// doctor must stop that node's walk at the check that looks at it, with
// the fix, while the other nodes' walks fail nothing. Each break is put
// right before the next.
func testDoctor(ctx context.Context, t *testing.T, f *clusterFixture) {
	f.converge(ctx, t)
	s, a := f.s, f.a
	n1, n2, n3 := s.Nodes[0], s.Nodes[1], s.Nodes[2]
	// Doctor's sessions, as rigger doctor opens them.
	keysPerNode := func(o *reconcile.Options) { o.KeysPerNode = true }
	// walkAll walks the cluster with every check but those of skip; walk
	// skips too the checks that take seconds of every walk (the probe
	// pods, the Nodes watched), walked by the subtests about them and by
	// the healthy walks.
	walkAll := func(t *testing.T, c *spec.Cluster, skip ...string) []doctor.Finding {
		t.Helper()
		began := time.Now()
		found, err := a.Session(t, c, keysPerNode).Doctor(ctx, doctor.RunOptions{Skip: skip})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("doctor walked the cluster in %s", time.Since(began).Round(time.Millisecond))
		return found
	}
	walk := func(t *testing.T, c *spec.Cluster, skip ...string) []doctor.Finding {
		t.Helper()
		return walkAll(t, c, append([]string{doctor.CheckPodNetwork, doctor.CheckNodeUpdates}, skip...)...)
	}
	// stops checks that each node's walk stops where want says ("" for
	// nodes whose walk fails nothing), and that the failure's texts hold
	// what the symptom is looked up by and the fix.
	stops := func(t *testing.T, found []doctor.Finding, want map[string]string, foundHas, fixHas string) {
		t.Helper()
		first := map[string]doctor.Finding{}
		for _, fd := range found {
			if _, ok := first[fd.Node]; !ok && fd.Level == doctor.Fail {
				first[fd.Node] = fd
			}
		}
		for _, n := range f.first3() {
			got := first[n]
			if got.Check != want[n] {
				t.Errorf("node %s: the walk stops at %q (%s), want %q", n, got.Check, got.Found, want[n])
				continue
			}
			if want[n] != "" && (!strings.Contains(got.Found, foundHas) || !strings.Contains(got.Fix, fixHas)) {
				t.Errorf("node %s: %s found %q, fix %q: want %q and a fix with %q", n, got.Check, got.Found, got.Fix, foundHas, fixHas)
			}
		}
		if fd, ok := first[""]; ok {
			t.Errorf("the cluster's check %s failed: %s", fd.Check, fd.Found)
		}
	}
	c := f.c
	// nodeName is the Node name of the i-th node of c, sandbox node n.
	nodeName := func(i int, n sandbox.Node) string { return cmp.Or(c.Nodes[i].HostnameOverride, n.Hostname) }
	// healthy waits for a walk that fails nothing: what a repair started
	// (a network plugin's pod recreated) takes a moment.
	healthy := func(t *testing.T) {
		t.Helper()
		defer func() {
			if t.Failed() {
				overlayState(context.WithoutCancel(ctx), t, a.Client(ctx, t, c))
			}
		}()
		var found []doctor.Finding
		rt.Eventually(ctx, t, 2*time.Minute, "a walk that fails nothing", func(ctx context.Context) (bool, error) {
			var err error
			if found, err = a.Session(t, c, keysPerNode).Doctor(ctx, doctor.RunOptions{}); err != nil {
				return false, err
			}
			for _, fd := range found {
				if fd.Level == doctor.Fail {
					return false, fmt.Errorf("node %s: %s: %s", fd.Node, fd.Check, fd.Found)
				}
			}
			return true, nil
		})
		stops(t, found, nil, "", "")
	}

	t.Run("a healthy cluster", func(t *testing.T) {
		found := walkAll(t, c)
		stops(t, found, nil, "", "")
		for _, fd := range found {
			if (fd.Check == doctor.CheckNodeReady || fd.Check == doctor.CheckPodNetwork || fd.Check == doctor.CheckNodeUpdates) && fd.Level != doctor.Pass {
				t.Errorf("node %s: %s %s: %s", fd.Node, fd.Check, fd.Level, fd.Found)
			}
			// Read from each member's metrics; how fast the sandbox's disk
			// is, is the machine's.
			if fd.Check == doctor.CheckEtcdDisk && !strings.Contains(fd.Found, "WAL fsync") {
				t.Errorf("node %s: etcd-disk %s: %s", fd.Node, fd.Level, fd.Found)
			}
		}
	})

	t.Run("a wrong SSH key", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "id_ed25519")
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		blk, err := ssh.MarshalPrivateKey(key, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(other, pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
		wrong := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) { c.Nodes[0].SSHKeyPath = other })
		stops(t, walk(t, wrong), map[string]string{n1.Address: doctor.CheckSSHAuth}, "refused SSH login as user", "authorized_keys")
	})

	t.Run("a missing key file", func(t *testing.T) {
		gone := filepath.Join(t.TempDir(), "id_ed25519")
		missing := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) { c.Nodes[1].SSHKeyPath = gone })
		stops(t, walk(t, missing), map[string]string{n2.Address: doctor.CheckSSHAuth}, "cannot use ssh_key_path "+gone, "the file must exist")
	})

	t.Run("a changed host key", func(t *testing.T) {
		known := rewriteKnownHost(t, c.Rigger.SSH.KnownHostsFile, n2.Address)
		changed := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) { c.Rigger.SSH.KnownHostsFile = known })
		stops(t, walk(t, changed), map[string]string{n2.Address: doctor.CheckSSHHostKey}, "HOST KEY CHANGED", "ssh-keygen -R")
	})

	t.Run("sshd stopped", func(t *testing.T) {
		if err := s.StopService(ctx, n3.Name, sandbox.ServiceSSHD); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.StartService(context.WithoutCancel(ctx), n3.Name, sandbox.ServiceSSHD); err != nil {
				t.Error(err)
			}
		}()
		stops(t, walk(t, c), map[string]string{n3.Address: doctor.CheckSSHPort}, "refused the connection", "sshd runs")
	})

	t.Run("sshd forbids forwarding", func(t *testing.T) {
		cfg := n1.SSHDConfigPath()
		orig, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		restart := func(ctx context.Context, conf []byte) error {
			if err := os.WriteFile(cfg, conf, 0o644); err != nil {
				return err
			}
			if err := s.StopService(ctx, n1.Name, sandbox.ServiceSSHD); err != nil {
				return err
			}
			return s.StartService(ctx, n1.Name, sandbox.ServiceSSHD)
		}
		off := strings.NewReplacer("AllowTcpForwarding yes", "AllowTcpForwarding no", "AllowStreamLocalForwarding yes", "AllowStreamLocalForwarding no").Replace(string(orig))
		if err := restart(ctx, []byte(off)); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := restart(context.WithoutCancel(ctx), orig); err != nil {
				t.Error(err)
			}
		}()
		stops(t, walk(t, c), map[string]string{n1.Address: doctor.CheckDockerSocket}, "", "AllowStreamLocalForwarding yes")
	})

	t.Run("only a loopback nameserver for pods", func(t *testing.T) {
		// systemd-resolved's stub, on n2 alone: a file bound over
		// /etc/resolv.conf in n2's mount namespace.
		stub := filepath.Join(t.TempDir(), "resolv.conf")
		if err := os.WriteFile(stub, []byte("nameserver 127.0.0.53\noptions edns0 trust-ad\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mnt, err := s.MountNS(n2.Name)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, "nsenter", "--mount="+mnt, "mount", "--bind", stub, "/etc/resolv.conf").CombinedOutput(); err != nil {
			t.Fatalf("bind %s over n2's /etc/resolv.conf: %v %s", stub, err, out)
		}
		defer func() {
			if out, err := exec.Command("nsenter", "--mount="+mnt, "umount", "/etc/resolv.conf").CombinedOutput(); err != nil {
				t.Errorf("umount n2's /etc/resolv.conf: %v %s", err, out)
			}
		}()
		stops(t, walk(t, c), map[string]string{n2.Address: doctor.CheckResolvConf}, "127.0.0.53", "resolv-conf")
	})

	t.Run("an image that cannot be pulled", func(t *testing.T) {
		// The sidekick's image named at a registry of the sandbox's bridge
		// where nothing listens: no node has it, none can pull it.
		missing := f.cluster(t, rt.Roles(3), func(c *spec.Cluster) {
			c.SystemImages.KubernetesServicesSidecar = s.BridgeAddress + ":5999/rigger-e2e/missing:1"
		})
		stops(t, walk(t, missing), map[string]string{n1.Address: doctor.CheckImages, n2.Address: doctor.CheckImages, n3.Address: doctor.CheckImages},
			"missing, and the registry says", "private_registries")
	})

	t.Run("a certificate of another CA", func(t *testing.T) {
		p := n1.HostPath("/etc/kubernetes/ssl/kube-proxy.pem")
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.WriteFile(p, orig, 0o644); err != nil {
				t.Error(err)
			}
		}()
		if err := os.WriteFile(p, foreignCert(t), 0o644); err != nil {
			t.Fatal(err)
		}
		stops(t, walk(t, c), map[string]string{n1.Address: doctor.CheckCertificates}, "x509: certificate signed by unknown authority", "another cluster")
	})

	// reissue replaces the certificate name on node n, until restore or
	// the end of the test, by one of the cluster's CA for the same key that
	// change makes other. The components read their certificates when they
	// start: the running ones keep theirs.
	reissue := func(t *testing.T, n sandbox.Node, name string, change func(*x509.Certificate)) (restore func()) {
		t.Helper()
		set, err := pki.Load(a.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		caCert, caKey := parsePair(t, set.Certs[pki.CACertName])
		certPath, _ := pki.NodePath(name)
		p := n.HostPath(certPath)
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(orig)
		old, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		leaf := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: old.Subject, DNSNames: old.DNSNames,
			IPAddresses: old.IPAddresses, KeyUsage: old.KeyUsage, ExtKeyUsage: old.ExtKeyUsage, NotBefore: old.NotBefore, NotAfter: old.NotAfter}
		change(leaf)
		der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, old.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		restore = func() {
			once.Do(func() {
				if err := os.WriteFile(p, orig, 0o644); err != nil {
					t.Error(err)
				}
			})
		}
		t.Cleanup(restore)
		return restore
	}

	t.Run("an expired certificate", func(t *testing.T) {
		reissue(t, n2, pki.KubeProxyCertName, func(c *x509.Certificate) {
			c.NotBefore, c.NotAfter = time.Now().AddDate(-1, 0, 0), time.Now().Add(-time.Hour)
		})
		stops(t, walk(t, c), map[string]string{n2.Address: doctor.CheckCertificates}, "x509: certificate has expired", "rigger cert rotate")
	})

	t.Run("a Node deleted, whose kubelet cannot register again: the API server's certificate without the node's names", func(t *testing.T) {
		// The API server's, as an install with other addresses left it.
		restore := reissue(t, n3, pki.KubeAPICertName, func(c *x509.Certificate) {
			c.DNSNames, c.IPAddresses = []string{"kubernetes"}, nil
		})
		stops(t, walk(t, c), map[string]string{n3.Address: doctor.CheckCertificates}, "x509: certificate is valid for kubernetes, not", "authentication.sans")

		// The cluster's DNS pods on n3, whose Node is deleted next: made
		// before the Node made again, they keep addresses of the earlier
		// Node's pod subnet, which nothing routes once the new Node has
		// another, and the cluster's DNS answers nothing until the apply
		// makes them again.
		cs := a.Client(ctx, t, c)
		dnsOn(ctx, t, cs, nodeName(2, n3), nodeName(0, n1), nodeName(1, n2))

		// As the machine would be after a reboot with it: the API server
		// serves it; the Node is deleted, and the kubelet, which asks its
		// node's own API server, cannot register it again.
		cli := sandboxtest.DockerClient(t, n3)
		restart := func(ctx context.Context, name string) {
			t.Helper()
			if err := cli.ContainerRestart(ctx, name, container.StopOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		restart(ctx, desired.KubeAPIServer)
		if err := cs.CoreV1().Nodes().Delete(ctx, nodeName(2, n3), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		restart(ctx, desired.Kubelet)
		// Past the certificates (and what fails on them too: the API
		// server's probe, and the controller manager and scheduler of n3,
		// which ask that API server and may restart), the walk stops where
		// the symptom shows, with the kubelet's own error. The cluster's
		// one DNS pod may have been on n3: its endpoint went with the
		// Node, and the other nodes' dns checks would fail too, rightly.
		var found []doctor.Finding
		rt.Eventually(ctx, t, 2*time.Minute, "node3's walk at node-registered with the kubelet's x509 error", func(ctx context.Context) (bool, error) {
			found = walk(t, c, doctor.CheckCertificates, doctor.CheckHealth, doctor.CheckContainers, doctor.CheckDNS)
			for _, fd := range found {
				if fd.Node == n3.Address && fd.Level == doctor.Fail {
					return fd.Check == doctor.CheckNodeRegistered && strings.Contains(fd.Found, "x509"), fmt.Errorf("%s: %s", fd.Check, fd.Found)
				}
			}
			return false, errors.New("node3's walk fails nothing")
		})
		stops(t, found, map[string]string{n3.Address: doctor.CheckNodeRegistered}, "has not registered", "hostname_override")

		restore()
		restart(ctx, desired.KubeAPIServer)
		// Its kubelet registers the Node again once its API server serves
		// the node's names. The plan then names the network plugin's pod
		// of the Node deleted, if the pod garbage collector has not
		// deleted it yet (about 40 s after the Node went): a pod listed
		// after the plan that was made before the Node was there for the
		// plan too.
		rt.Eventually(ctx, t, 2*time.Minute, "node3's Node registered again, with a pod subnet", func(ctx context.Context) (bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, nodeName(2, n3), metav1.GetOptions{})
			return err == nil && n.Spec.PodCIDR != "", err
		})
		var planned, strandedDNS []string
		for _, p := range a.Plan(ctx, t, c).NodeChanges {
			if p.Node == n3.Address && strings.Contains(p.Change, "was made for an earlier Node") {
				planned = append(planned, p.Change)
			}
			if p.Node == n3.Address && strings.Contains(p.Change, "pods outside the Node's pod subnet") {
				t.Logf("the plan before the apply: %q", p.Change)
				for _, f := range strings.Fields(p.Change) {
					if strings.HasPrefix(f, "kube-system/coredns-") {
						strandedDNS = append(strandedDNS, f)
					}
				}
			}
		}
		made, err := cs.CoreV1().Nodes().Get(ctx, nodeName(2, n3), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stale, err := kubenode.StalePluginPods(ctx, cs, addons.LabelAddon+"="+sysaddons.NetworkPlugin, []corev1.Node{*made}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the plan before the apply: %q; stale pods now: %v", planned, stale)
		if len(planned) == 0 && len(stale) > 0 {
			t.Errorf("the plan does not name the network plugin's pods %v of the earlier Node %s", stale, made.Name)
		}
		// An apply restarts the kubelet of a missing Node, which registers
		// again, and recreates the network plugin's pod made for the Node
		// deleted: the Node made again has another pod subnet, and the
		// overlay between the nodes works again once the plugin learnt it.
		// The DNS pods the plan found stranded (those the kubelet did not
		// stop when its Node went) the same apply makes again, once the
		// plugin's new pod is ready: the walk's dns check needs them. The
		// kubelet may end one first, when it admits it again on the Node
		// made again, which has no role label yet for the pod's affinity:
		// its controller makes it again then, and it has no address left.
		a.Apply(ctx, t, c)
		for _, p := range strandedDNS {
			if slices.ContainsFunc(a.Events(), func(l string) bool {
				return strings.Contains(l, "pod "+p+" had address") && strings.Contains(l, "deleted")
			}) {
				continue
			}
			ns, name, _ := strings.Cut(p, "/")
			pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) && pod.Status.PodIP == "" {
				t.Logf("the stranded DNS pod %s was ended by its kubelet: %s %s", p, pod.Status.Reason, pod.Status.Message)
				continue
			}
			now := fmt.Sprint(err)
			if err == nil {
				now = fmt.Sprintf("%s, address %q %s", pod.Status.Phase, pod.Status.PodIP, pod.Status.Reason)
			}
			t.Errorf("the apply did not make the stranded DNS pod %s again (now: %s):\n%s", p, now, strings.Join(a.Events(), "\n"))
		}
		rt.NodesReady(ctx, t, cs, []sandbox.Node{n1, n2, n3})
		healthy(t)
	})

	t.Run("etcd stopped", func(t *testing.T) {
		cli := sandboxtest.DockerClient(t, n3)
		timeout := 30
		if err := cli.ContainerStop(ctx, desired.Etcd, container.StopOptions{Timeout: &timeout}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cli.ContainerStart(context.WithoutCancel(ctx), desired.Etcd, container.StartOptions{}); err != nil {
				t.Error(err)
			}
		}()
		stops(t, walk(t, c), map[string]string{n3.Address: doctor.CheckContainers}, "etcd exited", "docker logs etcd")
		// The status of a plan names it too, with the same check.
		st := a.Plan(ctx, t, c).Status()
		if !hasProblem(st.Problems, n3.Address, doctor.CheckContainers, doctor.Fail) {
			t.Errorf("status problems %+v: no failed containers check of %s", st.Problems, n3.Address)
		}
	})

	t.Run("the network plugin's configuration removed", func(t *testing.T) {
		dir := n2.HostPath(sandbox.CNIConfDir)
		aside := t.TempDir()
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) == 0 {
			t.Fatalf("%s: %v entries, %v", dir, len(entries), err)
		}
		for _, e := range entries {
			if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(aside, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, e := range entries {
				if err := os.Rename(filepath.Join(aside, e.Name()), filepath.Join(dir, e.Name())); err != nil {
					t.Error(err)
				}
			}
		}()
		stops(t, walk(t, c), map[string]string{n2.Address: doctor.CheckCNI}, "cni config uninitialized", "install-cni")
	})

	// blockOn puts rule first in the chain of n's firewall, until the
	// test ends.
	blockOn := func(t *testing.T, n sandbox.Node, chain string, rule ...string) {
		t.Helper()
		iptables := func(op string) error {
			out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NetNS, "iptables", op, chain}, rule...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("iptables %s: %v: %s", op, err, out)
			}
			return nil
		}
		if err := iptables("-I"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := iptables("-D"); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("a port blocked by a firewall", func(t *testing.T) {
		blockOn(t, n3, "INPUT", "-p", "tcp", "--dport", "10250", "-j", "REJECT", "--reject-with", "tcp-reset")
		stops(t, walk(t, c), map[string]string{n3.Address: doctor.CheckPorts}, "10250 (kubelet) from "+n1.Address, "firewall")
	})

	t.Run("the overlay's port blocked", func(t *testing.T) {
		blockOn(t, n3, "INPUT", "-p", "udp", "--dport", "8472", "-j", "DROP")
		stops(t, walk(t, c), map[string]string{n1.Address: doctor.CheckOverlay, n2.Address: doctor.CheckOverlay, n3.Address: doctor.CheckOverlay},
			"no answer through the overlay from", "8472")
	})

	t.Run("a path that drops the overlay's full-size packets", func(t *testing.T) {
		// As a link with a smaller MTU on the way would, for VXLAN
		// packets larger than 1400 bytes reaching n3 (flannel's, with its
		// MTU of 1450, are 1500): small pings pass, full-size ones not.
		blockOn(t, n3, "INPUT", "-p", "udp", "--dport", "8472", "-m", "length", "--length", "1401:65535", "-j", "DROP")
		stops(t, walk(t, c), map[string]string{n1.Address: doctor.CheckOverlay, n2.Address: doctor.CheckOverlay, n3.Address: doctor.CheckOverlay},
			"small pings answered, pings of", "UDP fragments")
	})

	t.Run("pods on a node cut off", func(t *testing.T) {
		// The nodes answer each other through the overlay, but what is
		// forwarded to n3's pods is dropped: only pods see it.
		blockOn(t, n3, "FORWARD", "-o", "cni0", "-j", "DROP")
		found := walkAll(t, c)
		stops(t, found, map[string]string{n1.Address: doctor.CheckPodNetwork, n2.Address: doctor.CheckPodNetwork, n3.Address: doctor.CheckPodNetwork},
			"no answer from the probe pods on", "iptables -S FORWARD")
		for _, fd := range found {
			// n1 and n2 miss n3's probe pod alone.
			if fd.Check == doctor.CheckPodNetwork && fd.Node != n3.Address && strings.Count(fd.Found, "(") != 1 {
				t.Errorf("node %s: pod-network %s: want one probe pod named", fd.Node, fd.Found)
			}
		}
		// The probe is gone with the walk.
		cs := a.Client(ctx, t, c)
		dss, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=rigger-doctor"})
		if err != nil || len(dss.Items) != 0 {
			t.Errorf("probe DaemonSets left: %v %v", dss, err)
		}
	})

	t.Run("the cluster DNS down", func(t *testing.T) {
		cs := a.Client(ctx, t, c)
		scale := func(n int32) error {
			_, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).UpdateScale(context.WithoutCancel(ctx), "coredns",
				&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: metav1.NamespaceSystem}, Spec: autoscalingv1.ScaleSpec{Replicas: n}},
				metav1.UpdateOptions{})
			return err
		}
		if err := scale(0); err != nil {
			t.Fatal(err)
		}
		restored := false
		defer func() {
			if !restored {
				// The next subtests' walks want the DNS back.
				if err := scale(1); err != nil {
					t.Error(err)
				}
				healthy(t)
			}
		}()
		// Gone, or ended: a pod that failed earlier (its kubelet rejected
		// it on a restart) is no replica the scale deletes, and answers
		// nothing.
		rt.Eventually(ctx, t, 2*time.Minute, "the DNS pods gone", func(ctx context.Context) (bool, error) {
			pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
			if err != nil {
				return false, err
			}
			var left []string
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
					left = append(left, fmt.Sprintf("%s on %q: %s, deleted at %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp))
				}
			}
			return len(left) == 0, fmt.Errorf("left: %s", strings.Join(left, "; "))
		})
		stops(t, walk(t, c), map[string]string{n1.Address: doctor.CheckDNS, n2.Address: doctor.CheckDNS, n3.Address: doctor.CheckDNS},
			"kube-system/kube-dns has no ready endpoint", "scaled to 0")
		restored = true
		if err := scale(1); err != nil {
			t.Fatal(err)
		}
		healthy(t)
	})

	t.Run("a stale Node and a second Node for one machine", func(t *testing.T) {
		cs := a.Client(ctx, t, c)
		for name, addr := range map[string]string{"rigger-e2e-stale": "10.231.17.99", "m-rigger-e2e-dup": n2.Address} {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{desired.NodeAddressLabel: addr}}}
			if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := cs.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
			}()
		}
		found := walk(t, c)
		stops(t, found, map[string]string{n2.Address: doctor.CheckNodeRegistered}, "m-rigger-e2e-dup", "kubectl delete node m-rigger-e2e-dup")
		for _, fd := range found {
			if fd.Check == doctor.CheckStaleNodes && (fd.Level != doctor.Warn || !strings.Contains(fd.Found, "rigger-e2e-stale") || !strings.Contains(fd.Fix, "rigger.stale_nodes: delete")) {
				t.Errorf("stale-nodes: %+v", fd)
			}
		}
	})

	t.Run("two controllers fighting over a Node", func(t *testing.T) {
		// A client of its own, not held back by client-go's default rate
		// limit (5 a second), which a loaded API server's slow answers
		// would bring below the check's threshold.
		cfg := a.RESTConfig(ctx, t, c)
		cfg.QPS, cfg.Burst = 100, 100
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		name := nodeName(1, n2)
		// Each sets the label to its own value, as fast as the API server
		// answers, until the walk is done.
		fightCtx, stop := context.WithCancel(ctx)
		var (
			wg     sync.WaitGroup
			landed [2]atomic.Int64
		)
		for i, who := range []string{"fighter-a", "fighter-b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				patch := []byte(`{"metadata":{"labels":{"e2e.rigger.io/owner":"` + who + `"}}}`)
				for fightCtx.Err() == nil {
					if _, err := cs.CoreV1().Nodes().Patch(fightCtx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: who}); err == nil {
						landed[i].Add(1)
					}
					select {
					case <-fightCtx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
		}
		// The walk watches the Nodes for 3 s from its start: the fight
		// must be under way by then, each fighter's writes going through.
		testwait.For(t, time.Minute, "each fighter's first 3 patches of the Node", func() error {
			if x, y := landed[0].Load(), landed[1].Load(); x < 3 || y < 3 {
				return fmt.Errorf("%d and %d patches went through", x, y)
			}
			return nil
		})
		found := walkAll(t, c)
		stop()
		wg.Wait()
		defer func() {
			patch := []byte(`{"metadata":{"labels":{"e2e.rigger.io/owner":null}}}`)
			if _, err := cs.CoreV1().Nodes().Patch(context.WithoutCancel(ctx), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Error(err)
			}
		}()
		stops(t, found, nil, "", "")
		for _, fd := range found {
			if fd.Check != doctor.CheckNodeUpdates {
				continue
			}
			fighting := fd.Node == n2.Address
			if got := fd.Level == doctor.Warn; got != fighting || fighting && (!strings.Contains(fd.Found, "fighter-a") || !strings.Contains(fd.Found, "fighter-b")) {
				t.Errorf("node %s: node-updates %s: %s", fd.Node, fd.Level, fd.Found)
			}
		}
	})

	t.Run("Docker stopped", func(t *testing.T) {
		if err := s.StopService(ctx, n2.Name, sandbox.ServiceDocker); err != nil {
			t.Fatal(err)
		}
		started := false
		defer func() {
			if !started {
				if err := s.StartService(context.WithoutCancel(ctx), n2.Name, sandbox.ServiceDocker); err != nil {
					t.Error(err)
				}
			}
		}()
		// The cluster's one DNS pod may be on n2: the other nodes' dns
		// checks would fail too, rightly.
		stops(t, walk(t, c, doctor.CheckDNS), map[string]string{n2.Address: doctor.CheckDockerSocket}, "Docker socket", "dockerd runs")
		started = true
		if err := s.StartService(ctx, n2.Name, sandbox.ServiceDocker); err != nil {
			t.Fatal(err)
		}
		// Docker starts its containers again; an apply waits for them.
		a.Apply(ctx, t, c)
	})

	t.Run("healthy again", func(t *testing.T) {
		// The network plugin's pod of a node whose engine restarted
		// takes a moment to be ready again.
		healthy(t)
	})
}

// hasProblem says whether problems hold a finding of check at level on
// node.
func hasProblem(problems []doctor.Finding, node, check string, level doctor.Level) bool {
	return slices.ContainsFunc(problems, func(f doctor.Finding) bool {
		return f.Node == node && f.Check == check && f.Level == level
	})
}

// rewriteKnownHost copies the known_hosts file with the keys of host
// replaced by a new key: the node's host key as if it had changed.
func rewriteKnownHost(t *testing.T, file, host string) string {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	replaced := false
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 3 && fields[0] == host {
			line = host + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))
			replaced = true
		}
		out.WriteString(line + "\n")
	}
	if !replaced {
		t.Fatalf("no line for %s in %s", host, file)
	}
	p := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(p, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// foreignCert is a certificate signed by a CA of its own: what another
// cluster's install leaves on a machine.
// parsePair parses a certificate of the cluster's PKI and its key.
func parsePair(t *testing.T, c pki.Cert) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	blk, _ := pem.Decode(c.CertPEM)
	if blk == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(c.KeyPEM)
	if kb == nil {
		t.Fatal("no PEM key")
	}
	var key any
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cert, key.(crypto.Signer)
}

func foreignCert(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-cluster-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "system:kube-proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// overlayState logs what the pod network's overlay is made of, for a
// failed wait for it: each Node's UID, age, pod subnet and flannel's
// annotations, and the kube-system pods of the network plugin's
// DaemonSets with their node, age and restarts.
func overlayState(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	// One message, so that a failure's own messages stay among the last
	// ones make test's summary shows.
	var b strings.Builder
	defer func() { t.Log("overlay state:\n" + b.String()) }()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "list Nodes: %v\n", err)
		return
	}
	for _, n := range nodes.Items {
		var ann []string
		for k, v := range n.Annotations {
			if strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
				ann = append(ann, strings.TrimPrefix(k, "flannel.alpha.coreos.com/")+"="+v)
			}
		}
		slices.Sort(ann)
		fmt.Fprintf(&b, "Node %s uid %s created %s podCIDR %s flannel %v\n", n.Name, n.UID, n.CreationTimestamp.UTC().Format(time.TimeOnly), n.Spec.PodCIDR, ann)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "list pods: %v\n", err)
		return
	}
	for _, p := range pods.Items {
		restarts := int32(0)
		for _, st := range p.Status.ContainerStatuses {
			restarts += st.RestartCount
		}
		fmt.Fprintf(&b, "pod %s on %s address %s created %s phase %s reason %q ready %v restarts %d deleting %v\n", p.Name, p.Spec.NodeName, p.Status.PodIP,
			p.CreationTimestamp.UTC().Format(time.TimeOnly), p.Status.Phase, p.Status.Reason+" "+p.Status.Message, podstatus.Ready(&p), restarts, p.DeletionTimestamp != nil)
	}
}

// dnsOn has the cluster's DNS pods (k8s-app=kube-dns) made again on Node
// node, the Nodes others cordoned meanwhile, and waits for them to be
// ready there. A pod on another Node is deleted at each look: one made
// before the scheduler saw the cordon is placed there still.
func dnsOn(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, others ...string) {
	t.Helper()
	cordon := func(ctx context.Context, on bool) {
		for _, o := range others {
			patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, o, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("cordon %s: %v", o, err)
			}
		}
	}
	cordon(ctx, true)
	defer cordon(context.WithoutCancel(ctx), false)
	rt.Eventually(ctx, t, 2*time.Minute, "the DNS pods ready on "+node, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, err
		}
		var live int
		var not []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			live++
			if p.Spec.NodeName != node && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			if p.Spec.NodeName != node || !podstatus.Ready(&p) {
				not = append(not, fmt.Sprintf("%s on %q: %s, ready %v", p.Name, p.Spec.NodeName, p.Status.Phase, podstatus.Ready(&p)))
			}
		}
		return live > 0 && len(not) == 0, fmt.Errorf("%d pods, not ready on %s: %s", live, node, strings.Join(not, "; "))
	})
}
