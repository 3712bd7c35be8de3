package rkeup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// subnet is this package's sandbox (sandboxtest's table).
const subnet = 51

// upgradeTo is the minor the adopted cluster is taken to.
const upgradeTo = "v1.33.13"

// TestRKEUpSandbox runs RKE v1.8.14's own `rke up` on four sandbox nodes
// (three servers with every role, a worker; RKE's defaults but flannel, no
// ingress and the sandbox's images: the stand-ins of `rigger sandbox
// images --rke` for rke-tools and for hyperkube's kubectl), with secrets
// encrypted at rest by the key RKE makes, the worker unreachable (its sshd
// stopped: rke up drops it with a warning, provisions the servers and says
// it finished), a workload and a snapshot `rke etcd snapshot-save` takes;
// then does what docs/migrating-from-rke.md tells a user to:
//   - rigger adopt from cluster.rkestate (and, to compare, from the
//     full-cluster-state Secret and from the nodes: the same CA), which
//     says the worker will be added;
//   - rigger plan: every RKE container of every server replaced, for
//     adopt; the worker's containers created;
//   - rigger apply, with the API asked through the three API servers and
//     the workload through the three servers every 200 ms: no request
//     fails on all three; the same CA, the same etcd members, the objects
//     made under RKE kept, a Secret written after stored with RKE's key,
//     every Node Ready, the worker's too, RKE's etcd-rolling-snapshots
//     replaced by rigger's;
//   - the next plan is empty and rigger doctor passes;
//   - the snapshot RKE took is restored by rigger (a ConfigMap made after
//     it gone, one made before it there; the worker's Node, not in it,
//     registered again), and an apply makes the plan empty again;
//   - a skipped minor (1.32 to 1.34) and an object stored at an API
//     version 1.33 no longer serves refused by rigger plan;
//   - one minor up (1.32 to 1.33) with the API and the workload asked
//     throughout, none failing, and the next plan empty.
//
// It runs in make test-long. Each phase logs its time from the start:
// docs/migrating-from-rke.md quotes them.
func TestRKEUpSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	start := time.Now()
	phase := func(name string) { t.Logf("==> %s (%s since start)", name, time.Since(start).Round(time.Second)) }
	bin := sandboxtest.BuildRigger(t)
	kubectl := sandboxtest.BuildKubectl(t)
	rke := sandboxtest.BuildRKE(t)
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 4, Images: true, RiggerBinary: bin,
		RKE: true, Kubectl: kubectl, KubernetesVersions: []string{upgradeTo}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	servers, worker := sb.Nodes[:3], sb.Nodes[3]
	dir := t.TempDir()
	clusterFile := filepath.Join(dir, "cluster.yml")
	yml := rkeClusterYML(sb)
	writeFile(t, clusterFile, yml)
	riggerCode := func(code int, args ...string) string {
		return runCode(t, dir, code, bin, append(args, "-f", clusterFile, "--state-dir", filepath.Join(dir, "state"), "--known-hosts", sb.KnownHostsPath)...)
	}
	rigger := func(args ...string) string { return riggerCode(0, args...) }

	// The worker's sshd is down for rke up: RKE drops it from its state
	// and from what it deploys, with a warning, brings up the other three
	// and says it finished.
	phase("rke up (RKE " + sandboxtest.RKEVersion + "), the worker unreachable")
	if err := sb.StopService(ctx, worker.Name, sandbox.ServiceSSHD); err != nil {
		t.Fatal(err)
	}
	out := run(t, dir, rke, "up", "--disable-port-check")
	t.Logf("rke up: %s", lastLine(out))
	for _, want := range []string{"Failed to set up SSH tunneling for host [" + worker.Address + "]", "Removing host [" + worker.Address + "] from node lists"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rke up did not warn %q:\n%s", want, out)
		}
	}
	if err := sb.StartService(ctx, worker.Name, sandbox.ServiceSSHD); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kube_config_cluster.yml")
	cs := kubeClient(t, kubeconfig, "")
	waitNodes(ctx, t, cs, "every Node RKE provisioned Ready under RKE", sandbox.KubernetesVersion, servers)

	phase("a workload, a Secret and a snapshot under RKE")
	startWorkload(ctx, t, cs, kubectl, kubeconfig)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made-under-rke"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, dir, rke, "etcd", "snapshot-save", "--name", "before-rigger")
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "made-after-the-snapshot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node1 := sandboxtest.DockerClient(t, sb.Nodes[0])
	membersBefore := etcdMembers(ctx, t, node1)
	caBefore := nodeFile(t, sb.Nodes[0], "/etc/kubernetes/ssl/kube-ca.pem")
	encKey := rkeEncryptionKey(t, nodeFile(t, sb.Nodes[0], "/etc/kubernetes/ssl/encryption.yaml"))
	addonsBefore := addonUIDs(ctx, t, cs)

	phase("rigger adopt")
	adoptOut := rigger("adopt", "--rkestate", filepath.Join(dir, "cluster.rkestate"))
	t.Logf("rigger adopt:\n%s", adoptOut)
	if want := "RKE did not provision them: rke up drops a node it cannot reach, with a warning): " + worker.Address + "."; !strings.Contains(adoptOut, want) {
		t.Errorf("rigger adopt does not say %q", want)
	}
	for _, from := range [][]string{{"--kubeconfig", kubeconfig}, nil} {
		other := filepath.Join(t.TempDir(), "state")
		run(t, dir, bin, append([]string{"adopt", "-f", clusterFile, "--state-dir", other, "--known-hosts", sb.KnownHostsPath}, from...)...)
		if got := readFile(t, filepath.Join(other, "kube-ca.pem")); got != readFile(t, filepath.Join(dir, "state", "kube-ca.pem")) {
			t.Errorf("adopt %v imported another CA than adopt --rkestate", from)
		}
	}
	if got := readFile(t, filepath.Join(dir, "state", "kube-ca.pem")); got != caBefore {
		t.Errorf("the CA adopt imported is not the nodes' kube-ca.pem")
	}
	checkOtherClusterYMLRefused(t, dir, bin, sb, yml)

	phase("rigger plan")
	planText := riggerCode(2, "plan")
	t.Logf("the first plan:\n%s", planText)
	checkFirstPlan(t, dir, bin, clusterFile, sb, servers, worker)

	phase("rigger apply, the API and the workload asked throughout; the worker added")
	poll := startPolling(ctx, t, kubeconfig, servers)
	t.Logf("rigger apply:\n%s", rigger("apply", "--yes", "--timings"))
	poll.stop(t)
	phase("after the takeover")
	if got := etcdMembers(ctx, t, node1); !slices.Equal(got, membersBefore) {
		t.Errorf("etcd members after the takeover: %v, before: %v", got, membersBefore)
	}
	if got := nodeFile(t, sb.Nodes[0], "/etc/kubernetes/ssl/kube-ca.pem"); got != caBefore {
		t.Errorf("the nodes' CA changed in the takeover")
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "made-under-rke", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap made under RKE: %v", err)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "made-under-rigger"}, StringData: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if raw := etcdGet(ctx, t, node1, "/registry/secrets/default/made-under-rigger"); !strings.HasPrefix(raw, "k8s:enc:aescbc:v1:"+encKey+":") {
		t.Errorf("a Secret written after the takeover is stored as %.40q in etcd, want it encrypted with RKE's key %s", raw, encKey)
	}
	waitNodes(ctx, t, cs, "every Node Ready after the takeover, the worker's too", sandbox.KubernetesVersion, sb.Nodes)
	checkRiggersContainers(ctx, t, sb)
	checkRollingSnapshots(ctx, t, servers)
	checkAddonsTakenOver(ctx, t, cs, addonsBefore)

	phase("the next plan")
	if out := rigger("plan"); !strings.Contains(out, "No changes.") {
		t.Errorf("the plan after the takeover is not empty:\n%s", out)
	}
	phase("rigger doctor")
	t.Logf("rigger doctor: %s", lastLine(rigger("doctor")))

	phase("the snapshot RKE took, restored by rigger")
	t.Logf("rigger snapshot restore:\n%s", rigger("snapshot", "restore", "before-rigger", "--yes"))
	testwait.ForContext(ctx, t, 3*time.Minute, "the API answers with the snapshot's data", func(ctx context.Context) error {
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "made-under-rke", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "made-after-the-snapshot", metav1.GetOptions{}); err == nil {
			return fmt.Errorf("the ConfigMap made after the snapshot is there")
		}
		return nil
	})
	// The snapshot is from before the takeover, and from before the
	// worker joined: its add-ons are RKE's, and the worker's Node is not
	// in it (the apply after has its kubelet register it again).
	waitNodes(ctx, t, cs, "the Nodes of the snapshot Ready after the restore", sandbox.KubernetesVersion, servers)
	t.Logf("rigger apply after the restore:\n%s", rigger("apply", "--yes"))
	waitNodes(ctx, t, cs, "every Node Ready after the restore and an apply", sandbox.KubernetesVersion, sb.Nodes)
	if out := rigger("plan"); !strings.Contains(out, "No changes.") {
		t.Errorf("the plan after the restore and an apply is not empty:\n%s", out)
	}

	phase("upgrades refused: a skipped minor, an object stored at an API version " + upgradeTo + " no longer serves")
	checkUpgradesRefused(ctx, t, node1, clusterFile, yml, riggerCode)

	phase("one minor up: " + upgradeTo + ", the API and the workload asked throughout")
	writeFile(t, clusterFile, upgradeYML(t, yml, upgradeTo))
	poll = startPolling(ctx, t, kubeconfig, servers)
	t.Logf("rigger apply:\n%s", rigger("apply", "--yes", "--timings"))
	poll.stop(t)
	waitNodes(ctx, t, cs, "every Node Ready on "+upgradeTo, upgradeTo, sb.Nodes)
	if out := rigger("plan"); !strings.Contains(out, "No changes.") {
		t.Errorf("the plan after the upgrade is not empty:\n%s", out)
	}
	phase("upgraded")
}

// upgradeYML is the adopted cluster's cluster.yml (yml) on the sandbox's
// images of Kubernetes version and its etcd. RKE's metrics-server keeps
// its certificates in an emptyDir: a drain must be told it may delete that
// (RKE's own upgrades do not drain).
func upgradeYML(t *testing.T, yml, version string) string {
	t.Helper()
	images, err := sandbox.VersionImages(version)
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer(sandbox.RKEHyperkubeImage, images["kubernetes"], sandbox.EtcdRef(sandbox.EtcdVersion), images["etcd"]).Replace(yml) +
		"upgrade_strategy:\n  node_drain_input: {delete_local_data: true}\n"
}

// checkUpgradesRefused checks that rigger plan refuses to skip a minor
// (RKE's 1.32 to 1.34) and to upgrade to upgradeTo while etcd holds an
// object stored at an API version that version no longer serves (an
// IPAddress of the alpha API, MultiCIDRServiceAllocator, that a 1.32 API
// server wrote), naming it, and plans the upgrade once it is gone. It
// leaves clusterFile on upgradeTo's images.
func checkUpgradesRefused(ctx context.Context, t *testing.T, etcd *client.Client, clusterFile, yml string, rigger func(code int, args ...string) string) {
	t.Helper()
	skipped := "v1.34.4"
	writeFile(t, clusterFile, upgradeYML(t, yml, skipped))
	if out := rigger(1, "plan"); !strings.Contains(out, "one minor version at a time") {
		t.Errorf("plan %s → %s: want it refused, one minor version at a time:\n%s", sandbox.KubernetesVersion, skipped, out)
	}
	const key = "/registry/ipaddresses/10.43.0.99"
	execIn(ctx, t, etcd, "etcd", "etcdctl", "put", key,
		`{"apiVersion":"networking.k8s.io/v1alpha1","kind":"IPAddress","metadata":{"name":"10.43.0.99"},"spec":{"parentRef":{"resource":"services","namespace":"default","name":"gone"}}}`)
	writeFile(t, clusterFile, upgradeYML(t, yml, upgradeTo))
	if out := rigger(1, "plan"); !strings.Contains(out, "ipaddresses.networking.k8s.io 10.43.0.99 stored at networking.k8s.io/v1alpha1") {
		t.Errorf("plan %s → %s with %s stored at v1alpha1: want it refused naming the object:\n%s", sandbox.KubernetesVersion, upgradeTo, key, out)
	}
	execIn(ctx, t, etcd, "etcd", "etcdctl", "del", key)
	rigger(2, "plan")
}

// rkeClusterYML is the cluster.yml rke up reads: RKE's defaults but the
// sandbox's (flannel, no ingress: the sandbox builds no canal, calico or
// ingress-nginx; its kubelet and kube-proxy flags for nodes that share a
// disk and a conntrack table), secrets encrypted at rest, and the
// sandbox's images. RKE's coredns-autoscaler image cannot be built
// offline: rigger is told to leave that Deployment out (RKE ignores the
// rigger block).
func rkeClusterYML(sb *sandbox.Sandbox) string {
	images := maps.Clone(sb.SystemImages)
	maps.Copy(images, sandbox.RKESystemImages())
	var b strings.Builder
	fmt.Fprintf(&b, "cluster_name: rke\nssh_key_path: %s\nnodes:\n", sb.KeyPath)
	for i, n := range sb.Nodes {
		roles := "controlplane, etcd, worker"
		if i >= 3 {
			roles = "worker"
		}
		fmt.Fprintf(&b, "  - {address: %s, user: %s, role: [%s], hostname_override: %s}\n", n.Address, n.User, roles, n.Hostname)
	}
	b.WriteString("system_images:\n")
	for _, k := range slices.Sorted(maps.Keys(images)) {
		fmt.Fprintf(&b, "  %s: %s\n", k, images[k])
	}
	b.WriteString(`services:
  kube-api:
    secrets_encryption_config: {enabled: true}
  kubelet:
    extra_args:
      image-gc-high-threshold: "100"
      eviction-hard: "memory.available<100Mi,nodefs.available<1%,imagefs.available<1%,nodefs.inodesFree<1%"
  kubeproxy:
    extra_args:
      conntrack-max-per-core: "0"
network:
  plugin: flannel
ingress:
  provider: none
rigger:
  addons:
    exclude:
      - {kind: Deployment, namespace: kube-system, name: coredns-autoscaler}
`)
	return b.String()
}

// checkOtherClusterYMLRefused checks that adopt refuses a cluster.yml that
// is not the one of the last rke up (the third server without etcd and
// with another hostname), with RKE's state from each source, naming the
// differences that source can tell (the nodes tell roles, not names) and
// what to do, and that it leaves no state directory.
func checkOtherClusterYMLRefused(t *testing.T, dir, bin string, sb *sandbox.Sandbox, yml string) {
	t.Helper()
	third := sb.Nodes[2]
	line := fmt.Sprintf("  - {address: %s, user: %s, role: [controlplane, etcd, worker], hostname_override: %s}\n", third.Address, third.User, third.Hostname)
	if !strings.Contains(yml, line) {
		t.Fatalf("no line %q in the cluster.yml", line)
	}
	other := filepath.Join(t.TempDir(), "cluster.yml")
	writeFile(t, other, strings.Replace(yml, line,
		fmt.Sprintf("  - {address: %s, user: %s, role: [controlplane, worker], hostname_override: renamed}\n", third.Address, third.User), 1))
	roles := "node " + third.Address + " has roles controlplane,worker in cluster.yml but controlplane,etcd,worker in"
	name := "node " + third.Address + " has hostname_override renamed in cluster.yml but " + third.Hostname + " in"
	for _, tt := range []struct {
		from []string
		want []string
	}{
		{[]string{"--rkestate", filepath.Join(dir, "cluster.rkestate")}, []string{roles, name}},
		{[]string{"--kubeconfig", filepath.Join(dir, "kube_config_cluster.yml")}, []string{roles, name}},
		{nil, []string{roles}},
	} {
		state := filepath.Join(t.TempDir(), "state")
		out := runCode(t, dir, 1, bin, append([]string{"adopt", "-f", other, "--state-dir", state, "--known-hosts", sb.KnownHostsPath}, tt.from...)...)
		for _, want := range append(tt.want, "is not that of this cluster.yml",
			"adopt the cluster as RKE last deployed it (the cluster.yml of the last rke up)") {
			if !strings.Contains(out, want) {
				t.Errorf("adopt %v of another cluster.yml does not say %q:\n%s", tt.from, want, out)
			}
		}
		if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("adopt %v refused, and left its state directory: %v", tt.from, err)
		}
		t.Logf("adopt %v of another cluster.yml: %s", tt.from, strings.TrimSpace(out))
	}
}

// checkFirstPlan checks the first plan's steps: on every server every one
// of RKE's containers replaced, for adopt; on the worker RKE did not
// provision, a worker's containers created; nothing removed.
func checkFirstPlan(t *testing.T, dir, bin, clusterFile string, sb *sandbox.Sandbox, servers []sandbox.Node, worker sandbox.Node) {
	t.Helper()
	out := runCode(t, dir, 2, bin, "plan", "-o", "json", "-f", clusterFile, "--state-dir", filepath.Join(dir, "state"), "--known-hosts", sb.KnownHostsPath)
	var plan struct {
		Steps []struct {
			Node, Component, Action, Reason string
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	steps := func(n sandbox.Node, action string, adopt bool) []string {
		var components []string
		for _, s := range plan.Steps {
			if s.Node == n.Address && s.Action == action && (!adopt || strings.HasPrefix(s.Reason, "adopt:")) {
				components = append(components, s.Component)
			}
		}
		return components
	}
	for _, n := range sb.Nodes {
		if removed := steps(n, "remove", false); len(removed) > 0 {
			t.Errorf("the first plan removes %v on %s", removed, n.Address)
		}
	}
	want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "service-sidekick", "kubelet", "kube-proxy", "etcd-rolling-snapshots"}
	for _, n := range servers {
		replaced := steps(n, "replace", true)
		for _, c := range want {
			if !slices.Contains(replaced, c) {
				t.Errorf("the first plan does not replace RKE's %s on %s for adopt (it replaces %v)", c, n.Address, replaced)
			}
		}
	}
	created := steps(worker, "create", false)
	for _, c := range []string{"nginx-proxy", "kubelet", "kube-proxy"} {
		if !slices.Contains(created, c) {
			t.Errorf("the first plan does not create %s on %s, the worker RKE did not provision (it creates %v)", c, worker.Address, created)
		}
	}
	if replaced := steps(worker, "replace", false); len(replaced) > 0 {
		t.Errorf("the first plan replaces %v on %s, where RKE made nothing", replaced, worker.Address)
	}
}

// rkeAddons are objects of each add-on RKE's Jobs applied.
var rkeAddons = []struct{ kind, name string }{{"DaemonSet", "kube-flannel"}, {"Deployment", "coredns"}, {"Deployment", "metrics-server"}}

// addonUIDs are the UIDs of rkeAddons (in kube-system), by name.
func addonUIDs(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, a := range rkeAddons {
		m := addonMeta(ctx, t, cs, a.kind, a.name)
		uids[a.name] = string(m.UID)
	}
	return uids
}

func addonMeta(ctx context.Context, t *testing.T, cs kubernetes.Interface, kind, name string) metav1.ObjectMeta {
	t.Helper()
	var m metav1.ObjectMeta
	var err error
	switch kind {
	case "DaemonSet":
		var o *appsv1.DaemonSet
		if o, err = cs.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{}); err == nil {
			m = o.ObjectMeta
		}
	default:
		var o *appsv1.Deployment
		if o, err = cs.AppsV1().Deployments("kube-system").Get(ctx, name, metav1.GetOptions{}); err == nil {
			m = o.ObjectMeta
		}
	}
	if err != nil {
		t.Fatalf("%s kube-system/%s: %v", kind, name, err)
	}
	return m
}

// checkAddonsTakenOver checks that the objects RKE's Jobs applied are
// the same objects (not deleted and made again) and that rigger's
// server-side apply manages them now.
func checkAddonsTakenOver(ctx context.Context, t *testing.T, cs kubernetes.Interface, before map[string]string) {
	t.Helper()
	for _, a := range rkeAddons {
		m := addonMeta(ctx, t, cs, a.kind, a.name)
		if string(m.UID) != before[a.name] {
			t.Errorf("%s kube-system/%s was made again in the takeover (UID %s, under RKE %s)", a.kind, a.name, m.UID, before[a.name])
		}
		applied := false
		for _, f := range m.ManagedFields {
			applied = applied || f.Manager == addons.ManagedBy && f.Operation == metav1.ManagedFieldsOperationApply
		}
		if !applied {
			t.Errorf("%s kube-system/%s is not applied by %s: its managers %v", a.kind, a.name, addons.ManagedBy, m.ManagedFields)
		}
	}
}

// checkRiggersContainers checks that no container of RKE's is left on
// the nodes: every component runs in a container rigger made.
func checkRiggersContainers(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	for _, n := range sb.Nodes {
		cli := sandboxtest.DockerClient(t, n)
		list, err := cli.ContainerList(ctx, container.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			name := strings.TrimPrefix(c.Names[0], "/")
			if strings.HasPrefix(name, "k8s_") {
				continue // the kubelet's
			}
			if c.Labels[desired.LabelCluster] != "rke" {
				t.Errorf("node %s: container %s (%s) is not rigger's: labels %v", n.Address, name, c.Image, c.Labels)
			}
		}
	}
}

// checkRollingSnapshots checks that the adopted cluster keeps its
// scheduled snapshots: on every etcd node rigger's etcd-rolling-snapshots,
// rigger's binary in RKE's rke-tools image, checks the schedule (the
// snapshot the takeover took before etcd changed is its last; the
// snapshotter phase of reconcile/etcdsnap's TestEtcdSandbox sees one taken
// when due).
func checkRollingSnapshots(ctx context.Context, t *testing.T, etcdNodes []sandbox.Node) {
	t.Helper()
	clients := map[string]*client.Client{}
	for _, n := range etcdNodes {
		clients[n.Address] = sandboxtest.DockerClient(t, n)
		info, err := clients[n.Address].ContainerInspect(ctx, desired.EtcdRollingSnapshots)
		if err != nil {
			t.Fatalf("node %s: %v", n.Address, err)
		}
		if info.Config.Image != sandbox.RKEToolsStandInImage || !slices.Equal(info.Config.Entrypoint, []string{desired.BinaryPath}) {
			t.Errorf("node %s: %s is not rigger's binary in RKE's %s: image %s, entrypoint %v", n.Address, desired.EtcdRollingSnapshots,
				sandbox.RKEToolsStandInImage, info.Config.Image, info.Config.Entrypoint)
		}
	}
	testwait.ForContext(ctx, t, 3*time.Minute, "rigger's etcd-rolling-snapshots on every etcd node checks the schedule", func(ctx context.Context) error {
		for _, n := range etcdNodes {
			l := dockerop.Logs(ctx, clients[n.Address], desired.EtcdRollingSnapshots)
			if strings.Contains(l, "scheduled snapshot failed") {
				t.Fatalf("node %s: %s failed:\n%s", n.Address, desired.EtcdRollingSnapshots, l)
			}
			if !strings.Contains(l, "no scheduled snapshot due") && !strings.Contains(l, "scheduled snapshot taken and verified") &&
				!strings.Contains(l, "scheduled snapshot not taken here") {
				return fmt.Errorf("node %s: no check logged yet: %q", n.Address, l)
			}
		}
		return nil
	})
}

// startWorkload runs three web servers behind the NodePort Service web
// (30080), with a PodDisruptionBudget that keeps two.
func startWorkload(ctx context.Context, t *testing.T, cs kubernetes.Interface, kubectl, kubeconfig string) {
	t.Helper()
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 20
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers:
        - name: httpd
          image: ` + sandbox.RKEToolsStandInImage + `
          imagePullPolicy: IfNotPresent
          # sh stays PID 1 and exits at SIGTERM, as a server does: httpd as
          # PID 1 ignores it, and each drain waited out the grace period.
          command: [/bin/sh, -c, "mkdir -p /tmp/www && echo ok > /tmp/www/index.html || exit 1; trap 'exit 0' TERM; httpd -f -p 8080 -h /tmp/www & wait"]
          ports: [{containerPort: 8080}]
          readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
          lifecycle: {preStop: {exec: {command: [sleep, "5"]}}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 8080, nodePort: 30080}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
`
	f := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, f, manifest)
	run(t, "", kubectl, "--kubeconfig", kubeconfig, "apply", "-f", f)
	testwait.ForContext(ctx, t, 3*time.Minute, "the web servers ready", func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 3 {
			return fmt.Errorf("%d of 3 ready", d.Status.ReadyReplicas)
		}
		return nil
	})
}

// poller asks, every 200 ms, the API through each of the three API
// servers in turn and the workload through each node's NodePort in turn;
// a request fails when every one of the three fails.
type poller struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	mu     sync.Mutex
	asked  map[string]int
	failed map[string][]string
}

func startPolling(ctx context.Context, t *testing.T, kubeconfig string, servers []sandbox.Node) *poller {
	ctx, cancel := context.WithCancel(ctx)
	p := &poller{cancel: cancel, asked: map[string]int{}, failed: map[string][]string{}}
	var apis []kubernetes.Interface
	for _, n := range servers {
		apis = append(apis, kubeClient(t, kubeconfig, "https://"+n.Address+":6443"))
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.ask(ctx, "api", func(i int) error {
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := apis[i].CoreV1().Namespaces().Get(c, "default", metav1.GetOptions{})
				return err
			}, len(apis))
			p.ask(ctx, "web", func(i int) error {
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				return exec.CommandContext(c, "curl", "-sf", "-o", "/dev/null", "http://"+servers[i].Address+":30080/").Run()
			}, len(servers))
		}
	}()
	return p
}

// ask counts one request of what, failed if it fails through all n; one
// cut short by stop (ctx canceled) is not counted either way.
func (p *poller) ask(ctx context.Context, what string, try func(int) error, n int) {
	var errs []string
	for i := range n {
		err := try(i)
		if err == nil {
			p.mu.Lock()
			p.asked[what]++
			p.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		errs = append(errs, err.Error())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked[what]++
	p.failed[what] = append(p.failed[what], time.Now().Format("15:04:05.000")+": "+strings.Join(errs, "; "))
}

func (p *poller) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	p.done.Wait()
	for _, what := range []string{"api", "web"} {
		t.Logf("%s: %d requests, %d failed on all three", what, p.asked[what], len(p.failed[what]))
		if p.asked[what] == 0 {
			t.Errorf("%s: no request was made", what)
		}
		for _, f := range p.failed[what] {
			t.Errorf("%s failed: %s", what, f)
		}
	}
}

// waitNodes waits for the three Nodes Ready with kubelet version.
func waitNodes(ctx context.Context, t *testing.T, cs kubernetes.Interface, what, version string, nodes []sandbox.Node) {
	t.Helper()
	testwait.ForContext(ctx, t, 5*time.Minute, what, func(ctx context.Context) error {
		for _, sn := range nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, sn.Hostname, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range n.Status.Conditions {
				ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}
			if !ready || n.Status.NodeInfo.KubeletVersion != version {
				return fmt.Errorf("Node %s: Ready %v, kubelet %s", n.Name, ready, n.Status.NodeInfo.KubeletVersion)
			}
		}
		return nil
	})
}

// etcdMembers lists the etcd members' IDs, from the etcd container of the
// node (RKE's and rigger's both set etcdctl's variables).
func etcdMembers(ctx context.Context, t *testing.T, cli *client.Client) []string {
	t.Helper()
	out := execIn(ctx, t, cli, "etcd", "etcdctl", "member", "list")
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		id, _, _ := strings.Cut(line, ",")
		ids = append(ids, strings.TrimSpace(id))
	}
	slices.Sort(ids)
	return ids
}

// etcdGet is the raw value of key in etcd.
func etcdGet(ctx context.Context, t *testing.T, cli *client.Client, key string) string {
	t.Helper()
	return execIn(ctx, t, cli, "etcd", "etcdctl", "get", key, "--print-value-only")
}

// nodeFile is a file of the node's /etc/kubernetes, read through its
// directory on the host.
func nodeFile(t *testing.T, n sandbox.Node, path string) string {
	t.Helper()
	rel, ok := strings.CutPrefix(path, "/etc/kubernetes/")
	if !ok {
		t.Fatalf("nodeFile %s: not in /etc/kubernetes", path)
	}
	return readFile(t, filepath.Join(n.Dir, "etc-kubernetes", rel))
}

func execIn(ctx context.Context, t *testing.T, cli *client.Client, ctr string, cmd ...string) string {
	t.Helper()
	id, err := cli.ContainerExecCreate(ctx, ctr, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, ctr, err)
	}
	att, err := cli.ContainerExecAttach(ctx, id.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var stdout, stderr strings.Builder
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatal(err)
	}
	insp, err := cli.ContainerExecInspect(ctx, id.ID)
	if err != nil {
		t.Fatal(err)
	}
	if insp.ExitCode != 0 {
		t.Fatalf("exec %v in %s: exit %d: %s", cmd, ctr, insp.ExitCode, stderr.String())
	}
	return stdout.String()
}

// rkeEncryptionKey is the name of the first aescbc key of RKE's
// encryption provider configuration: the one the API servers write with.
func rkeEncryptionKey(t *testing.T, config string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)aescbc:.*?- name: (\S+)`).FindStringSubmatch(config)
	if m == nil {
		t.Fatalf("no aescbc key in RKE's encryption configuration:\n%s", config)
	}
	return m[1]
}

// kubeClient is a client of kubeconfig's cluster, at server when set.
func kubeClient(t *testing.T, kubeconfig, server string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags(server, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// run runs a command in dir and returns its output; it fails the test
// unless it exits 0.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	return runCode(t, dir, 0, name, args...)
}

// runCode runs a command in dir, bounded by 20 minutes, and fails the test
// unless it exits with code.
func runCode(t *testing.T, dir string, code int, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	got := 0
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
	if got != code {
		t.Fatalf("%s %v: exit status %d, want %d\n%s", filepath.Base(name), args, got, code, out)
	}
	return string(out)
}
