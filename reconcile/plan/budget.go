package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

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
	removed := slices.Clone(p.RemovedNodes)
	for _, u := range p.Unreachable {
		if u.Removed {
			removed = append(removed, u.Node)
		}
	}
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
