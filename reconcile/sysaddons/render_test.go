package sysaddons_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// versions are the kubernetes_version of the golden tests, for the
// clusters of testdata/clusters that set none: the newest 1.31 and RKE
// v1.8.14's default. Their templates differ (flannel-v0.27.3 and
// canal-v3.30.2, flannel-v0.28.1 and canal-v3.30.2-rancher2).
var versions = []string{"v1.31.14-rancher1-1", "v1.32.13-rancher1-3"}

// testCase is one cluster.yml of testdata/clusters at one version.
type testCase struct {
	name, version string
	yml           []byte // the file, with kubernetes_version set
}

// cases returns the test clusters at every version of versions, or at
// their own kubernetes_version when they set one.
func cases(t *testing.T) []testCase {
	t.Helper()
	files, err := filepath.Glob("testdata/clusters/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test clusters: %v", err)
	}
	var out []testCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yml")
		if c, diags := spec.Parse(data, f); !diags.HasErrors() && bytes.Contains(data, []byte("\nkubernetes_version:")) {
			out = append(out, testCase{name, c.KubernetesVersion, data})
			continue
		}
		for _, v := range versions {
			out = append(out, testCase{name, v, append([]byte("kubernetes_version: "+v+"\n"), data...)})
		}
	}
	return out
}

// load reads a test cluster as rigger does.
func (tc testCase) load(t *testing.T) *spec.Cluster {
	t.Helper()
	c, diags := spec.Parse(tc.yml, tc.name+".yml")
	if diags.HasErrors() {
		t.Fatalf("load %s: %v", tc.name, diags.Err())
	}
	return c
}

// TestGolden renders every test cluster and compares the manifests (what
// kubectl apply would get) with testdata/golden/<version>/<cluster>.yaml.
// Each add-on is preceded by a comment naming it, its template and its
// objects with the document they come from.
func TestGolden(t *testing.T) {
	for _, tc := range cases(t) {
		t.Run(tc.version+"/"+tc.name, func(t *testing.T) {
			c := tc.load(t)
			ms, err := sysaddons.Manifests(c)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "# %s at %s: %d add-ons\n", tc.name, tc.version, len(ms))
			for _, m := range ms {
				objs, err := m.Objects()
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "#\n# ==== add-on %s, template %s, %d objects\n", m.Name, m.Template, len(objs))
				for _, o := range objs {
					ns := o.GetNamespace()
					if ns != "" {
						ns += "/"
					}
					fmt.Fprintf(&b, "#   %s %s%s (%s)\n", o.GetKind(), ns, o.GetName(), strings.TrimPrefix(o.Source.String(), "template "+m.Template+": "))
				}
				for _, r := range m.Recreate {
					fmt.Fprintf(&b, "#   recreated when changed: %s\n", r)
				}
				for _, r := range m.Remove {
					fmt.Fprintf(&b, "#   removed: %s\n", r)
				}
				b.Write(m.YAML)
				if !bytes.HasSuffix(m.YAML, []byte("\n")) {
					b.WriteString("\n")
				}
			}
			golden.Check(t, filepath.Join("testdata", "golden", tc.version, tc.name+".yaml"), b.Bytes())
		})
	}
}

// TestRender checks what Render returns beyond the manifests: the add-ons
// and their order, each object's source, and that c is left as it was.
func TestRender(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"defaults", []string{sysaddons.NetworkPlugin, sysaddons.CoreDNS, sysaddons.MetricsServer, sysaddons.Ingress}},
		{"nodelocal", []string{sysaddons.CoreDNS, sysaddons.Nodelocal}},
		{"kube-dns", []string{sysaddons.KubeDNS}},
		{"ingress-none", []string{sysaddons.NetworkPlugin, sysaddons.CoreDNS, sysaddons.MetricsServer}},
		{"none", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, _, err := spec.Load(filepath.Join("testdata", "clusters", tc.file+".yml"))
			if err != nil {
				t.Fatal(err)
			}
			before, err := spec.Marshal(c, true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sysaddons.Render(c)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, a := range got {
				names = append(names, a.Name)
				if len(a.Objects) == 0 {
					t.Errorf("add-on %s has no objects", a.Name)
				}
				for _, o := range a.Objects {
					if !strings.HasPrefix(o.Source.String(), "template ") || o.Source.Document == 0 || o.Source.Line == 0 {
						t.Errorf("add-on %s: %s %s has source %q; want the template, document and line", a.Name, o.GetKind(), o.GetName(), o.Source)
					}
				}
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("add-ons (-want +got):\n%s", diff)
			}
			for _, n := range names {
				if !slices.Contains(sysaddons.Names(), n) {
					t.Errorf("add-on %s is not in Names()", n)
				}
			}
			after, err := spec.Marshal(c, true)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(before), string(after)); diff != "" {
				t.Errorf("Render changed the cluster (-before +after):\n%s", diff)
			}
		})
	}
}
