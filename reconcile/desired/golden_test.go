package desired

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/spec"
)

// load returns the defaulted example cluster examples/clusters/<name>.
func load(t testing.TB, name string) *spec.Cluster {
	t.Helper()
	c, _, err := spec.Load(filepath.Join("..", "..", "examples", "clusters", name, "cluster.yml"))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return c
}

// render is the desired state as people read it in the golden files.
func render(t testing.TB, c *Cluster) []byte {
	t.Helper()
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestGolden(t *testing.T) {
	for _, name := range []string{"ha", "three-role", "extra-args", "sandbox"} {
		t.Run(name, func(t *testing.T) {
			d, err := Build(load(t, name))
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", name+".golden"), render(t, d))
		})
	}
}
