package addons

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// staticMapper is a Mapper over a fixed set of kinds that counts resets.
type staticMapper struct {
	*meta.DefaultRESTMapper
	resets int
}

func (m *staticMapper) RESTMappingWithContext(_ context.Context, gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return m.RESTMapping(gk, versions...)
}

func (m *staticMapper) ResetWithContext(context.Context) { m.resets++ }

func newStaticMapper() *staticMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		gvk   schema.GroupVersionKind
		scope meta.RESTScope
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, meta.RESTScopeRoot},
	} {
		m.Add(k.gvk, k.scope)
	}
	return &staticMapper{DefaultRESTMapper: m}
}

func objects(t *testing.T, manifest string) []Object {
	t.Helper()
	objs, err := Decode("m.yaml", []byte(manifest), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestResolve(t *testing.T) {
	crd := "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n" +
		"spec: {group: example.com, scope: Namespaced, names: {plural: widgets, kind: Widget}}\n"
	mapper := newStaticMapper()
	e := New(nil, mapper, Options{})
	set, err := e.resolve(context.Background(), []Addon{
		{Name: "one", Objects: objects(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r, namespace: ignored}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ns1}
---
`+crd+`---
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
`)},
		{Name: "two", Objects: objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns1}\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Ref        string
		GVR        string
		Namespaced bool
		Pending    bool
		Label      string
	}
	var gotOne []got
	for _, tg := range set.addons[0].targets {
		gotOne = append(gotOne, got{tg.ref.String(), tg.gvr.String(), tg.namespaced, tg.pendingCRD, tg.body.GetLabels()[LabelAddon]})
		if tg.body.GetNamespace() != tg.ref.Namespace {
			t.Errorf("%s is applied in namespace %q", tg.ref, tg.body.GetNamespace())
		}
	}
	want := []got{
		{"CustomResourceDefinition widgets.example.com", "apiextensions.k8s.io/v1, Resource=customresourcedefinitions", false, false, "one"},
		{"Namespace ns1", "/v1, Resource=namespaces", false, false, "one"},
		{"ClusterRole r", "rbac.authorization.k8s.io/v1, Resource=clusterroles", false, false, "one"},
		{"Deployment default/d", "apps/v1, Resource=deployments", true, false, "one"},
		{"Widget ns1/w", "example.com/v1, Resource=widgets", true, true, "one"},
	}
	if diff := cmp.Diff(want, gotOne); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if !set.namespaces["ns1"] || set.owner[objKey{Kind: "ConfigMap", Namespace: "ns1", Name: "c"}] != "two" {
		t.Errorf("set: namespaces %v, owners %v", set.namespaces, set.owner)
	}
	if mapper.resets != 1 {
		t.Errorf("the mapper was reset %d times for one unknown kind, want once", mapper.resets)
	}

	errTests := []struct {
		name   string
		addons []Addon
		want   string
	}{
		{"bad name", []Addon{{Name: "Bad_Name"}}, `add-on name "Bad_Name": use lower-case letters`},
		{"name too long", []Addon{{Name: strings.Repeat("a", MaxNameLength+1)}}, "at most 50 characters"},
		{"add-on twice", []Addon{{Name: "a"}, {Name: "a"}}, `add-on "a" is given twice`},
		{"object twice", []Addon{{Name: "a", Objects: objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n")}},
			"addon a: ConfigMap default/c is given twice (m.yaml: document 1 at line 1 and m.yaml: document 2 at line 5)"},
		{"object in two add-ons", []Addon{
			{Name: "a", Objects: objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")},
			{Name: "b", Objects: objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")},
		}, "addon b: ConfigMap default/c (m.yaml: document 1 at line 1) is also in add-on a: an object belongs to one add-on"},
		{"unknown kind", []Addon{{Name: "a", Objects: objects(t, "apiVersion: nope.example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n")}},
			"addon a: Gizmo g (m.yaml: document 1 at line 1): apply: the cluster serves no Gizmo in API version nope.example.com/v1 (is its CustomResourceDefinition installed?)"},
		{"nil object", []Addon{{Name: "a", Objects: []Object{{Source: Source{Name: "template"}}}}}, "addon a: an object is nil (template)"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(nil, newStaticMapper(), Options{}).resolve(context.Background(), tt.addons)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v\nwant an error with %s", err, tt.want)
			}
		})
	}
}

func TestResolveDoesNotChangeTheCallersObjects(t *testing.T) {
	objs := objects(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
	if _, err := New(nil, newStaticMapper(), Options{}).resolve(context.Background(), []Addon{{Name: "a", Objects: objs}}); err != nil {
		t.Fatal(err)
	}
	if objs[0].GetNamespace() != "" || objs[0].GetLabels() != nil {
		t.Errorf("resolve changed the caller's object: %v", objs[0].Object)
	}
}

func TestNotOurs(t *testing.T) {
	e := New(nil, newStaticMapper(), Options{})
	live := func(labels map[string]string, managers ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}}
		u.SetLabels(labels)
		u.SetManagedFields(managers)
		return u
	}
	rigger := metav1.ManagedFieldsEntry{Manager: "rigger", Operation: metav1.ManagedFieldsOperationApply}
	kubectl := metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate}
	riggerUpdate := metav1.ManagedFieldsEntry{Manager: "rigger", Operation: metav1.ManagedFieldsOperationUpdate}
	tests := []struct {
		name string
		live *unstructured.Unstructured
		want string
	}{
		{"ours", live(map[string]string{LabelAddon: "demo"}, kubectl, rigger), ""},
		{"no label", live(nil, rigger), "it has no rigger.io/addon label (it was created again by someone else)"},
		{"another add-on's", live(map[string]string{LabelAddon: "other"}, rigger), `its rigger.io/addon label names add-on "other"`},
		{"not applied by rigger", live(map[string]string{LabelAddon: "demo"}, kubectl, riggerUpdate), "rigger's field manager does not manage it (managers: kubectl-edit, rigger)"},
	}
	for _, tt := range tests {
		if got := e.notOurs(tt.live, "demo"); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestUnion(t *testing.T) {
	a := []ObjectRef{{Group: "apps", Version: "v1beta2", Kind: "Deployment", Namespace: "n", Name: "d"}, {Version: "v1", Kind: "ConfigMap", Namespace: "n", Name: "c"}}
	b := []ObjectRef{{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "n", Name: "d"}, {Version: "v1", Kind: "Secret", Namespace: "n", Name: "s"}}
	want := []ObjectRef{b[0], a[1], b[1]}
	if diff := cmp.Diff(want, union(a, b)); diff != "" {
		t.Errorf("union (-want +got):\n%s", diff)
	}
}
