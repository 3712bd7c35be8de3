package reconcile

import (
	"fmt"
	"slices"

	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

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

// recordNodes saves, before anything changes, the nodes an apply touches:
// cluster.yml's and the former ones not cleaned yet.
func (s *Session) recordNodes() error {
	if err := statedir.WriteJSON(s.opts.StateDir, nodesFile, slices.Concat(s.c.Nodes, s.former)); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
	return nil
}

// forgetNodes drops from the record the former nodes that were cleaned.
func (s *Session) forgetNodes(cleaned []string) error {
	keep := slices.DeleteFunc(slices.Clone(s.former), func(n spec.Node) bool { return slices.Contains(cleaned, n.Address) })
	if err := statedir.WriteJSON(s.opts.StateDir, nodesFile, slices.Concat(s.c.Nodes, keep)); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
	s.former = keep
	return nil
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
