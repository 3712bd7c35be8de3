package plan

import (
	"slices"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
)

// WithRestarts returns p with a Restart of component, for reason, on every
// reachable node of d that runs it and for which p has no step of it yet:
// a component that must read again a file it already read (the API
// servers after their encryption configuration changed) even where the
// file is on the node already, as after an apply stopped before the
// restart. The restarts go in the component's phase, so the executor makes
// them one node at a time with health checks where it does so for that
// phase. p is not changed; the result shares its other steps.
func WithRestarts(p *Plan, d *desired.Cluster, o *observe.Cluster, component, reason string) *Plan {
	out := *p
	out.Steps = slices.Clone(p.Steps)
	for i := range d.Nodes {
		dn := &d.Nodes[i]
		dc, ok := dn.Container(component)
		if !ok || slices.ContainsFunc(p.Steps, func(s Step) bool { return s.Node == dn.Address && s.Component == component }) {
			continue
		}
		on := o.Nodes[dn.Address]
		if on == nil || !on.Reachable {
			continue
		}
		oc, ok := on.Containers[component]
		if !ok {
			continue
		}
		out.Steps = append(out.Steps, Step{Node: dn.Address, Component: component, Action: Restart,
			Phase: phaseOf(component), Reason: reason, Before: &oc, After: dc})
	}
	slices.SortStableFunc(out.Steps, func(a, b Step) int { return phaseIndex(a.Phase) - phaseIndex(b.Phase) })
	return &out
}
