package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport/sshtun"
)

// Plan observes the nodes of c over SSH and computes what must change for
// them to run what c asks for. It changes nothing on the nodes.
func Plan(ctx context.Context, c *spec.Cluster, log *slog.Logger) (*plan.Plan, error) {
	d, err := desired.Build(c)
	if err != nil {
		return nil, fmt.Errorf("build desired state: %w", err)
	}
	cfg, err := SSHConfig(c, log)
	if err != nil {
		return nil, err
	}
	tr, err := sshtun.New(cfg)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	addresses := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		addresses = append(addresses, n.Address)
	}
	o := observe.Observe(ctx, tr, c.ClusterName, addresses, c.Rigger.MaxParallel, time.Now)
	return plan.Compute(d, o), nil
}
