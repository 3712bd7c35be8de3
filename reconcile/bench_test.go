package reconcile

import (
	"context"
	"testing"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// BenchmarkPlanSandbox measures a whole `rigger plan` against the 3-node
// sandbox: connect over SSH (the first iteration), observe every node and
// compute the plan. Run it with RIGGER_E2E=1 as root (make bench does not set
// it: `sudo RIGGER_E2E=1 go test -run '^$' -bench PlanSandbox ./reconcile`).
func BenchmarkPlanSandbox(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 3})
	c := sandboxCluster(b, s)
	for b.Loop() {
		p, err := Plan(context.Background(), c, nil)
		if err != nil || len(p.Unreachable) > 0 {
			b.Fatalf("plan: %v, unreachable %v", err, p.Unreachable)
		}
	}
}
