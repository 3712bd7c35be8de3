package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/reconcile/storedapi"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
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
// cri-dockerd, and the pause image of system_images. The cluster starts on
// etcd 3.5 and moves to 3.6 just before (its third node partitioned
// midway), so that its etcd members' logs hold what 3.5 wrote when they
// move to 3.7. Before the upgrade,
// the IPAddress of the workload's Service is stored at
// networking.k8s.io/v1beta1, as 1.33 stores it, which 1.37 no longer
// serves: rigger must write it again first (plan.WriteAgain).
func TestNewestMinorSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	from, to := newestStep()
	etcd35 := etcd35Release(t)
	s := sandboxtest.Start(t, sandbox.Options{Subnet: newestSubnet, Nodes: 4, Images: true, KubernetesVersions: []string{etcd35.Kubernetes, from, to}})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	a := rt.New(t)
	// The cluster starts on etcd 3.5 and moves to 3.6 just before the
	// upgrade, so that its members' logs still hold the entries 3.5
	// wrote, which 3.7 cannot apply: rigger must have every member save a
	// snapshot of its log first (plan.SnapshotEtcdLogs).
	at, c, cs := upgradeCluster(ctx, t, a, s, from, func(c *spec.Cluster) {
		c.SystemImages.Etcd = sandbox.EtcdRef(etcd35.Etcd)
		c.Services.Etcd.Image = c.SystemImages.Etcd
	})
	c = at(from)
	etcd36Under(ctx, t, a, s, c)
	etcd := sandboxtest.DockerClient(t, s.Nodes[0])
	key := storeIPAddressAtBeta(ctx, t, cs, etcd)
	p := upgradeUnderLoad(ctx, t, a, s, c, at(to), from, to, cs)
	if !slices.ContainsFunc(p.WriteAgain, func(w plan.WriteAgain) bool {
		return w.Resource == ipAddresses && w.At == "networking.k8s.io/v1" && w.Objects > 0
	}) {
		t.Errorf("the plan wrote no IPAddress again through networking.k8s.io/v1: %+v", p.WriteAgain)
	}
	if sl := p.SnapshotEtcdLogs; sl == nil || sl.From != "3.6" || sl.To != "3.7" || len(sl.Nodes) != 3 {
		t.Errorf("the upgrade to %s had its etcd members save no snapshot of their logs first: %+v", to, sl)
	}
	value := bytes.TrimSuffix(rt.Etcdctl(ctx, t, etcd, "get", key, "--print-value-only"), []byte("\n"))
	if v, _, err := storedapi.StoredType(value); err != nil || v != "networking.k8s.io/v1" {
		t.Errorf("%s after the upgrade: stored at %q (%v), want networking.k8s.io/v1", key, v, err)
	}
}

// etcd36Under moves the etcd members of c's cluster from 3.5 to 3.6 (c),
// with the third node partitioned once the second node's member runs
// 3.6: the apply stops naming it, and the apply after the partition heals
// moves its member too.
func etcd36Under(ctx context.Context, t *testing.T, a *rt.Applier, s *sandbox.Sandbox, c *spec.Cluster) {
	t.Helper()
	third := s.Nodes[2]
	var (
		partition sync.Once
		heal      func()
	)
	a.Watch = func(node, msg string) {
		if node == s.Nodes[1].Address && strings.HasPrefix(msg, "etcd healthy") {
			partition.Do(func() { heal = sandboxtest.Partition(ctx, t, s, third.Name) })
		}
	}
	pl, _, err := a.TryApply(ctx, t, c)
	a.Watch = nil
	if heal == nil {
		t.Fatalf("the partition was never made (apply: %v)", err)
	}
	if err == nil || !strings.Contains(err.Error(), third.Address) {
		t.Fatalf("etcd 3.5 → 3.6 with %s partitioned: %v, want an error naming it", third.Address, err)
	}
	if pl != nil && pl.Plan.SnapshotEtcdLogs != nil {
		t.Errorf("etcd 3.5 → 3.6 had the members save snapshots of their logs: %+v", pl.Plan.SnapshotEtcdLogs)
	}
	heal()
	pl = a.Apply(ctx, t, c)
	var moved []string
	for _, st := range pl.Plan.Steps {
		if st.Component == "etcd" && st.Action == plan.Replace {
			moved = append(moved, st.Node)
		}
	}
	if !slices.Equal(moved, []string{third.Address}) {
		t.Errorf("the apply after the partition healed moved etcd on %v, want %s alone:\n%s", moved, third.Address, strings.Join(rt.StepLines(pl.Plan), "\n"))
	}
}

// etcd35Release is the sandbox's release whose etcd is the newest 3.5 it
// builds (3.5.26 or later: etcd's rule for the step to 3.6).
func etcd35Release(t *testing.T) sandbox.KubeRelease {
	t.Helper()
	var out sandbox.KubeRelease
	for _, r := range sandbox.KubeReleases() {
		if strings.HasPrefix(r.Etcd, "v3.5.") && r.Etcd != sandbox.EtcdVersion {
			out = r
		}
	}
	if out.Etcd == "" {
		t.Fatalf("the sandbox builds no etcd 3.5 past RKE's %s", sandbox.EtcdVersion)
	}
	return out
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
