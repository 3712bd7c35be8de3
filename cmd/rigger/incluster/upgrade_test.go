package incluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
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
// the sandbox builds the second version).
func TestServeUpgradesItsClusterSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	start := time.Now()
	phase := func(name string) {
		t.Logf("==> %s (%s since start)", name, time.Since(start).Round(time.Second))
	}
	bin := sandboxtest.BuildRigger(t)
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: subnet, Nodes: 2, Images: true, RiggerBinary: bin,
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
	change, by := applySelf(t, in, "management: Kubernetes "+upgradeTo, up, 15*time.Minute)
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
	phase("done")
}
