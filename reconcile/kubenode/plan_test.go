package kubenode

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
)

func TestRestartMissing(t *testing.T) {
	dnode := func(addr string) desired.Node {
		return desired.Node{Address: addr, Containers: []desired.Container{{Name: desired.KubeProxy}, {Name: desired.Kubelet}, {Name: desired.NginxProxy}}}
	}
	d := &desired.Cluster{Nodes: []desired.Node{dnode("a"), dnode("b"), dnode("c"), {Address: "d"}}}
	running := map[string]observe.Container{desired.Kubelet: {Name: desired.Kubelet, State: "running"}}
	o := &observe.Cluster{Nodes: map[string]*observe.Node{
		"a": {Reachable: true, Containers: running}, "b": {Reachable: true, Containers: running},
		"c": {Reachable: true, Containers: running}, "d": {Reachable: true},
	}}
	p := &plan.Plan{Steps: []plan.Step{
		{Node: "a", Component: plan.FilesComponent, Action: plan.WriteFiles, Phase: plan.PhaseFiles},
		{Node: "b", Component: desired.NginxProxy, Action: plan.Replace, Phase: plan.PhaseWorker},
		{Node: "b", Component: desired.KubeProxy, Action: plan.Replace, Phase: plan.PhaseWorker},
		{Node: "c", Component: desired.Kubelet, Action: plan.Replace, Phase: plan.PhaseWorker},
		{Node: "gone", Component: desired.Kubelet, Action: plan.Remove, Phase: plan.PhaseRemovedNodes},
	}}
	added := RestartMissing(p, d, o, []string{"a", "b", "c", "d", "unknown"})
	if !cmp.Equal(added, []string{"a", "b"}) {
		t.Errorf("added for %v, want a and b (c's kubelet changes anyway, d runs none)", added)
	}
	var got []string
	for _, s := range p.Steps {
		got = append(got, s.Node+" "+string(s.Action)+" "+s.Component)
	}
	want := []string{
		"a write-files files",
		"b replace nginx-proxy",
		"b restart kubelet",
		"b replace kube-proxy",
		"c replace kubelet",
		"a restart kubelet",
		"gone remove kubelet",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	for _, s := range p.Steps {
		if s.Action == plan.Restart && (s.Reason != ReasonNodeMissing || s.Before == nil || s.After == nil || s.Phase != plan.PhaseWorker) {
			t.Errorf("step %+v", s)
		}
	}
}
