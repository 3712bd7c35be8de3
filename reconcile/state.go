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
	var nodes []spec.Node
	if err := readStateJSON(dir, nodesFile, &nodes); err != nil {
		return nil, fmt.Errorf("read the nodes of the last apply: %w; move it away if it is damaged (nodes removed from cluster.yml are then not cleaned)", err)
	}
	return nodes, nil
}

// saveNodes replaces the nodes file atomically.
func saveNodes(dir string, nodes []spec.Node) error {
	if err := writeStateJSON(dir, nodesFile, nodes); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
	return nil
}

// readStateJSON decodes a JSON file of the state directory into v, which it
// leaves as it is when there is no such file.
func readStateJSON(dir, name string, v any) error {
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// writeStateJSON replaces a JSON file of the state directory atomically,
// mode 0600.
func writeStateJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return pki.WriteStateFile(dir, name, append(b, '\n'))
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
