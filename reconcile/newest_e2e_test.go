package reconcile_test

import (
	"testing"

	rt "github.com/rigger/rigger/reconcile/reconciletest"
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
// cri-dockerd, and the pause image of system_images.
func TestNewestMinorSandbox(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	from, to := newestStep()
	s := sandboxtest.Start(t, sandbox.Options{Subnet: newestSubnet, Nodes: 4, Images: true, KubernetesVersions: []string{from, to}})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	a := rt.New(t)
	at, c, cs := upgradeCluster(ctx, t, a, s, from)
	upgradeUnderLoad(ctx, t, a, s, c, at(to), from, to, cs)
}
