package incluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// subnet is this package's sandbox (sandboxtest's table). Both clusters
// are on it, one node each: the sandbox keeps its subnets apart (nothing
// is routed between its bridges), as separate sites would be.
const subnet = 44

const (
	namespace = "rigger-system"
	// leaseName is deploy/'s --lease-name.
	leaseName = "rigger-serve"
	// image is the tag the test builds the Dockerfile's image under and
	// the overlay sets: a user's own tag, not the sandbox's rigger/rigger:dev.
	image = "rigger/rigger:incluster"

	managedPath = "clusters/managed/cluster.yml"
	statusPath  = "clusters/managed/status.yml"
	// selfPath is the management cluster's own cluster.yml, which the
	// pods in it reconcile in the last phase.
	selfPath       = "clusters/management/cluster.yml"
	selfStatusPath = "clusters/management/status.yml"
	// repoDir is the bare repository on the git node, under root's home.
	repoDir  = "/root/clusters.git"
	oneFlag  = `conntrack-max-per-core: "0"`
	withFlag = oneFlag + "\n      v: \"4\""
)

// TestServeInClusterSandbox installs rigger serve in a cluster as
// docs/gitops.md's "Installing in a cluster" tells a user to, and checks
// that it works as written:
//   - a management cluster (node1) made by `rigger apply`;
//   - rigger's image built by the Dockerfile on node1's engine;
//   - `kubectl apply -k` of an overlay of deploy/ (repository URL, image,
//     the git and node SSH Secrets with known_hosts; no volume: the state
//     is in Secrets);
//   - the pods follow a bare repository on node2 over SSH (sshd and git, as
//     a real git server has them), reconcile the one-node cluster on node2
//     over SSH and commit status.yml back;
//   - both replicas are ready; the pod holding the cluster's Lease is
//     deleted: the other takes the Lease and applies the next push;
//   - node1's Docker engine is stopped, with every container on it, and
//     started again: the pods come back and apply the push made meanwhile;
//   - no two pods reconcile at once, by their logs;
//   - the management cluster's state imported into the Secrets and its
//     own cluster.yml pushed: the pods in it reconcile the cluster they run
//     in, a no-op first, then a change that restarts every control-plane
//     component on its one node, drained around it with the pod that
//     applies it left running;
//   - the managed node declared with transport: agent, its agent started
//     with the line `rigger agent command --state-backend kubernetes`
//     prints and dialling the replica that does not hold the cluster: the
//     holder reconciles it through that replica (the peer relay).
//
// deploy/ as it is passes `kubectl apply -k deploy/ --dry-run=server`, and
// no apply prints a Pod Security warning.
func TestServeInClusterSandbox(t *testing.T) {
	start := time.Now()
	phase := func(name string) {
		t.Logf("==> %s (%s since start)", name, time.Since(start).Round(time.Second))
	}
	bin := sandboxtest.BuildRigger(t)
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 2, Images: true, RiggerBinary: bin})
	mgmtNode, gitNode := sb.Nodes[0], sb.Nodes[1]
	managedYML := managedCluster(t, sb)
	in := install(t, sb, bin, phase, map[string]string{managedPath: managedYML})
	dir, kubectl, kubeconfig, cs, repo := in.dir, in.kubectl, in.kubeconfig, in.cs, in.repo
	first := repo.head(t)

	phase("the first push converges the managed cluster, status committed by a pod")
	repo.waitStatus(t, statusPath, "the managed cluster converged at the first push", 12*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == first && ready(f) == "True"
	})
	leader, standby := settled(t, cs)
	checkPods(t, cs, leader, standby)
	if st, err := cs.CoreV1().Secrets(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: secretstate.ClusterLabel + "=managed"}); err != nil || len(st.Items) == 0 {
		t.Errorf("the managed cluster's state is not in Secrets of %s (%v)", namespace, err)
	}
	if msg := repo.git(t, "log", "-1", "--format=%an <%ae>%n%B", "main", "--", statusPath); !strings.Contains(msg, "rigger <rigger@example.com>") ||
		!strings.Contains(msg, gitops.TrailerKey+": "+managedPath) {
		t.Errorf("the status commit is not deploy/'s author's, with rigger's trailer:\n%s", msg)
	}

	phase("the pod holding the cluster deleted: the other replica takes over and applies the next push")
	// The deleted pod's log, to its end: it is gone with the pod.
	var deletedLog strings.Builder
	follow := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "logs", "-f", leader)
	follow.Stdout = &deletedLog
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followed := make(chan error, 1)
	go func() { followed <- follow.Wait() }()
	run(t, dir, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "delete", "pod", leader, "--wait=false")
	testwait.Recv(t, followed, 2*time.Minute, "the end of the deleted pod's log", func(error) bool { return true })
	logs := []serveLog{{who: leader, text: deletedLog.String()}}
	if !strings.Contains(deletedLog.String(), `"msg":"rigger serve stopped"`) {
		t.Errorf("the deleted pod %s did not stop cleanly; its log:\n%s", leader, deletedLog.String())
	}
	repo.pull(t)
	repo.commit(t, "kube-proxy: log more", map[string]string{managedPath: strings.Replace(managedYML, oneFlag, withFlag, 1)})
	repo.push(t)
	change := repo.head(t)
	repo.waitStatus(t, statusPath, "the change applied by the new leader", 8*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == change && ready(f) == "True"
	})
	proxy, err := sandboxtest.DockerClient(t, gitNode).ContainerInspect(context.Background(), "kube-proxy")
	if err != nil || !strings.Contains(strings.Join(proxy.Args, " "), "--v=4") {
		t.Errorf("the change did not reach the managed node's kube-proxy (%v): %v", err, proxy.Args)
	}
	// A live replica holds the cluster, and one of them applied the
	// change: the other one, or the pod the Deployment made for the
	// deleted one. Not necessarily the holder: a replica that took the
	// cluster while the one it is assigned to was away hands it back once
	// its reconcile is over.
	testwait.For(t, 2*time.Minute, "a new holder of the cluster, the Service on both replicas", func() error {
		l, other, err := roles(cs)
		if err != nil {
			return err
		}
		if l == leader {
			return fmt.Errorf("the deleted pod %s holds the cluster", l)
		}
		return checkService(cs, l, other)
	})
	// The pods' logs now: those of their runs that the engine's stop ends
	// may be gone afterwards.
	live := podLogs(t, dir, kubectl, kubeconfig, cs, false)
	checkApplied(t, live, change)
	logs = append(logs, live...)

	phase("the management node's engine stopped with every container on it, then started: the pods come back and apply the next push")
	if err := sb.StopService(context.Background(), mgmtNode.Name, sandbox.ServiceDocker); err != nil {
		t.Fatal(err)
	}
	repo.pull(t)
	repo.commit(t, "kube-proxy: log as before", map[string]string{managedPath: managedYML})
	repo.push(t)
	back := repo.head(t)
	if err := sb.StartService(context.Background(), mgmtNode.Name, sandbox.ServiceDocker); err != nil {
		t.Fatal(err)
	}
	repo.waitStatus(t, statusPath, "the push made while the management node was down, applied", 8*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == back && ready(f) == "True"
	})
	settled(t, cs)
	// The pods' runs since the engine came back: one of them applied the
	// push (the holder now, or the replica that handed it the cluster).
	live = podLogs(t, dir, kubectl, kubeconfig, cs, false)
	checkApplied(t, live, back)
	logs = append(logs, live...)
	logs = append(logs, podLogs(t, dir, kubectl, kubeconfig, cs, true)...)
	checkNoOverlap(t, logs, managedPath, first, change, back)

	phase("the management cluster's own cluster.yml: the pods reconcile the cluster they run in")
	selfYML := handOver(t, in)
	change, by := applySelf(t, in, "management: every control-plane component logs more, the node drained around its changes",
		restartControlPlane(t, selfYML), 10*time.Minute, true)
	docker := sandboxtest.DockerClient(t, mgmtNode)
	for component, flag := range map[string]string{"etcd": "--log-level=warn", "kube-apiserver": "--v=3",
		"kube-controller-manager": "--v=3", "kube-scheduler": "--v=3", "kubelet": "--v=3"} {
		c, err := docker.ContainerInspect(context.Background(), component)
		if err != nil || !slices.Contains(c.Args, flag) {
			t.Errorf("%s on %s does not run with %s after %s (applied by %s): %v %v", component, mgmtNode.Hostname, flag, change[:12], by, err, c.Args)
		}
	}

	phase("the managed node through its agent, which reaches the replica that does not hold its cluster: the holder's streams go through that one")
	agentNode(t, in, managedYML)
	phase("done")
}

// agentNode declares the managed cluster's node with transport: agent and
// runs on it the agent `rigger agent command --state-backend kubernetes`
// prints, dialling a Service of the replica that does not hold the
// cluster: the holder reconciles the cluster through that replica (the
// peer relay), and its status says which replica holds the tunnel.
func agentNode(t *testing.T, in *installation, managedYML string) {
	t.Helper()
	ctx := context.Background()
	leader, other := assigned(t, in.cs)
	run(t, in.dir, in.kubectl, "--kubeconfig", in.kubeconfig, "-n", namespace, "label", "pod", other, "rigger.test/agent=here")
	svc, err := in.cs.CoreV1().Services(namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-via-other"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app.kubernetes.io/name": "rigger", "rigger.test/agent": "here"},
			Ports:    []corev1.ServicePort{{Port: 9443, TargetPort: intstr.FromString("agent")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgmt, node := in.sb.Nodes[0], in.sb.Nodes[1]
	yml := strings.Replace(managedYML, "{address: "+node.Address+",", "{address: "+node.Address+", transport: agent,", 1)
	if !strings.Contains(yml, "transport: agent") {
		t.Fatalf("node %s is not declared with transport: agent:\n%s", node.Address, yml)
	}
	file := filepath.Join(in.dir, "managed-agent.yml")
	writeFile(t, file, yml, 0o600)
	// As its operator would: the node declared first, then its agent
	// started (until it is, the reconcile finds the node unreachable).
	in.repo.pull(t)
	in.repo.commit(t, "managed: its node through its agent", map[string]string{managedPath: yml})
	in.repo.push(t)
	rev := in.repo.head(t)
	line := run(t, in.dir, in.bin, "agent", "command", "-f", file, "--node", node.Address,
		"--server", fmt.Sprintf("https://%s:%d", mgmt.Address, svc.Spec.Ports[0].NodePort), "--image", sandbox.RiggerImage,
		"--state-backend", "kubernetes", "--kubeconfig", in.kubeconfig, "--namespace", namespace)
	sandboxtest.StartAgent(ctx, t, node, strings.TrimSpace(line))
	docker := sandboxtest.DockerClient(t, node)
	st := in.repo.waitStatus(t, statusPath, "the managed cluster reconciled through its agent", 5*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == rev && ready(f) == "True"
	})
	if len(st.AgentTunnels) != 1 || !st.AgentTunnels[0].Connected || st.AgentTunnels[0].Node != node.Address ||
		!strings.Contains(st.AgentTunnels[0].Replica, other) || !strings.Contains(st.Replica, leader) {
		t.Errorf("status.yml by %q has agentTunnels %+v; want it by %s, node %s connected through replica %s",
			st.Replica, st.AgentTunnels, leader, node.Address, other)
	}
	if l := sandboxtest.AgentLogs(ctx, docker, time.Time{}); !strings.Contains(l, "first request from the server received through the tunnel") {
		t.Errorf("the agent's log does not say the server used the tunnel:\n%s", l)
	}
}

// assigned waits until the managed cluster's Lease is held by the replica
// it is assigned to (replicas.Assign over the live replicas' ids, from
// their membership Leases), which holds it from then on while both run,
// and names that pod and the other.
func assigned(t *testing.T, cs kubernetes.Interface) (leader, other string) {
	t.Helper()
	testwait.For(t, 2*time.Minute, "the managed cluster held by the replica it is assigned to", func() error {
		var err error
		if leader, other, err = roles(cs); err != nil {
			return err
		}
		leases, err := cs.CoordinationV1().Leases(namespace).List(context.Background(),
			metav1.ListOptions{LabelSelector: replicas.LabelReplica + "=" + leaseName})
		if err != nil {
			return err
		}
		var ids []string
		for _, l := range leases.Items {
			if id := l.Spec.HolderIdentity; id != nil && *id != "" && (strings.Contains(*id, leader) || strings.Contains(*id, other)) {
				ids = append(ids, *id)
			}
		}
		if len(ids) != 2 {
			return fmt.Errorf("membership Leases of %v, want the two pods'", ids)
		}
		if to := replicas.Assign(ids, []string{managedPath, selfPath})[managedPath]; !strings.Contains(to, leader) {
			return fmt.Errorf("%s is assigned to %s, held by %s", managedPath, to, leader)
		}
		return nil
	})
	return leader, other
}

// handOver hands the management cluster (node1, made by rigger apply) to
// the pods that run in it: its state imported into the Secrets, its
// cluster.yml pushed as it is in git (asInGit), which they apply without a
// change. It returns that cluster.yml.
func handOver(t *testing.T, in *installation) string {
	t.Helper()
	out := run(t, in.dir, in.bin, "state", "import", "--cluster", "management", "--state-dir", in.mgmtState,
		"--kubeconfig", in.kubeconfig, "--namespace", namespace)
	t.Logf("rigger state import:\n%s", out)
	selfYML := asInGit(t, in.mgmtYML, "management")
	in.repo.pull(t)
	in.repo.commit(t, "the management cluster, reconciled from within", map[string]string{selfPath: selfYML})
	in.repo.push(t)
	adopted := in.repo.head(t)
	in.repo.waitStatus(t, selfStatusPath, "the management cluster's cluster.yml applied from within", 6*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == adopted && ready(f) == "True"
	})
	live := podLogs(t, in.dir, in.kubectl, in.kubeconfig, in.cs, false)
	checkApplied(t, live, adopted)
	// The cluster.yml is the one rigger apply applied but for where the
	// SSH key and host keys are: nothing changes.
	for _, l := range live {
		for _, line := range strings.Split(l.text, "\n") {
			if strings.Contains(line, `"msg":"reconcile done"`) && strings.Contains(line, `"revision":"`+adopted[:12]+`"`) && !strings.Contains(line, `"steps":0`) {
				t.Errorf("%s changed the cluster it runs in for the cluster.yml it was made with: %s", l.who, line)
			}
		}
	}
	return selfYML
}

// applySelf pushes yml as the management cluster's cluster.yml (handOver
// first) and waits for the pods in that cluster to apply it: the pod that
// applies it is not restarted, and the node ends uncordoned with both
// replicas ready; no two pods reconcile the cluster at once. With drains,
// the node is drained around its changes, and the pod that applies them
// says it left itself on the node. It returns the commit and the pod that
// applied it.
func applySelf(t *testing.T, in *installation, msg, yml string, timeout time.Duration, drains bool) (change, by string) {
	t.Helper()
	restarts := restartCounts(t, in.cs)
	in.repo.pull(t)
	in.repo.commit(t, msg, map[string]string{selfPath: yml})
	in.repo.push(t)
	change = in.repo.head(t)
	in.repo.waitStatus(t, selfStatusPath, "the change of the cluster the pods run in, applied", timeout, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == change && ready(f) == "True"
	})
	node := in.sb.Nodes[0].Hostname
	testwait.For(t, 2*time.Minute, "two ready replicas, the management node uncordoned", func() error {
		if n, err := in.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
			return fmt.Errorf("Node %s: %v, unschedulable %v", node, err, n != nil && n.Spec.Unschedulable)
		}
		_, err := readyPods(in.cs)
		return err
	})
	live := podLogs(t, in.dir, in.kubectl, in.kubeconfig, in.cs, false)
	// The pod that carried the change out: a replica the cluster is
	// handed to afterwards reconciles the same revision again, with
	// nothing to do.
	for _, l := range live {
		if appliedSteps(l.text, change) > 0 {
			by = l.who
		}
	}
	if by == "" {
		checkApplied(t, live, change) // fails, with the logs
		return change, ""
	}
	for _, l := range live {
		if l.who != by {
			continue
		}
		t.Logf("%s applied %s:\n%s", by, change[:12], progress(l.text, change))
		if drains && !strings.Contains(l.text, "rigger's own pod "+namespace+"/"+by+" left on it") {
			t.Errorf("%s applied %s without saying it left itself on the node it drained; its log:\n%s", by, change[:12], l.text)
		}
	}
	if now := restartCounts(t, in.cs); now[by] != restarts[by] {
		t.Errorf("%s restarted while it applied %s (%d restarts before, %d after)", by, change[:12], restarts[by], now[by])
	}
	checkNoOverlap(t, live, selfPath, change)
	return change, by
}

// progress is the time and message of each line of log about revision.
func progress(log, revision string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Time     time.Time `json:"time"`
			Msg      string    `json:"msg"`
			Revision string    `json:"revision"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Revision == revision[:12] {
			out = append(out, e.Time.Format("15:04:05.000")+" "+e.Msg)
		}
	}
	return strings.Join(out, "\n")
}

// restartControlPlane is yml with a flag more for each control-plane
// component and the kubelet, and the nodes drained around their changes.
func restartControlPlane(t *testing.T, yml string) string {
	t.Helper()
	for old, new := range map[string]string{
		"services:\n": "upgrade_strategy:\n  drain: true\nservices:\n" +
			"  kube-api:\n    extra_args:\n      v: \"3\"\n" +
			"  kube-controller:\n    extra_args:\n      v: \"3\"\n" +
			"  scheduler:\n    extra_args:\n      v: \"3\"\n",
		"  etcd:\n":                     "  etcd:\n    extra_args:\n      log-level: warn\n",
		"  kubelet:\n    extra_args:\n": "  kubelet:\n    extra_args:\n      v: \"3\"\n",
	} {
		if strings.Count(yml, old) != 1 {
			t.Fatalf("the example cluster.yml changed: %q is not there once", old)
		}
		yml = strings.Replace(yml, old, new, 1)
	}
	return yml
}

// restartCounts are the restarts of each of deploy/'s pods' container.
func restartCounts(t *testing.T, cs kubernetes.Interface) map[string]int32 {
	t.Helper()
	pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=rigger"})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int32{}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			counts[p.Name] += c.RestartCount
		}
	}
	return counts
}

// installation is rigger serve installed in a management cluster by
// install.
type installation struct {
	sb                    *sandbox.Sandbox
	dir, bin, kubectl     string
	kubeconfig, mgmtState string
	// mgmtYML is the management cluster's cluster.yml as rigger apply
	// applied it.
	mgmtYML string
	cs      kubernetes.Interface
	repo    *repo
}

// install makes the management cluster on node1 (one node of every role)
// by rigger apply, builds rigger's image by the Dockerfile on it, makes
// the repository on node2 with files, and installs serve as
// docs/gitops.md tells a user to (kubectl apply -k of an overlay of
// deploy/): the pods come up and follow the repository. deploy/ as it is
// passes a server-side dry run, and no apply warns (Pod Security).
func install(t *testing.T, sb *sandbox.Sandbox, bin string, phase func(string), files map[string]string) *installation {
	t.Helper()
	mgmtNode, gitNode := sb.Nodes[0], sb.Nodes[1]
	in := &installation{sb: sb, bin: bin, kubectl: sandboxtest.BuildKubectl(t), dir: t.TempDir()}
	dir, kubectl := in.dir, in.kubectl
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}

	phase("the management cluster, by rigger apply")
	in.mgmtYML = sandboxtest.NetworkOnly(strings.Replace(
		sandboxtest.ClusterYML(t, sb, map[int][]string{0: all}), "cluster_name: sandbox", "cluster_name: management", 1))
	mgmtFile := filepath.Join(dir, "management.yml")
	writeFile(t, mgmtFile, in.mgmtYML, 0o600)
	in.mgmtState = filepath.Join(dir, "state")
	run(t, dir, bin, "apply", "--yes", "-f", mgmtFile, "--state-dir", in.mgmtState)
	in.kubeconfig = filepath.Join(dir, "kubeconfig")
	run(t, dir, bin, "kubeconfig", "-f", mgmtFile, "--state-dir", in.mgmtState, "--out", in.kubeconfig)
	in.cs = kubeClient(t, in.kubeconfig)
	kubeconfig := in.kubeconfig

	phase("rigger's image, by the Dockerfile, on the management node")
	buildImage(t, bin, mgmtNode)

	phase("the git repository on " + gitNode.Hostname)
	in.repo = newRepo(t, gitNode)
	in.repo.commit(t, "the clusters", files)
	in.repo.push(t)

	phase("kubectl apply -k of an overlay of deploy/")
	overlay := writeOverlay(t, sb, gitNode)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", runQuiet(dir, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "get", "pods,events", "-o", "wide"))
			t.Logf("logs:\n%s", runQuiet(dir, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "logs", "-l", "app.kubernetes.io/name=rigger", "--tail", "60", "--prefix"))
		}
	})
	out := run(t, dir, kubectl, "--kubeconfig", kubeconfig, "apply", "-k", overlay)
	t.Logf("kubectl apply -k:\n%s", out)
	// The namespace enforces the restricted Pod Security Standard and
	// asks for its warnings: a pod template that does not meet it warns,
	// and its pods are refused.
	if strings.Contains(out, "Warning") {
		t.Fatalf("kubectl apply -k warned:\n%s", out)
	}
	// deploy/ as it is, the command the docs show, checked by the API
	// server (validation, admission) without a change.
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if out := run(t, root, kubectl, "--kubeconfig", kubeconfig, "apply", "-k", "deploy/", "--dry-run=server"); strings.Contains(out, "Warning") {
		t.Fatalf("kubectl apply -k deploy/ --dry-run=server warned:\n%s", out)
	}
	return in
}

// serveLog is the JSON log of one run of serve in a pod.
type serveLog struct{ who, text string }

// podLogs are the logs of every pod's serve, with previous its last run
// before this one (kubectl logs --previous), where its container is still
// there: a run that ended with its engine's stop may have been removed
// since (the kubelet's container garbage collection), and is logged as
// gone.
func podLogs(t *testing.T, dir, kubectl, kubeconfig string, cs kubernetes.Interface, previous bool) []serveLog {
	t.Helper()
	pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=rigger"})
	if err != nil {
		t.Fatal(err)
	}
	var logs []serveLog
	for _, p := range pods.Items {
		if previous && p.Status.ContainerStatuses[0].RestartCount > 0 {
			cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "logs", "--previous", p.Name)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			switch {
			case err == nil:
				logs = append(logs, serveLog{who: p.Name, text: string(out)})
			case strings.Contains(string(out), "previous terminated container") && strings.Contains(string(out), "not found"):
				t.Logf("the previous run of %s is gone: %s", p.Name, strings.TrimSpace(string(out)))
			default:
				t.Fatalf("kubectl logs --previous %s: %v\n%s", p.Name, err, out)
			}
		}
		logs = append(logs, serveLog{who: p.Name, text: run(t, dir, kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "logs", p.Name)})
	}
	return logs
}

// checkNoOverlap fails when two pods reconciled the cluster.yml at path at
// once, by their logs ("reconcile starts" to "reconcile done"; a run that
// ended in a reconcile, to its last line; logs may be given more than
// once), or when the logs lack the reconcile of one of revisions; it logs
// who led and reconciled when.
func checkNoOverlap(t *testing.T, logs []serveLog, path string, revisions ...string) {
	t.Helper()
	type span struct {
		who        string
		start, end time.Time
	}
	var spans []span
	var story []string
	seen := map[string]bool{}
	done := map[string]bool{}
	for _, l := range logs {
		var open *span
		var last time.Time
		for _, line := range strings.Split(l.text, "\n") {
			var e struct {
				Time     time.Time `json:"time"`
				Msg      string    `json:"msg"`
				Revision string    `json:"revision"`
				Path     string    `json:"path"`
			}
			if json.Unmarshal([]byte(line), &e) != nil || e.Path != "" && e.Path != path {
				continue
			}
			last = e.Time
			key := l.who + " " + e.Time.Format(time.RFC3339Nano) + " " + e.Msg
			if seen[key] {
				continue
			}
			seen[key] = true
			if e.Msg == "reconcile done" {
				done[e.Revision] = true
			}
			switch e.Msg {
			case "Successfully acquired lease", "leading: running", "stopped leading", "rigger serve stopped", "reconcile starts", "reconcile done":
				story = append(story, fmt.Sprintf("%s %s: %s %s", e.Time.Format("15:04:05.000"), l.who, e.Msg, e.Revision))
			}
			switch e.Msg {
			case "reconcile starts":
				open = &span{who: l.who, start: e.Time}
			case "reconcile done":
				if open != nil {
					open.end = e.Time
					spans = append(spans, *open)
					open = nil
				}
			}
		}
		if open != nil {
			open.end = last
			spans = append(spans, *open)
		}
	}
	slices.Sort(story)
	t.Logf("the replicas' leases and reconciles:\n%s", strings.Join(story, "\n"))
	for _, r := range revisions {
		if !done[r[:12]] {
			t.Errorf("no reconcile of %s in the pods' logs: they are not all there, and prove nothing", r[:12])
		}
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.who != b.who && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("%s (%s–%s) and %s (%s–%s) held the cluster at once",
					a.who, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.who, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
}

// applied says whether a serve log shows a reconcile of revision.
func applied(log, revision string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"msg":"reconcile done"`) && strings.Contains(line, `"revision":"`+revision[:12]+`"`) {
			return true
		}
	}
	return false
}

// appliedSteps is the most steps a reconcile of revision in log carried
// out (0: none, or none done).
func appliedSteps(log, revision string) int {
	most := 0
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Msg      string `json:"msg"`
			Revision string `json:"revision"`
			Steps    int    `json:"steps"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "reconcile done" && e.Revision == revision[:12] {
			most = max(most, e.Steps)
		}
	}
	return most
}

// checkApplied fails unless one of logs shows a reconcile of revision,
// and logs who applied it.
func checkApplied(t *testing.T, logs []serveLog, revision string) {
	t.Helper()
	var who []string
	for _, l := range logs {
		if applied(l.text, revision) {
			who = append(who, l.who)
		}
	}
	if len(who) == 0 {
		var all []string
		for _, l := range logs {
			all = append(all, fmt.Sprintf("--- %s:\n%s", l.who, l.text))
		}
		t.Errorf("no live pod applied %s; their logs:\n%s", revision[:12], strings.Join(all, "\n"))
		return
	}
	t.Logf("%s applied by %s", revision[:12], strings.Join(who, ", "))
}

// settled waits for deploy/'s two pods to settle, both Running and
// Ready, one holding the managed cluster's Lease; it returns the holder
// and the other.
func settled(t *testing.T, cs kubernetes.Interface) (leader, other string) {
	t.Helper()
	testwait.For(t, 2*time.Minute, "two ready replicas, one holding the cluster", func() error {
		var err error
		leader, other, err = roles(cs)
		return err
	})
	return leader, other
}

// roles names the pod that holds the managed cluster's Lease and the
// other, and fails when they are not exactly deploy/'s two Running and
// Ready replicas.
func roles(cs kubernetes.Interface) (leader, other string, err error) {
	ctx := context.Background()
	leases, err := cs.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: replicas.LabelCluster + "=" + leaseName})
	if err != nil {
		return "", "", fmt.Errorf("the Leases of deploy/'s clusters: %w", err)
	}
	holder := ""
	for _, l := range leases.Items {
		if l.Annotations[replicas.AnnotationPath] == managedPath && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
	}
	if holder == "" {
		return "", "", fmt.Errorf("no holder of %s's Lease among %d cluster Leases", managedPath, len(leases.Items))
	}
	live, err := readyPods(cs)
	if err != nil {
		return "", "", err
	}
	for _, p := range live {
		if strings.Contains(holder, p) {
			leader = p
		} else {
			other = p
		}
	}
	if leader == "" || other == "" {
		return "", "", fmt.Errorf("the cluster's Lease is held by %q, not by one of the pods", holder)
	}
	return leader, other, nil
}

// readyPods names deploy/'s pods, and fails unless they are its two
// replicas, Running and Ready.
func readyPods(cs kubernetes.Interface) ([]string, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=rigger"})
	if err != nil {
		return nil, err
	}
	var live []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		isReady := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				isReady = c.Status == corev1.ConditionTrue
			}
		}
		if !isReady {
			return nil, fmt.Errorf("pod %s is not Ready", p.Name)
		}
		live = append(live, p.Name)
	}
	if len(live) != 2 {
		return nil, fmt.Errorf("%d pods, want deploy/'s 2 replicas", len(live))
	}
	return live, nil
}

// checkPods checks what deploy/ asks of the pods as they run: no restart
// (the liveness probe and the memory limit let serve be), and the Service
// sends to both replicas (the readiness probe).
func checkPods(t *testing.T, cs kubernetes.Interface, pods ...string) {
	t.Helper()
	for _, name := range pods {
		p, err := cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 {
				t.Errorf("pod %s: container %s restarted %d times (last: %+v)", name, c.Name, c.RestartCount, c.LastTerminationState)
			}
		}
	}
	if err := checkService(cs, pods...); err != nil {
		t.Error(err)
	}
}

// checkService says whether the Service rigger sends to exactly pods.
func checkService(cs kubernetes.Interface, pods ...string) error {
	slices, err := cs.DiscoveryV1().EndpointSlices(namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=rigger"})
	if err != nil {
		return err
	}
	var ready []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready && e.TargetRef != nil {
				ready = append(ready, e.TargetRef.Name)
			}
		}
	}
	sort.Strings(ready)
	want := append([]string(nil), pods...)
	sort.Strings(want)
	if strings.Join(ready, " ") != strings.Join(want, " ") {
		return fmt.Errorf("the Service rigger sends to %v, want %v", ready, want)
	}
	return nil
}

// managedCluster is the cluster.yml of the cluster on node2 as it is in
// git (asInGit).
func managedCluster(t *testing.T, sb *sandbox.Sandbox) string {
	t.Helper()
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	yml := asInGit(t, sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, sb, map[int][]string{1: all})), "managed")
	if !strings.Contains(yml, oneFlag) {
		t.Fatalf("the example cluster.yml changed: %s is gone", oneFlag)
	}
	return yml
}

// asInGit is a cluster.yml of the sandbox as it is in git, named name:
// the pods find the nodes' key and host keys where deploy/ mounts the
// rigger-node-ssh Secret, through cluster.yml's defaults (~/.ssh/id_rsa,
// ~/.ssh/known_hosts).
func asInGit(t *testing.T, yml, name string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(yml, "\n") {
		switch {
		case strings.HasPrefix(line, "ssh_key_path:"):
			continue
		case strings.Contains(line, "known_hosts_file:"):
			line = "    known_hosts_file: ~/.ssh/known_hosts"
		case strings.HasPrefix(line, "cluster_name: "):
			line = "cluster_name: " + name
		}
		out = append(out, line)
	}
	yml = strings.Join(out, "\n")
	if !strings.Contains(yml, "~/.ssh/known_hosts") {
		t.Fatal("the example cluster.yml changed: known_hosts_file is gone")
	}
	return yml
}

// writeOverlay writes the kustomization a user writes beside deploy/ (as
// docs/gitops.md shows it) and returns its directory.
func writeOverlay(t *testing.T, sb *sandbox.Sandbox, gitNode sandbox.Node) string {
	t.Helper()
	deploy, err := filepath.Abs("../../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(dir, deploy)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(sb.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	knownHosts, err := os.ReadFile(sb.KnownHostsPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "id_rsa"), string(key), 0o600)
	writeFile(t, filepath.Join(dir, "known_hosts"), string(knownHosts), 0o644)
	url := fmt.Sprintf("ssh://root@%s%s", gitNode.Address, repoDir)
	writeFile(t, filepath.Join(dir, "kustomization.yaml"), `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - `+base+`
components:
  - `+filepath.Join(base, "agent")+`
images:
  - name: rigger/rigger
    newTag: incluster
secretGenerator:
  - name: rigger-git
    namespace: `+namespace+`
    files:
      - ssh-privatekey=id_rsa
      - known_hosts
  - name: rigger-node-ssh
    namespace: `+namespace+`
    files:
      - id_rsa
      - known_hosts
patches:
  - target: {kind: Deployment, name: rigger}
    patch: |
      - op: test
        path: /spec/template/spec/containers/0/args/1
        value: --repo=ssh://git@git.example.com/ops/clusters.git
      - op: replace
        path: /spec/template/spec/containers/0/args/1
        value: --repo=`+url+`
      - op: test
        path: /spec/template/spec/containers/0/args/-1
        value: --agent-host=rigger-agent.example.com
      - op: replace
        path: /spec/template/spec/containers/0/args/-1
        value: --agent-host=`+sb.Nodes[0].Address+`
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --interval=10s
`, 0o644)
	return dir
}

// repo is a bare repository on a node, reached by the test through the
// node's directory on the host and by rigger over SSH, and a working clone.
type repo struct{ bare, work string }

func newRepo(t *testing.T, n sandbox.Node) *repo {
	t.Helper()
	bare := n.HostPath(repoDir)
	if bare == "" {
		t.Fatalf("%s is not a directory of node %s's own", repoDir, n.Name)
	}
	r := &repo{bare: bare, work: filepath.Join(t.TempDir(), "work")}
	run(t, "/", "git", "init", "-q", "--bare", "-b", "main", r.bare)
	run(t, "/", "git", "clone", "-q", r.bare, r.work)
	run(t, r.work, "git", "checkout", "-q", "-b", "main")
	return r
}

func (r *repo) git(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, r.bare, "git", args...)
}

func (r *repo) head(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, r.work, "git", "rev-parse", "HEAD"))
}

func (r *repo) commit(t *testing.T, msg string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(r.work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, full, content, 0o644)
		run(t, r.work, "git", "add", p)
	}
	run(t, r.work, "git", "commit", "-q", "-m", msg)
}

// push pushes main; when rigger pushed a status commit first, it rebases
// on it and pushes again, as a person would.
func (r *repo) push(t *testing.T) {
	t.Helper()
	for range 5 {
		cmd := exec.Command("git", "push", "-q", "origin", "main")
		cmd.Dir = r.work
		if cmd.Run() == nil {
			return
		}
		r.pull(t)
	}
	t.Fatal("git push rejected five times")
}

func (r *repo) pull(t *testing.T) {
	t.Helper()
	run(t, r.work, "git", "pull", "-q", "--rebase", "origin", "main")
}

// waitStatus waits until main's status.yml at path satisfies ok.
func (r *repo) waitStatus(t *testing.T, path, what string, timeout time.Duration, ok func(*gitops.StatusFile) bool) *gitops.StatusFile {
	t.Helper()
	var f *gitops.StatusFile
	testwait.For(t, timeout, what, func() error {
		out, err := exec.Command("git", "-C", r.bare, "show", "main:"+path).Output()
		if err != nil {
			return fmt.Errorf("git show main:%s: %v", path, err)
		}
		if f = gitops.ParseStatus(out); f == nil || !ok(f) {
			return fmt.Errorf("status.yml is:\n%s", out)
		}
		return nil
	})
	return f
}

func ready(f *gitops.StatusFile) string {
	return condition(f, gitops.ConditionReady).Status
}

// condition is f's condition of type typ (zero if none).
func condition(f *gitops.StatusFile, typ string) gitops.Condition {
	for _, c := range f.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return gitops.Condition{}
}

// buildImage builds rigger's image with the repository's Dockerfile, as
// `make image` does, on node n's engine: the context is bin/rigger and the
// machine's CA bundle, as make image copies it.
func buildImage(t *testing.T, bin string, n sandbox.Node) {
	t.Helper()
	ctxDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ctxDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, ctxDir, "cp", bin, filepath.Join(ctxDir, "bin", "rigger"))
	run(t, ctxDir, "cp", "/etc/ssl/certs/ca-certificates.crt", filepath.Join(ctxDir, "bin", "ca-certificates.crt"))
	dockerfile, err := filepath.Abs("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "-H", "unix://"+n.DockerSocket, "build", "-q", "-t", image, "-f", dockerfile, ctxDir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build of the Dockerfile: %v\n%s", err, out)
	}
}

func kubeClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.test",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// runQuiet runs a command for the failure log: its output or its error.
func runQuiet(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}
