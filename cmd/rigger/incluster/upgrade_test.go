package incluster_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// upgradeTo is the minor after the sandbox's default Kubernetes (RKE's
// v1.32.13), which make test-long builds.
const upgradeTo = "v1.33.13"

// TestServeUpgradesItsClusterSandbox installs rigger serve in the
// management cluster (node1, RKE's Kubernetes) as TestServeInClusterSandbox
// does, hands that cluster to the pods in it, and pushes its cluster.yml
// one minor up: the pods upgrade the cluster they run in, its API server,
// etcd and kubelet included, the node drained before its kubelet changes
// minor with the pod applying it left on it, and end with status
// committed and the Node's kubelet at the new version (make test-long:
// the sandbox builds the second version). Then the pods change the etcd
// membership of the cluster they run in: a member added on node3 (etcd
// and controlplane), a cluster.yml without their own node refused
// (SelfRemoval), node3's member removed again.
func TestServeUpgradesItsClusterSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	start := time.Now()
	phase := func(name string) {
		t.Logf("==> %s (%s since start)", name, time.Since(start).Round(time.Second))
	}
	bin := sandboxtest.BuildRigger(t)
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 3, Images: true, RiggerBinary: bin,
		KubernetesVersions: []string{upgradeTo}})
	in := install(t, sb, bin, phase, map[string]string{"clusters/README.md": "The clusters serve follows, one directory each.\n"})
	testwait.For(t, 3*time.Minute, "deploy/'s two replicas ready", func() error {
		_, err := readyPods(in.cs)
		return err
	})

	phase("the management cluster handed to the pods in it")
	selfYML := handOver(t, in)

	phase("the pods upgrade the cluster they run in to " + upgradeTo)
	images, err := sandbox.VersionImages(upgradeTo)
	if err != nil {
		t.Fatal(err)
	}
	up := strings.NewReplacer(sandbox.HyperkubeRef(sandbox.KubernetesVersion), images["kubernetes"],
		sandbox.EtcdRef(sandbox.EtcdVersion), images["etcd"]).Replace(selfYML)
	if up == selfYML {
		t.Fatalf("the example cluster.yml changed: no %s or %s to replace", sandbox.HyperkubeRef(sandbox.KubernetesVersion), sandbox.EtcdRef(sandbox.EtcdVersion))
	}
	change, by := applySelf(t, in, "management: Kubernetes "+upgradeTo, up, 15*time.Minute, true)
	n, err := in.cs.CoreV1().Nodes().Get(context.Background(), sb.Nodes[0].Hostname, metav1.GetOptions{})
	if err != nil || n.Status.NodeInfo.KubeletVersion != upgradeTo {
		t.Errorf("Node %s after %s (applied by %s): %v, kubelet %s; want %s", sb.Nodes[0].Hostname, change[:12], by, err, n.Status.NodeInfo.KubeletVersion, upgradeTo)
	}
	docker := sandboxtest.DockerClient(t, sb.Nodes[0])
	for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if c, err := docker.ContainerInspect(context.Background(), component); err != nil || c.Config.Image != images["kubernetes"] {
			t.Errorf("%s on %s: %v, image %v; want %s", component, sb.Nodes[0].Hostname, err, c.Config, images["kubernetes"])
		}
	}

	// The etcd members change under the pods: a member added on node3,
	// the node they run on refused removal, the member removed again (one
	// node of two: rigger.max_removed_nodes allows it).
	node1, node3 := sb.Nodes[0], sb.Nodes[2]
	asUp := func(roles map[int][]string) string {
		yml := asInGit(t, sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, sb, roles)), "management")
		yml = strings.NewReplacer(sandbox.HyperkubeRef(sandbox.KubernetesVersion), images["kubernetes"],
			sandbox.EtcdRef(sandbox.EtcdVersion), images["etcd"]).Replace(yml)
		return allowOneRemoval(t, yml)
	}
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	phase("an etcd member added on " + node3.Hostname + " (etcd and controlplane: the pods stay on " + node1.Hostname + ")")
	applySelf(t, in, "management: a second etcd and control-plane node",
		asUp(map[int][]string{0: all, 2: {spec.RoleEtcd, spec.RoleControlPlane}}), 10*time.Minute, false)
	checkMembers(t, node1, node1.Address, node3.Address)

	phase("the node the pods run on removed from cluster.yml: refused (SelfRemoval), nothing changed")
	in.repo.pull(t)
	in.repo.commit(t, "management: without the node serve runs on", map[string]string{selfPath: asUp(map[int][]string{2: all})})
	in.repo.push(t)
	refused := in.repo.waitStatus(t, selfStatusPath, "the removal of the pods' own node refused", 5*time.Minute, func(f *gitops.StatusFile) bool {
		c := condition(f, gitops.ConditionStalled)
		return c.Status == "True" && c.Reason == string(stall.SelfRemoval)
	})
	// Ready says why, and what to do.
	if m := condition(refused, gitops.ConditionReady).Message; !strings.Contains(m, "node "+node1.Address+" is removed from cluster.yml, and this rigger runs on it") ||
		!strings.Contains(m, "kubectl cordon "+node1.Hostname) {
		t.Errorf("Ready's message of the refusal does not name %s and what to do: %s", node1.Address, m)
	}
	checkMembers(t, node1, node1.Address, node3.Address)

	phase("the etcd member on " + node3.Hostname + " removed")
	applySelf(t, in, "management: back to one node", asUp(map[int][]string{0: all}), 10*time.Minute, false)
	checkMembers(t, node1, node1.Address)
	phase("done")
}

// checkMembers fails unless the etcd members, as etcdctl in node n's etcd
// container lists them, are started voting members with their peer URLs
// on addrs, and no other.
func checkMembers(t *testing.T, n sandbox.Node, addrs ...string) {
	t.Helper()
	testwait.For(t, time.Minute, "etcd's members on "+strings.Join(addrs, ", "), func() error {
		out, err := exec.Command("docker", "-H", "unix://"+n.DockerSocket, "exec", "etcd", "etcdctl", "member", "list").CombinedOutput()
		if err != nil {
			return fmt.Errorf("etcdctl member list on %s: %v\n%s", n.Name, err, out)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, ", ")
			if len(f) < 6 || f[1] != "started" || f[5] != "false" {
				return fmt.Errorf("a member not started or a learner:\n%s", out)
			}
			i := slices.IndexFunc(addrs, func(a string) bool { return strings.Contains(f[3], "://"+a+":") })
			if i < 0 {
				return fmt.Errorf("a member on none of %v:\n%s", addrs, out)
			}
			got = append(got, addrs[i])
		}
		if !sameSet(got, addrs) {
			return fmt.Errorf("etcd's members, want one on each of %v:\n%s", addrs, out)
		}
		return nil
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// allowOneRemoval lets a plan of yml remove one node of two
// (rigger.max_removed_nodes; the default, 30%, allows none of two).
func allowOneRemoval(t *testing.T, yml string) string {
	t.Helper()
	out := strings.Replace(yml, "\nrigger:\n", "\nrigger:\n  max_removed_nodes: \"1\"\n", 1)
	if out == yml {
		t.Fatal("the example cluster.yml changed: no rigger: section")
	}
	return out
}
