package addons

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSortForApply(t *testing.T) {
	in := []ObjectRef{
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration", Name: "hook"},
		{Group: "example.com", Kind: "Widget", Namespace: "a", Name: "w1"},
		{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "d2"},
		{Kind: "Service", Namespace: "a", Name: "svc"},
		{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "d1"},
		{Kind: "Namespace", Name: "a"},
		{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition", Name: "widgets.example.com"},
		{Group: "networking.k8s.io", Kind: "Ingress", Namespace: "a", Name: "ing"},
		{Kind: "ConfigMap", Namespace: "a", Name: "cm"},
		{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cr"},
		{Kind: "ServiceAccount", Namespace: "a", Name: "sa"},
		{Group: "apiregistration.k8s.io", Kind: "APIService", Name: "v1beta1.metrics.k8s.io"},
		{Group: "example.com", Kind: "Gadget", Namespace: "a", Name: "g1"},
	}
	want := []string{
		"CustomResourceDefinition widgets.example.com",
		"Namespace a",
		"ServiceAccount a/sa",
		"ConfigMap a/cm",
		"ClusterRole cr",
		"Service a/svc",
		"Deployment a/d2", // the order given within a kind
		"Deployment a/d1",
		"Ingress a/ing",
		"Widget a/w1", // kinds not listed, in the order given, after Ingress
		"Gadget a/g1",
		"APIService v1beta1.metrics.k8s.io",
		"ValidatingWebhookConfiguration hook",
	}
	sortForApply(in, func(r ObjectRef) ObjectRef { return r })
	var got []string
	for _, r := range in {
		got = append(got, r.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("apply order (-want +got):\n%s", diff)
	}

	sortForDelete(in)
	got = got[:0]
	for _, r := range in {
		got = append(got, r.String())
	}
	wantDelete := []string{
		"ValidatingWebhookConfiguration hook",
		"APIService v1beta1.metrics.k8s.io",
		"Gadget a/g1", // unknown kinds by namespace and name
		"Widget a/w1",
		"Ingress a/ing",
		"Deployment a/d1",
		"Deployment a/d2",
		"Service a/svc",
		"ClusterRole cr",
		"ConfigMap a/cm",
		"ServiceAccount a/sa",
		"Namespace a",
		"CustomResourceDefinition widgets.example.com",
	}
	if diff := cmp.Diff(wantDelete, got); diff != "" {
		t.Errorf("delete order (-want +got):\n%s", diff)
	}
}
