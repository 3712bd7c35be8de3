package desired

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

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
			got := render(t, d)
			file := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("desired state of %s differs from %s (-want +got); if intended, run go test -update:\n%s", name, file, diff)
			}
		})
	}
}
