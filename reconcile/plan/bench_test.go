package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/desired"
)

// clusterYML is a cluster of n nodes: three etcd and control-plane nodes,
// the others workers.
func clusterYML(n int) string {
	var b strings.Builder
	b.WriteString("cluster_name: bench\nnodes:\n")
	for i := range n {
		role := "[worker]"
		if i < 3 {
			role = "[etcd, controlplane]"
		}
		fmt.Fprintf(&b, "  - {address: 10.1.%d.%d, user: u, role: %s}\n", i/250, i%250+1, role)
	}
	return b.String()
}

// BenchmarkCompute plans an upgrade of every node's kubelet (a replace
// with a reason for each node) and a fresh kube-proxy.
func BenchmarkCompute(b *testing.B) {
	for _, n := range []int{3, 50} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			yml := clusterYML(n)
			o := asApplied(build(b, yml, nil))
			for _, on := range o.Nodes {
				delete(on.Containers, desired.KubeProxy)
			}
			d := build(b, strings.Replace(yml, "cluster_name: bench\n", "cluster_name: bench\nservices: {kubelet: {extra_args: {v: '4'}}}\n", 1), nil)
			if p := Compute(d, o); len(p.Steps) != 2*n {
				b.Fatalf("%d steps, want %d", len(p.Steps), 2*n)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = Compute(d, o)
			}
		})
	}
}
