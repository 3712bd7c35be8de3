package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/docker/docker/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/storedapi"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// newestSubnet is TestNewestMinorSandbox's sandbox subnet.
const newestSubnet = 53

// newestStep is the upgrade to the newest minor version the sandbox builds
// (sandbox.KubeReleases), from the one before it.
func newestStep() (from, to string) {
	r := sandbox.KubeReleases()
	return r[len(r)-2].Kubernetes, r[len(r)-1].Kubernetes
}

// TestNewestMinorSandbox is the newest minor version's step, which CI runs
// besides RKE's (TestUpgradeSandbox) while make test-road runs the whole
// road: a cluster converged at the minor before the newest (three nodes
// with every role, the third etcd member added as a learner, and a
// worker) is upgraded to the newest under the same load and with the same
// checks as each step of the road: the version skew policy's order, the
// longest API gap, the failed requests and each node's time cordoned
// bounded, every etcd member kept, exec, port-forward and logs -f through
// cri-dockerd, and the pause image of system_images. Before the upgrade,
// the IPAddress of the workload's Service is stored at
// networking.k8s.io/v1beta1, as 1.33 stores it, which 1.37 no longer
// serves: rigger must write it again first (plan.WriteAgain).
func TestNewestMinorSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	from, to := newestStep()
	s := sandboxtest.Start(t, sandbox.Options{Subnet: newestSubnet, Nodes: 4, Images: true, KubernetesVersions: []string{from, to}})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	a := rt.New(t)
	at, c, cs := upgradeCluster(ctx, t, a, s, from)
	etcd := sandboxtest.DockerClient(t, s.Nodes[0])
	key := storeIPAddressAtBeta(ctx, t, cs, etcd)
	p := upgradeUnderLoad(ctx, t, a, s, c, at(to), from, to, cs)
	if !slices.ContainsFunc(p.WriteAgain, func(w plan.WriteAgain) bool {
		return w.Resource == ipAddresses && w.At == "networking.k8s.io/v1" && w.Objects > 0
	}) {
		t.Errorf("the plan wrote no IPAddress again through networking.k8s.io/v1: %+v", p.WriteAgain)
	}
	value := bytes.TrimSuffix(rt.Etcdctl(ctx, t, etcd, "get", key, "--print-value-only"), []byte("\n"))
	if v, _, err := storedapi.StoredType(value); err != nil || v != "networking.k8s.io/v1" {
		t.Errorf("%s after the upgrade: stored at %q (%v), want networking.k8s.io/v1", key, v, err)
	}
}

// ipAddresses is the resource of IPAddresses, as GroupResource names it.
const ipAddresses = "ipaddresses.networking.k8s.io"

// storeIPAddressAtBeta puts the IPAddress of the workload's Service back
// into etcd (through the etcd container of etcd's node) as JSON at
// networking.k8s.io/v1beta1, as 1.33's API servers store every Service's
// IPAddress (1.33's storage version), and returns its key: 1.37 no longer
// serves v1beta1, so the upgrade to it must write the object again first.
func storeIPAddressAtBeta(ctx context.Context, t *testing.T, cs kubernetes.Interface, etcd *client.Client) string {
	t.Helper()
	svc, err := cs.CoreV1().Services("upgrade-load").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := cs.NetworkingV1().IPAddresses().Get(ctx, svc.Spec.ClusterIP, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip.APIVersion, ip.Kind = "networking.k8s.io/v1beta1", "IPAddress"
	raw, err := json.Marshal(ip)
	if err != nil {
		t.Fatal(err)
	}
	key := "/registry/ipaddresses/" + ip.Name
	rt.Etcdctl(ctx, t, etcd, "put", key, string(raw))
	value := bytes.TrimSuffix(rt.Etcdctl(ctx, t, etcd, "get", key, "--print-value-only"), []byte("\n"))
	if v, _, err := storedapi.StoredType(value); err != nil || v != "networking.k8s.io/v1beta1" {
		t.Fatalf("%s: stored at %q (%v), want networking.k8s.io/v1beta1", key, v, err)
	}
	return key
}
