package report

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
)

// TestKubernetesVersions: the versions the nodes that answered run, oldest
// first, mixed when an upgrade stopped midway, with the plan's upgrade.
func TestKubernetesVersions(t *testing.T) {
	node := func(addr, tag string) *observe.Node {
		return &observe.Node{Address: addr, Reachable: true, Containers: map[string]observe.Container{
			desired.Kubelet:   {Image: "rancher/hyperkube:" + tag},
			desired.KubeProxy: {Image: "rancher/hyperkube:" + tag},
			desired.Etcd:      {Image: "rancher/mirrored-coreos-etcd:v3.5.16"},
		}}
	}
	up := &plan.Upgrade{From: "v1.32.13", To: "v1.33.13"}
	o := &observe.Cluster{Nodes: map[string]*observe.Node{
		"10.0.0.1": node("10.0.0.1", "v1.33.13"),
		"10.0.0.2": node("10.0.0.2", "v1.32.13"),
		"10.0.0.3": node("10.0.0.3", "v1.32.13"),
		"10.0.0.4": {Address: "10.0.0.4"},
	}}
	got := kubernetesVersions(Input{Observed: o, Plan: &plan.Plan{Upgrade: up}})
	want := &KubernetesVersions{Mixed: true, Upgrade: up, Running: []VersionNodes{
		{Version: "v1.32.13", Nodes: []string{"10.0.0.2", "10.0.0.3"}},
		{Version: "v1.33.13", Nodes: []string{"10.0.0.1"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	delete(o.Nodes, "10.0.0.1")
	if got := kubernetesVersions(Input{Observed: o, Plan: &plan.Plan{}}); got.Mixed || len(got.Running) != 1 {
		t.Errorf("one version: %+v", got)
	}
}
