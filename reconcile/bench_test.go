package reconcile_test

import (
	"context"
	"testing"

	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// BenchmarkSandbox measures, against the 3-node sandbox once the example
// cluster runs there with its add-ons, a whole `rigger plan` (observe every
// node over the open SSH connections, resolve the PKI, compute, dry-run the
// add-ons) and a no-op `rigger apply` (the same, then nothing to run). On
// two cores a plan took 14 s with client-go's default rate limit, 2 s
// without. Run it as root with RIGGER_E2E=1:
// make bench does.
func BenchmarkSandbox(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 3, Images: true})
	c := rt.Cluster(b, s, rt.Roles(3))
	ctx := context.Background()
	a := rt.New(b)
	a.Apply(ctx, b, c)
	sess := a.Session(b, c)

	b.Run("plan", func(b *testing.B) {
		for b.Loop() {
			if _, err := sess.Plan(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no-op apply", func(b *testing.B) {
		for b.Loop() {
			pl, err := sess.Plan(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if pl.Changes() {
				b.Fatalf("not a no-op: %d steps", len(pl.Plan.Steps))
			}
			if _, err := a.ApplyPlanned(ctx, b, sess, pl); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUpgrade is the time a Kubernetes minor upgrade (v1.32.13 to
// v1.33.13, etcd 3.5.16 to 3.5.35) of three sandbox nodes with every role
// takes, by upgrade and by node: a snapshot, etcd, the API servers, the
// controller managers and schedulers, each node drained and its kubelet
// and kube-proxy upgraded. One upgrade is one iteration; it takes minutes,
// so the benchmark runs it once.
func BenchmarkUpgrade(b *testing.B) {
	const to = "v1.33.13"
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 38, Images: true, KubernetesVersions: []string{to}})
	ctx := context.Background()
	a := rt.New(b)
	// The drains evict metrics-server's pod, which has an emptyDir volume.
	emptyDirs := func(c *spec.Cluster) { c.UpgradeStrategy.DrainInput.DeleteLocalData = true }
	a.Apply(ctx, b, rt.ClusterAt(b, s, rt.Roles(3), sandbox.KubernetesVersion, emptyDirs))
	up := rt.ClusterAt(b, s, rt.Roles(3), to, emptyDirs)
	for b.Loop() {
		if pl := a.Apply(ctx, b, up); pl.Plan.Upgrade == nil {
			b.Fatalf("not an upgrade: %v", rt.StepLines(pl.Plan))
		}
	}
	if b.N != 1 {
		b.Fatalf("%d iterations: an upgrade is measured once (a second apply changes nothing)", b.N)
	}
	per := b.Elapsed().Seconds()
	b.ReportMetric(per, "s/upgrade")
	b.ReportMetric(per/float64(len(s.Nodes)), "s/node")
}
