package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
)

// TestWithRestarts: every reachable API server gets a restart in the
// control-plane phase, except where the plan acts on it already; the
// plan itself is not changed.
func TestWithRestarts(t *testing.T) {
	d := build(t, baseYML, nil)
	o := asApplied(d)
	o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer] = func() observe.Container {
		c := o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer]
		c.State = "exited"
		return c
	}()
	p := Compute(d, o)
	before := lines(p)
	got := WithRestarts(p, d, o, desired.KubeAPIServer, "reads encryption.yaml again")
	want := []string{
		"controlplane 10.0.0.1 restart kube-apiserver (container exited)",
		"controlplane 10.0.0.2 restart kube-apiserver (reads encryption.yaml again)",
	}
	if diff := cmp.Diff(want, lines(got)); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, lines(p)); diff != "" {
		t.Fatalf("the plan was changed (-before +after):\n%s", diff)
	}

	// An unreachable node gets nothing; a worker change stays after.
	o.Nodes["10.0.0.2"] = unreachable("10.0.0.2", "no route")
	o.Nodes["10.0.0.4"].Containers[desired.Kubelet] = observe.Container{Name: desired.Kubelet, State: "exited"}
	got = WithRestarts(Compute(d, o), d, o, desired.KubeAPIServer, "again")
	if diff := cmp.Diff([]string{
		"controlplane 10.0.0.1 restart kube-apiserver (container exited)",
		"worker 10.0.0.4 replace kubelet (spec hash differs)",
	}, lines(got)); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}
}
