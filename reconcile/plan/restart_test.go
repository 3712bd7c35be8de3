package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
)

// TestReloadRestarts: a file to read again (desired.Node.Reload) restarts
// every reachable container that reads it, in its phase, with the reason
// given, except where the plan acts on it already.
func TestReloadRestarts(t *testing.T) {
	d := build(t, baseYML+"services: {kube-api: {secrets_encryption_config: {enabled: true}}}\n", nil)
	o := asApplied(d)
	o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer] = func() observe.Container {
		c := o.Nodes["10.0.0.1"].Containers[desired.KubeAPIServer]
		c.State = "exited"
		return c
	}()
	reload := func(reason string) {
		for i := range d.Nodes {
			d.Nodes[i].Reload = map[string]string{desired.EncryptionConfigFile: reason}
		}
	}
	reload("reads encryption.yaml again")
	if diff := cmp.Diff([]string{
		"controlplane 10.0.0.1 restart kube-apiserver (container exited)",
		"controlplane 10.0.0.2 restart kube-apiserver (reads encryption.yaml again)",
	}, lines(Compute(d, o))); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}

	// An unreachable node gets nothing; a worker change stays after.
	o.Nodes["10.0.0.2"] = unreachable("10.0.0.2", "no route")
	o.Nodes["10.0.0.4"].Containers[desired.Kubelet] = observe.Container{Name: desired.Kubelet, State: "exited"}
	reload("again")
	if diff := cmp.Diff([]string{
		"controlplane 10.0.0.1 restart kube-apiserver (container exited)",
		"worker 10.0.0.4 replace kubelet (spec hash differs)",
	}, lines(Compute(d, o))); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}
}
