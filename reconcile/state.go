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
