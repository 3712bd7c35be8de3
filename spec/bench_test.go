package spec

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse measures decoding, defaulting and validating a cluster.yml
// of 3 and of 500 nodes.
func BenchmarkParse(b *testing.B) {
	for _, n := range []int{3, 500} {
		var y strings.Builder
		y.WriteString("nodes:\n")
		for i := range n {
			role := "worker"
			if i < 3 {
				role = "etcd, controlplane"
			}
			fmt.Fprintf(&y, "  - address: 10.0.%d.%d\n    user: rke\n    role: [%s]\n    labels: {zone: z%d}\n", i/250, i%250+1, role, i%3)
		}
		data := []byte(y.String())
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, diags := Parse(data, "cluster.yml"); diags.HasErrors() {
					b.Fatal(diags)
				}
			}
		})
	}
}
