package sysaddons_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// TestServerSideDryRunE2E checks every add-on of every test cluster
// against a real kube-apiserver (RIGGER_E2E=1): each object is applied as
// a server-side dry run with strict field validation, through the add-ons
// engine's Plan, and must be accepted. This is how the add-ons whose images
// cannot be built here (Calico, canal's Calico part, the
// cluster-proportional-autoscaler, ingress-nginx, kube-dns, weave) are
// checked at all.
//
// An object of a kind that a CRD of its add-on defines, or in a Namespace
// its add-on creates, cannot be dry-run before the CRD or Namespace exists
// (Plan reports it as a Create it did not check). So the test first
// applies, for real, each add-on's CRDs and Namespaces alone (the engine
// waits for the CRDs to be Established), then plans the whole add-on, and
// fails if any object was left unchecked.
func TestServerSideDryRunE2E(t *testing.T) {
	// RKE's Service range, which the DNS Services' fixed addresses are in.
	s := apiservertest.Start(t, apiservertest.Options{ServiceClusterIPRange: spec.DefaultServiceClusterIPRange})
	e, err := addons.NewForConfig(s.Config, addons.Options{
		// Add-ons of one name follow each other here with different
		// objects: nothing is pruned.
		Prune:        false,
		ReadyTimeout: time.Minute,
		PollInterval: 200 * time.Millisecond,
		Log:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	checked := map[string]bool{}
	for _, tc := range cases(t) {
		t.Run(tc.version+"/"+tc.name, func(t *testing.T) {
			as, err := sysaddons.Render(tc.load(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				first := addons.Addon{Name: a.Name}
				for _, o := range a.Objects {
					if k := o.GetKind(); o.GroupVersionKind().Group == "apiextensions.k8s.io" && k == "CustomResourceDefinition" || o.GroupVersionKind().Group == "" && k == "Namespace" {
						first.Objects = append(first.Objects, o)
					}
				}
				if len(first.Objects) > 0 {
					if _, err := e.Apply(ctx, []addons.Addon{first}); err != nil {
						t.Fatalf("apply the CRDs and Namespaces of %s: %v", a.Name, err)
					}
				}
				cs, err := e.Plan(ctx, []addons.Addon{a})
				if err != nil {
					t.Fatalf("dry-run %s: %v", a.Name, err)
				}
				n := 0
				for _, ac := range cs.Addons {
					for _, ch := range ac.Changes {
						if slices.Contains([]addons.Action{addons.Prune, addons.Orphan}, ch.Action) {
							continue // left by an earlier test cluster
						}
						n++
						if strings.HasPrefix(ch.Summary, "not dry-run") {
							t.Errorf("%s: %s was not checked: %s", a.Name, ch.Object, ch.Summary)
						}
					}
				}
				if n != len(a.Objects) {
					t.Errorf("%s: %d objects planned, want %d", a.Name, n, len(a.Objects))
				}
				checked[a.Name] = true
			}
		})
	}
	for _, name := range sysaddons.Names() {
		if !checked[name] {
			t.Errorf("no test cluster has the add-on %s", name)
		}
	}

	// The dry run would catch a field the schema does not have.
	t.Run("a misspelled field is rejected", func(t *testing.T) {
		c, _, err := spec.Load("testdata/clusters/flannel.yml")
		if err != nil {
			t.Fatal(err)
		}
		as, err := sysaddons.Render(c)
		if err != nil {
			t.Fatal(err)
		}
		a := as[0]
		for _, o := range a.Objects {
			if o.GetKind() == "DaemonSet" {
				o = addons.Object{Unstructured: o.DeepCopy(), Source: o.Source}
				if err := unstructured.SetNestedField(o.Object, "1", "spec", "template", "spec", "hostNetwrok"); err != nil {
					t.Fatal(err)
				}
				a.Objects = []addons.Object{o}
			}
		}
		_, err = e.Plan(ctx, []addons.Addon{a})
		var ae *addons.ApplyError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "hostNetwrok") {
			t.Fatalf("Plan = %v; want an *addons.ApplyError about hostNetwrok", err)
		}
	})
}
