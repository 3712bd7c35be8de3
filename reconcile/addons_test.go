package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/spec"
)

// TestExcludeObjects: rigger.addons.exclude leaves the objects it names out.
func TestExcludeObjects(t *testing.T) {
	obj := func(kind, ns, name string) addons.Object {
		u := &unstructured.Unstructured{}
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		return addons.Object{Unstructured: u}
	}
	want := []addons.Addon{{Name: "rke-coredns-addon", Objects: []addons.Object{
		obj("Deployment", "kube-system", "coredns"), obj("Deployment", "kube-system", "coredns-autoscaler"), obj("ClusterRole", "", "system:coredns"),
	}}}
	got := excludeObjects(want, []spec.AddonObject{{Kind: "Deployment", Namespace: "kube-system", Name: "coredns-autoscaler"}, {Kind: "ClusterRole", Name: "system:coredns"}})
	if len(got) != 1 || len(got[0].Objects) != 1 || got[0].Objects[0].GetName() != "coredns" {
		t.Errorf("kept %+v, want coredns alone", got)
	}
	if len(want[0].Objects) != 3 {
		t.Error("the add-ons given were changed")
	}
}
