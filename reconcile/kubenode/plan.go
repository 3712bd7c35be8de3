package kubenode

import (
	"slices"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
)

// ReasonNodeMissing is the reason of the kubelet restart RestartMissing
// plans.
const ReasonNodeMissing = "its Kubernetes Node is missing (deleted?): the kubelet registers it again when it starts"

// KubeletRunning says whether a machine's kubelet runs, from an
// observation; it fits MissingNodes.
func KubeletRunning(o *observe.Cluster) func(address string) bool {
	return func(address string) bool {
		on := o.Nodes[address]
		if on == nil || !on.Reachable {
			return false
		}
		c, ok := on.Containers[desired.Kubelet]
		return ok && c.State == "running"
	}
}

// RestartMissing adds to p a restart of the kubelet of each machine of
// missing (MissingNodes) that p does not already change: a kubelet
// registers its Node only when it starts. The step goes in the worker
// phase with the node's other steps, in start order. It is pure, and
// returns the nodes it added a step for.
func RestartMissing(p *plan.Plan, d *desired.Cluster, o *observe.Cluster, missing []string) []string {
	var added []string
	for _, addr := range missing {
		dn, ok := d.Node(addr)
		if !ok {
			continue
		}
		dc, ok := dn.Container(desired.Kubelet)
		if !ok {
			continue
		}
		if slices.ContainsFunc(p.Steps, func(s plan.Step) bool { return s.Node == addr && s.Component == desired.Kubelet }) {
			continue
		}
		on := o.Nodes[addr]
		if on == nil {
			continue
		}
		oc, ok := on.Containers[desired.Kubelet]
		if !ok {
			continue
		}
		step := plan.Step{Node: addr, Component: desired.Kubelet, Action: plan.Restart, Phase: plan.PhaseWorker,
			Reason: ReasonNodeMissing, Before: &oc, After: dc}
		// After the node's worker steps that start before the kubelet, or
		// else after the last worker step (before the removed nodes').
		at := len(p.Steps)
		for i, s := range p.Steps {
			if s.Phase == plan.PhaseRemovedNodes {
				at = min(at, i)
			}
		}
		for i, s := range p.Steps {
			if s.Node == addr && s.Phase == plan.PhaseWorker {
				if plan.Rank(s.Component) < plan.Rank(desired.Kubelet) {
					at = i + 1
				} else {
					at = i
					break
				}
			}
		}
		p.Steps = slices.Insert(p.Steps, at, step)
		added = append(added, addr)
	}
	return added
}
