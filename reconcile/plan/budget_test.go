package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// budgetCluster is a cluster of cp controlplane nodes (10.0.0.x) and
// workers worker nodes (10.0.1.x).
func budgetCluster(cp, workers int) *desired.Cluster {
	d := &desired.Cluster{}
	for i := range cp {
		d.Nodes = append(d.Nodes, desired.Node{Address: fmt.Sprintf("10.0.0.%d", i+1), Roles: []string{spec.RoleControlPlane}})
	}
	for i := range workers {
		d.Nodes = append(d.Nodes, desired.Node{Address: fmt.Sprintf("10.0.1.%d", i+1), Roles: []string{spec.RoleWorker}})
	}
	return d
}

// TestUnavailability: a budget is a count or a share of the role's nodes,
// at least one, less the nodes of the role already down; nothing left
// blocks the phase, naming them.
func TestUnavailability(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workers     int
		value       string
		down        []string
		wantBatch   int
		wantBlocked string
	}{
		{name: "a count", workers: 10, value: "3", wantBatch: 3},
		{name: "a share, rounded down", workers: 25, value: "10%", wantBatch: 2},
		{name: "a share of few nodes is one", workers: 3, value: "10%", wantBatch: 1},
		{name: "the nodes down count against it", workers: 10, value: "3", down: []string{"10.0.1.1"}, wantBatch: 2},
		{name: "nodes of another role down do not", workers: 10, value: "3", down: []string{"10.0.0.1"}, wantBatch: 3},
		{name: "used up", workers: 10, value: "2", down: []string{"10.0.1.1", "10.0.1.2"}, wantBlocked: "allows 2 of the 10 worker nodes to be unavailable, and 2 are already (10.0.1.1, 10.0.1.2)"},
		{name: "more down than it allows", workers: 3, value: "1", down: []string{"10.0.1.1", "10.0.1.3"}, wantBlocked: "and 2 are already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch, blocked, err := Unavailability(budgetCluster(1, tc.workers), tc.down, spec.RoleWorker, tc.value, "max_unavailable_worker")
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantBlocked == "" {
				if batch != tc.wantBatch || blocked != nil {
					t.Errorf("batch %d, blocked %v; want %d", batch, blocked, tc.wantBatch)
				}
				return
			}
			if blocked == nil || !strings.Contains(blocked.Error(), tc.wantBlocked) || !strings.Contains(blocked.Error(), "upgrade_strategy.max_unavailable_worker") {
				t.Errorf("batch %d, blocked %v; want blocked with %q", batch, blocked, tc.wantBlocked)
			}
		})
	}
	_, _, err := Unavailability(budgetCluster(1, 3), nil, spec.RoleWorker, "many", "max_unavailable_worker")
	if reason, stalled := stall.Classify(err); err == nil || reason != stall.InvalidSpec || !stalled {
		t.Errorf("a budget that is no count or share: %v, want it refused as cluster.yml's", err)
	}
}

// TestResolveBudgets: both rolling phases' budgets at once, and the
// phases they stop: only a phase with steps.
func TestResolveBudgets(t *testing.T) {
	d := budgetCluster(3, 4)
	b, err := ResolveBudgets(d, []string{"10.0.0.2", "10.0.1.1"}, &spec.UpgradeStrategy{MaxUnavailableWorker: "50%", MaxUnavailableControlplane: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if b.WorkerBatch != 1 || b.WorkersBlocked != nil || b.ControlPlaneBlocked == nil {
		t.Fatalf("budgets %+v: want a worker batch of 1 and the control plane blocked", b)
	}
	p := &Plan{Steps: []Step{{Node: "10.0.1.2", Phase: PhaseWorker}}}
	if got := b.Blocked(p); len(got) != 0 {
		t.Errorf("blocked phases of a plan without control-plane steps: %v", got)
	}
	p.Steps = append(p.Steps, Step{Node: "10.0.0.1", Phase: PhaseControlPlane})
	if got := b.Blocked(p); len(got) != 1 || !errors.Is(got[PhaseControlPlane], b.ControlPlaneBlocked) {
		t.Errorf("blocked phases: %v, want the control plane's", got)
	}
	if b, err := ResolveBudgets(d, nil, nil); err != nil || b.WorkerBatch != 1 || b.WorkersBlocked != nil {
		t.Errorf("without upgrade_strategy: %+v, %v; want its defaults", b, err)
	}
}

// TestCheckRemovals: the guard against a truncated cluster.yml counts the
// nodes removed, those that did not answer too, against a share of all;
// --allow-removals lets the plan go.
func TestCheckRemovals(t *testing.T) {
	removing := func(n int, unreachable ...string) *Plan {
		p := &Plan{}
		for i := range n {
			p.RemovedNodes = append(p.RemovedNodes, fmt.Sprintf("10.0.2.%d", i+1))
		}
		for _, u := range unreachable {
			p.Unreachable = append(p.Unreachable, Unreachable{Node: u, Removed: true})
		}
		return p
	}
	for _, tc := range []struct {
		name      string
		p         *Plan
		kept      int
		limit     string
		allow     bool
		wantGuard bool
	}{
		{name: "none removed", p: removing(0), kept: 3, limit: "0"},
		{name: "within the share", p: removing(1), kept: 4, limit: "30%"},
		{name: "past the share", p: removing(2), kept: 3, limit: "30%", wantGuard: true},
		{name: "a removed node that did not answer counts", p: removing(1, "10.0.2.9"), kept: 5, limit: "1", wantGuard: true},
		{name: "past it, allowed", p: removing(2), kept: 3, limit: "30%", allow: true},
		{name: "a count", p: removing(2), kept: 3, limit: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRemovals(tc.p, tc.kept, tc.limit, tc.allow)
			var guard *RemovalGuardError
			reason, stalled := stall.Classify(err)
			switch {
			case !tc.wantGuard && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantGuard && (!errors.As(err, &guard) || reason != stall.RemovalGuard || !stalled || !strings.Contains(err.Error(), "--allow-removals")):
				t.Errorf("%v, want the removal guard", err)
			}
		})
	}
}
