package addons

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInventoryEncoding(t *testing.T) {
	refs := []ObjectRef{
		{Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: "kube-system", Name: "kube-flannel"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "flannel"},
		{Version: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-flannel-cfg"},
		{Group: "apps", Version: "v1beta2", Kind: "DaemonSet", Namespace: "kube-system", Name: "kube-flannel"}, // the same object again
	}
	got, err := encodeInventory(refs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[
{"group":"","version":"v1","kind":"ConfigMap","namespace":"kube-system","name":"kube-flannel-cfg"},
{"group":"apps","version":"v1beta2","kind":"DaemonSet","namespace":"kube-system","name":"kube-flannel"},
{"group":"rbac.authorization.k8s.io","version":"v1","kind":"ClusterRole","name":"flannel"}
]
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("encoding (-want +got):\n%s", diff)
	}
	back, err := decodeInventory(got, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(union(nil, refs), back, cmpRefsByKey()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if empty, err := encodeInventory(nil); err != nil || empty != "[\n]\n" {
		t.Errorf("empty inventory: %q, %v", empty, err)
	}
}

func cmpRefsByKey() cmp.Option {
	return cmp.Transformer("sorted", func(in []ObjectRef) []string {
		var out []string
		for _, r := range in {
			out = append(out, r.Group+"/"+r.Version+"/"+r.String())
		}
		return sortedStrings(out)
	})
}

func sortedStrings(s []string) []string { return sorted(s) }

func TestDecodeInventoryRejects(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"not JSON", "nope", "invalid character"},
		{"unknown field", `[{"kind":"ConfigMap","version":"v1","name":"a","extra":1}]`, "unknown field"},
		{"no kind", `[{"version":"v1","name":"a"}]`, "entry 1 ( a) needs version, kind and name"},
		{"too many", `[{"version":"v1","kind":"A","name":"a"},{"version":"v1","kind":"A","name":"b"},{"version":"v1","kind":"A","name":"c"}]`, "3 entries, more than 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeInventory(tt.data, 2)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
	if refs, err := decodeInventory("", 2); err != nil || refs != nil {
		t.Errorf("empty data: %v, %v", refs, err)
	}
}

func TestInventoryTooLarge(t *testing.T) {
	var refs []ObjectRef
	for i := range 10000 {
		refs = append(refs, ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "a-rather-long-namespace-name", Name: fmt.Sprintf("%s-%d", strings.Repeat("x", 60), i)})
	}
	if _, err := encodeInventory(refs); err == nil || !strings.Contains(err.Error(), "split the add-on") {
		t.Errorf("got %v, want an inventory too large for a ConfigMap", err)
	}
}

// FuzzDecodeInventory: the inventory is read from the cluster, where anyone
// with access may have changed it.
func FuzzDecodeInventory(f *testing.F) {
	f.Add(`[{"group":"apps","version":"v1","kind":"DaemonSet","namespace":"kube-system","name":"x"}]`)
	f.Add(`[]`)
	f.Add(`[{"kind":""}]`)
	f.Fuzz(func(t *testing.T, data string) {
		refs, err := decodeInventory(data, 100)
		if err != nil {
			return
		}
		if len(refs) > 100 {
			t.Fatalf("%d entries, more than the limit", len(refs))
		}
		for _, r := range refs {
			if r.Kind == "" || r.Name == "" || r.Version == "" {
				t.Fatalf("entry without kind, version or name: %+v", r)
			}
		}
	})
}
