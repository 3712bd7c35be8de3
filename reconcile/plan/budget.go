package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Budgets are upgrade_strategy's budgets of a plan resolved against the
// nodes it could not reach: how many worker nodes change at once, and why
// the workers' or the control plane's rolling phase must not start (its
// budget used up by nodes already down; nil: it may). The executor honours
// them as they are (execute.Options); the plan shows them.
type Budgets struct {
	WorkerBatch                         int
	WorkersBlocked, ControlPlaneBlocked error
}

// ResolveBudgets resolves u's max_unavailable_worker and
// max_unavailable_controlplane for the nodes of d (Unavailability), the
// nodes of unreachable being down already; without an upgrade_strategy,
// its defaults.
func ResolveBudgets(d *desired.Cluster, unreachable []string, u *spec.UpgradeStrategy) (Budgets, error) {
	if u == nil {
		u = &spec.UpgradeStrategy{MaxUnavailableWorker: spec.DefaultMaxUnavailableWorker, MaxUnavailableControlplane: spec.DefaultMaxUnavailableCP}
	}
	var b Budgets
	var err error
	if b.WorkerBatch, b.WorkersBlocked, err = Unavailability(d, unreachable, spec.RoleWorker, u.MaxUnavailableWorker, "max_unavailable_worker"); err != nil {
		return Budgets{}, err
	}
	if _, b.ControlPlaneBlocked, err = Unavailability(d, unreachable, spec.RoleControlPlane, u.MaxUnavailableControlplane, "max_unavailable_controlplane"); err != nil {
		return Budgets{}, err
	}
	return b, nil
}

// Blocked are the rolling phases of p that its budgets stop, each with
// why: a phase stops at a node with a step that is not a Repair; the
// nodes it only repairs still change.
func (b Budgets) Blocked(p *Plan) map[Phase]error {
	out := map[Phase]error{}
	for ph, err := range map[Phase]error{PhaseControlPlane: b.ControlPlaneBlocked, PhaseWorker: b.WorkersBlocked} {
		if err != nil && slices.ContainsFunc(p.Steps, func(s Step) bool { return s.Phase == ph && !s.Repair() }) {
			out[ph] = err
		}
	}
	return out
}

// Repair reports whether s brings back a container that does not run (a
// crash loop, exited, created and never started) as it already is: its
// spec unchanged. It takes nothing away that serves, so an unavailability
// budget does not count it, as a PodDisruptionBudget does not count the
// eviction of a pod that is not ready (Kubernetes' unhealthyPodEvictionPolicy
// AlwaysAllow): a budget used up by a node down does not keep a crash loop
// on another node looping.
func (s Step) Repair() bool {
	b := s.Before
	if b == nil || b.State == "running" || b.RKE || (s.Action != Replace && s.Action != Restart) {
		return false
	}
	after := s.AfterHash
	if s.After != nil {
		after = s.After.Hash()
	}
	return after != "" && b.SpecHash == after
}

// Unavailability resolves an upgrade_strategy budget (value, the field
// key) for the nodes of d with role: the nodes that may change at once,
// the budget less those already unavailable (unreachable). When nothing
// is left, the phase is blocked with the reason.
func Unavailability(d *desired.Cluster, unreachable []string, role, value, key string) (batch int, blocked error, err error) {
	total := 0
	var down []string
	for _, n := range d.Nodes {
		if !slices.Contains(n.Roles, role) {
			continue
		}
		total++
		if slices.Contains(unreachable, n.Address) {
			down = append(down, n.Address)
		}
	}
	budget, err := spec.ParseBudget(value, 1)
	if err != nil {
		return 0, nil, stall.Stalls(stall.InvalidSpec, fmt.Errorf("upgrade_strategy.%s: %w", key, err))
	}
	most := budget.Of(total, 1)
	if batch = most - len(down); batch < 1 {
		return 0, fmt.Errorf("upgrade_strategy.%s allows %d of the %d %s nodes to be unavailable, and %d are already (%s): "+
			"nothing more changes there until they answer; or raise the budget", key, most, total, role, len(down), strings.Join(down, ", ")), nil
	}
	return batch, nil, nil
}

// CheckRemovals is the guard against a truncated cluster.yml: a plan that
// removes more nodes than rigger.max_removed_nodes (limit) allows of the
// nodes (those of cluster.yml, kept, and those removed) needs allow.
func CheckRemovals(p *Plan, kept int, limit string, allow bool) error {
	removed := removedNodes(p)
	if len(removed) == 0 || allow {
		return nil
	}
	budget, err := spec.ParseBudget(limit, 0)
	if err != nil {
		return stall.Stalls(stall.InvalidSpec, fmt.Errorf("rigger.max_removed_nodes: %w", err))
	}
	total := kept + len(removed)
	if most := budget.Of(total, 0); len(removed) > most {
		return stall.Stalls(stall.RemovalGuard, &RemovalGuardError{Removed: removed, Total: total, Limit: limit})
	}
	return nil
}

// removedNodes are the nodes p removes: those it reaches and those it
// does not, by address.
func removedNodes(p *Plan) []string {
	removed := slices.Clone(p.RemovedNodes)
	for _, u := range p.Unreachable {
		if u.Removed {
			removed = append(removed, u.Node)
		}
	}
	return removed
}

// RemovalGuardError is a plan that removes more nodes than
// rigger.max_removed_nodes allows: a guard against a truncated cluster.yml.
type RemovalGuardError struct {
	// Removed are the addresses of the nodes the plan removes.
	Removed []string
	// Total is how many nodes rigger knows, the removed ones included.
	Total int
	// Limit is rigger.max_removed_nodes.
	Limit string
}

func (e *RemovalGuardError) Error() string {
	return fmt.Sprintf("the plan removes %d of %d nodes (%s), more than rigger.max_removed_nodes (%s) allows: "+
		"if cluster.yml is complete and this is meant, apply with --allow-removals (or raise rigger.max_removed_nodes)",
		len(e.Removed), e.Total, strings.Join(e.Removed, ", "), e.Limit)
}
