package sysaddons_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/reconcile/sysaddons"
)

// textDiffers lists the test clusters whose manifest text rigger renders
// differently from RKE on purpose; their objects, read as kubectl reads
// RKE's manifest, must still be the same.
var textDiffers = map[string]string{
	"weave": "rigger hands RKE's weave template the update strategy without its type, which RKE's manifest gives twice (see weaveStrategy)",
}

// TestEquivalentToRKE renders every test cluster with RKE v1.8.14's own code
// (hack/rke-render: RKE's ParseConfig, InitClusterObject and
// ConfigureCluster against a fake API server that records the manifests)
// and compares RKE's add-ons, their order and their text with rigger's.
//
// It needs RKE's module and its dependencies in the Go module cache (`cd
// hack/rke-render && go mod download`); it is skipped, saying so, when they
// are not there, and with -short (package rkerender).
func TestEquivalentToRKE(t *testing.T) {
	bin := rkerender.Binary(t)
	in, out := t.TempDir(), t.TempDir()
	tcs := cases(t)
	var files []string
	for _, tc := range tcs {
		f := filepath.Join(in, tc.version+"_"+tc.name+".yml")
		if err := os.WriteFile(f, tc.yml, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	cmd := exec.Command(bin, append([]string{"-out", out}, files...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rke-render: %v\n%s", err, b)
	}

	for _, tc := range tcs {
		t.Run(tc.version+"/"+tc.name, func(t *testing.T) {
			dir := filepath.Join(out, tc.version+"_"+tc.name)
			if b, err := os.ReadFile(filepath.Join(dir, "error.txt")); err == nil {
				t.Fatalf("RKE failed: %s", b)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "warnings.txt")); len(b) > 0 {
				t.Logf("RKE warns: %s", b)
			}
			order, err := os.ReadFile(filepath.Join(dir, "order"))
			if err != nil {
				t.Fatal(err)
			}
			rkeNames := strings.Fields(string(order))
			ms, err := sysaddons.Manifests(tc.load(t))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range ms {
				names = append(names, m.Name)
			}
			if diff := cmp.Diff(rkeNames, names, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("add-ons (-RKE +rigger):\n%s", diff)
			}
			for _, m := range ms {
				rke, err := os.ReadFile(filepath.Join(dir, m.Name+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(rke, m.YAML) {
					continue
				}
				why, ok := textDiffers[tc.name]
				if !ok {
					t.Errorf("add-on %s (template %s) differs from RKE's (-RKE +rigger):\n%s", m.Name, m.Template, cmp.Diff(lines(rke), lines(m.YAML)))
					continue
				}
				if diff := cmp.Diff(kubectlObjects(t, rke), kubectlObjects(t, m.YAML)); diff != "" {
					t.Errorf("add-on %s: objects differ from RKE's (-RKE +rigger):\n%s", m.Name, diff)
					continue
				}
				t.Logf("add-on %s: the text differs from RKE's, the objects are the same: %s", m.Name, why)
			}
		})
	}
}

// kubectlObjects reads a manifest as kubectl apply does: documents split on
// ---, keys given twice keep the last value, empty documents skipped, Lists
// kept as written.
func kubectlObjects(t *testing.T, manifest []byte) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("read as kubectl does: %v", err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

func lines(b []byte) []string { return strings.Split(string(b), "\n") }
