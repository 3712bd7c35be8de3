package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	yml := fmt.Sprintf("ssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\nnodes:\n", s.KeyPath, s.KnownHostsPath)
	for _, n := range s.Nodes {
		yml += fmt.Sprintf("  - {address: %s, user: %s, role: [etcd, controlplane, worker], hostname_override: %s}\n", n.Address, n.User, n.Hostname)
	}
	path := filepath.Join(b.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	c := load(b, path)
	for b.Loop() {
		p, err := Plan(context.Background(), c, nil)
		if err != nil || len(p.Unreachable) > 0 {
			b.Fatalf("plan: %v, unreachable %v", err, p.Unreachable)
		}
	}
}
