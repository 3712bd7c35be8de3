package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// nodesFile, in the state directory, lists the nodes of the last apply
// with how to reach them, so that a node removed from cluster.yml can still
// be reached and cleaned. Without it (a lost state directory), removed
// nodes are left alone: never the other way round.
const nodesFile = "nodes.json"

// loadNodes reads the nodes of the last apply; none when there is no file.
func loadNodes(dir string) ([]spec.Node, error) {
	b, err := os.ReadFile(filepath.Join(dir, nodesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the nodes of the last apply: %w", err)
	}
	var nodes []spec.Node
	if err := json.Unmarshal(b, &nodes); err != nil {
		p := filepath.Join(dir, nodesFile)
		return nil, fmt.Errorf("read the nodes of the last apply: %s: %w; move it away if it is damaged (nodes removed from cluster.yml are then not cleaned)", p, err)
	}
	return nodes, nil
}

// saveNodes replaces the nodes file atomically.
func saveNodes(dir string, nodes []spec.Node) error {
	b, err := json.MarshalIndent(nodes, "", "  ")
	if err != nil {
		return fmt.Errorf("encode nodes: %w", err)
	}
	if err := pki.WriteStateFile(dir, nodesFile, append(b, '\n')); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
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
