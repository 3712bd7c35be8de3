package addons

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/<name>.golden, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./reconcile/addons -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got); if intended, run go test ./reconcile/addons -update:\n%s", file, diff)
	}
}

// mixedChanges has one change of every kind.
func mixedChanges() *ChangeSet {
	ds := ObjectRef{Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: "kube-system", Name: "kube-flannel"}
	return &ChangeSet{Addons: []AddonChanges{
		{Name: "flannel", Changes: []Change{
			{Object: ObjectRef{Version: "v1", Kind: "ServiceAccount", Namespace: "kube-system", Name: "flannel"}, Action: Unchanged, Source: "flannel template: document 1 at line 1"},
			{Object: ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-flannel-cfg"}, Action: Create, Source: "flannel template: document 2 at line 9"},
			{Object: ds, Action: Configure, Summary: "spec.template.spec.containers[name=kube-flannel].image: flannel:v0.25 → flannel:v0.26",
				Fields: []string{"spec.template.spec.containers[name=kube-flannel].image"}, Source: "flannel template: document 3 at line 30"},
			{Object: ObjectRef{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "flannel-old"}, Action: Prune},
		}},
		{Name: "user-addons", Changes: []Change{
			{Object: ObjectRef{Group: "example.com", Version: "v1", Kind: "Widget", Namespace: "default", Name: "w"}, Action: Create,
				Summary: "not dry-run: its CustomResourceDefinition is created first", Source: "addons: document 2 at line 12"},
			{Object: ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "kept"}, Action: Orphan,
				Summary: "removed from the add-on; left in the cluster: rigger.addons.prune is false"},
		}},
		{Name: "ingress", Removed: true, Changes: []Change{
			{Object: ObjectRef{Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: "ingress-nginx", Name: "nginx-ingress-controller"}, Action: Prune},
		}},
	}}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name string
		cs   *ChangeSet
	}{
		{"mixed", mixedChanges()},
		{"no-changes", &ChangeSet{Addons: []AddonChanges{
			{Name: "coredns", Changes: []Change{{Object: ObjectRef{Kind: "ConfigMap", Namespace: "kube-system", Name: "coredns"}, Action: Unchanged}}},
			{Name: "empty"},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.cs.Render(&b)
			golden(t, "render-"+tt.name, b.String())
			j, err := json.MarshalIndent(tt.cs, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "render-"+tt.name+".json", string(j)+"\n")
			var back ChangeSet
			if err := json.Unmarshal(j, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.cs, &back); diff != "" {
				t.Errorf("JSON round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddonSummary(t *testing.T) {
	cs := mixedChanges()
	tests := []struct {
		in   AddonChanges
		want string
	}{
		{cs.Addons[0], "3 objects applied (1 created, 1 configured, 1 unchanged), 1 pruned"},
		{cs.Addons[1], "1 object applied (1 created, 0 configured, 0 unchanged), 1 left in the cluster"},
		{cs.Addons[2], "removed: 1 pruned"},
		{AddonChanges{Name: "x", Removed: true}, "removed: 0 pruned"},
	}
	for _, tt := range tests {
		if got := tt.in.Summary(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.in.Name, got, tt.want)
		}
	}
	if cs.Empty() {
		t.Error("mixed changes are not empty")
	}
}
