package reconcile

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// BenchmarkSandbox measures, against the 3-node sandbox once the example
// cluster runs there, a whole `rigger plan` (observe every node over the
// open SSH connections, resolve the PKI, compute) and a no-op `rigger
// apply` (the same, then nothing to run). Run it as root with RIGGER_E2E=1:
// make bench does.
func BenchmarkSandbox(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 3, Images: true})
	c := sandboxCluster(b, s, 3, nil)
	ctx := context.Background()
	sess, err := Open(c, Options{StateDir: filepath.Join(b.TempDir(), "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	pl, err := sess.Plan(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sess.Apply(ctx, pl, ApplyOptions{}); err != nil {
		b.Fatal(err)
	}

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
			if !pl.Plan.Empty() {
				b.Fatalf("not a no-op: %d steps", len(pl.Plan.Steps))
			}
			if _, err := sess.Apply(ctx, pl, ApplyOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
