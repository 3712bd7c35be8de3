package reconcile

import (
	"fmt"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// loadState reads the state directory for a plan: the records the plan
// is decided from (decide.LoadState), and how long ago the last apply
// ended (zero when that is not known). Its errors are *stall.Error values:
// a damaged file stalls.
func (s *Session) loadState() (*decide.State, time.Duration, error) {
	st, err := decide.LoadState(s.opts.StateDir)
	if err != nil {
		return nil, 0, err
	}
	var a applied
	if err := statedir.ReadJSON(s.opts.StateDir, appliedFile, &a); err != nil {
		return nil, 0, stall.Stalls(stall.StateDamaged, fmt.Errorf("read when the last apply ended: %w; delete it if it is damaged (the next plan then does not say which containers started since)", err))
	}
	if a.FinishedAt.IsZero() {
		return st, 0, nil
	}
	return st, max(s.opts.Now().Sub(a.FinishedAt), 0), nil
}

// appliedFile, in the state directory, says when the last apply's steps
// ended: a container that started since did not start by rigger's hand
// (plan.Plan.Restarted).
const appliedFile = "applied.json"

type applied struct {
	FinishedAt time.Time `json:"finished_at"`
}

// recordApplied saves when this apply's steps ended.
func (s *Session) recordApplied() error {
	if err := statedir.WriteJSON(s.opts.StateDir, appliedFile, applied{FinishedAt: s.opts.Now().UTC()}); err != nil {
		return fmt.Errorf("save when the apply ended: %w", err)
	}
	return nil
}

// nodesFile, in the state directory, lists the nodes of the last apply
// with how to reach them, so that a node removed from cluster.yml can still
// be reached and cleaned. Without it (a lost state directory), removed
// nodes are left alone: never the other way round.
const nodesFile = "nodes.json"

// loadNodes reads the nodes of the last apply; none when there is no file.
func loadNodes(dir string) ([]spec.Node, error) {
	var nodes []spec.Node
	if err := statedir.ReadJSON(dir, nodesFile, &nodes); err != nil {
		return nil, fmt.Errorf("read the nodes of the last apply: %w; move it away if it is damaged (nodes removed from cluster.yml are then not cleaned)", err)
	}
	return nodes, nil
}

// FormerNodes are the nodes of the last apply, in the state directory
// stateDir, that c no longer has: a session still reaches them, to clean
// them, until an apply has.
func FormerNodes(c *spec.Cluster, stateDir string) ([]spec.Node, error) {
	last, err := loadNodes(stateDir)
	if err != nil {
		return nil, stall.State(err)
	}
	return formerNodes(c, last), nil
}

// formerNodes are the nodes of the last apply that cluster.yml no longer has.
func formerNodes(c *spec.Cluster, last []spec.Node) []spec.Node {
	var out []spec.Node
	for _, n := range last {
		if !slices.ContainsFunc(c.Nodes, func(m spec.Node) bool { return m.Address == n.Address }) {
			out = append(out, n)
		}
	}
	return out
}
