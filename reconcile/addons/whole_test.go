package addons

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// TestExcludeObjects: rigger.addons.exclude leaves the objects it names out.
func TestExcludeObjects(t *testing.T) {
	obj := func(kind, ns, name string) Object {
		u := &unstructured.Unstructured{}
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		return Object{Unstructured: u}
	}
	nodeReady := func(*unstructured.Unstructured) string { return "" }
	want := []Addon{{Name: "rke-coredns-addon", Objects: []Object{
		obj("Deployment", "kube-system", "coredns"), obj("Deployment", "kube-system", "coredns-autoscaler"), obj("ClusterRole", "", "system:coredns"),
	}, Concurrent: true, NodeReady: nodeReady, Recreate: []ObjectRef{{Kind: "Job", Namespace: "kube-system", Name: "j"}}}}
	got := Exclude(want, []spec.AddonObject{{Kind: "Deployment", Namespace: "kube-system", Name: "coredns-autoscaler"}, {Kind: "ClusterRole", Name: "system:coredns"}})
	if len(got) != 1 || len(got[0].Objects) != 1 || got[0].Objects[0].GetName() != "coredns" {
		t.Errorf("kept %+v, want coredns alone", got)
	}
	// What the add-on is besides its objects stays.
	if a := got[0]; !a.Concurrent || a.NodeReady == nil || len(a.Recreate) != 1 {
		t.Errorf("the add-on lost its other fields: Concurrent %v, NodeReady set %v, Recreate %v", a.Concurrent, a.NodeReady != nil, a.Recreate)
	}
	if len(want[0].Objects) != 3 {
		t.Error("the add-ons given were changed")
	}
}

// TestAddonErr: a refusal of an invalid object stalls, anything else is
// retried, and no error stays none.
func TestAddonErr(t *testing.T) {
	if err := Refused("apply", nil); err != nil {
		t.Errorf("Refused(nil) = %v", err)
	}
	invalid := &ApplyError{Addon: "a", Err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", nil)}
	if reason, stalled := stall.Classify(Refused("apply", invalid)); reason != stall.InvalidSpec || !stalled {
		t.Errorf("an invalid object: %s stalled=%v", reason, stalled)
	}
	if _, stalled := stall.Classify(Refused("apply", errors.New("connection refused"))); stalled {
		t.Error("a connection error stalls")
	}
}
