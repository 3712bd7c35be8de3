package execute

import (
	"context"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/plan"
)

// byNode groups steps by node, nodes in the order of their first step.
func byNode(steps []plan.Step) (nodes []string, groups map[string][]plan.Step) {
	groups = map[string][]plan.Step{}
	for _, s := range steps {
		if _, ok := groups[s.Node]; !ok {
			nodes = append(nodes, s.Node)
		}
		groups[s.Node] = append(groups[s.Node], s)
	}
	return nodes, groups
}

// rollingOrder is byNode with the nodes of Plan.First moved to the
// front, in their order otherwise.
func (r *runner) rollingOrder(steps []plan.Step) ([]string, map[string][]plan.Step) {
	nodes, groups := byNode(steps)
	slices.SortStableFunc(nodes, func(a, b string) int {
		fa, fb := slices.Contains(r.first, a), slices.Contains(r.first, b)
		switch {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		}
		return 0
	})
	return nodes, groups
}

// nodeSteps runs one node's steps in order, then waits for the components
// it created, replaced or restarted to be healthy.
func (r *runner) nodeSteps(ctx context.Context, node string, steps []plan.Step) error {
	if f := r.o.BeforeNode; f != nil {
		end := r.o.Timeline.Begin("apply " + node + ": before its changes (cordon, drain)")
		err := f(ctx, node, steps)
		end()
		if err != nil {
			r.say(node, "prepare for changes", err)
			return err
		}
	}
	var touched []string
	for _, s := range steps {
		if err := r.do(ctx, s); err != nil {
			return err
		}
		if s.Action != plan.Remove {
			touched = append(touched, s.Component)
		}
	}
	if err := r.waitHealthy(ctx, node, touched, false); err != nil {
		return err
	}
	if f := r.o.AfterNode; f != nil {
		end := r.o.Timeline.Begin("apply " + node + ": after its changes (Node Ready, uncordon)")
		err := f(ctx, node, steps)
		end()
		if err != nil {
			r.say(node, "finish changes", err)
			return err
		}
	}
	return nil
}

// controlPlane changes one node at a time, after the nodes where it is
// only created, which start all at once.
func (r *runner) controlPlane(ctx context.Context, steps []plan.Step) error {
	return r.rolling(ctx, steps, 1, r.serving(desired.KubeAPIServer), r.o.Budgets.ControlPlaneBlocked)
}

// workers changes Budgets.WorkerBatch nodes at once, after the nodes
// where they are only created, which start all at once.
func (r *runner) workers(ctx context.Context, steps []plan.Step) error {
	return r.rolling(ctx, steps, r.o.Budgets.WorkerBatch, r.serving(desired.Kubelet), r.o.Budgets.WorkersBlocked)
}

// serving counts the nodes of the desired cluster that run component.
func (r *runner) serving(component string) int {
	n := 0
	for _, dn := range r.o.Desired.Nodes {
		if _, ok := dn.Container(component); ok {
			n++
		}
	}
	return n
}

// overlaps reports whether a rolling phase over serving nodes, size at a
// time, may start a batch while the containers of the one before are
// still watched on to MinUptime (their components healthy and held): when
// a component that stops after its turn, in two batches at once, still
// leaves a node of the role serving. Otherwise each batch waits for the
// last one's containers to have stayed up; either way, for those of the
// batch before the last.
func overlaps(serving, size int) bool { return serving-2*size >= 1 }

// rolling changes the nodes of steps. The nodes whose steps only repair
// containers that do not run (plan.Step.Repair), then those whose steps
// only create missing containers or repair, go first, MaxParallel at
// once: they stop nothing that serves (a crash loop, a new cluster's
// nodes, a node that joins; RKE too brings a new cluster's control plane
// and workers up in parallel). The others follow
// in batches of size (nodes of Plan.First first); a batch finishes before
// the next starts, and a failed batch stops the phase. A batch starts once
// the containers the batch before started have stayed up MinUptime, or,
// where the serving nodes allow it (overlaps), once they are healthy and
// held, while their watch goes on (one batch's watches overlap the next
// one's work, no more); a watch that fails meanwhile stops the phase
// before the next batch. blocked, when set, stops it after the nodes it
// only repairs (plan.Budgets.Blocked).
func (r *runner) rolling(ctx context.Context, steps []plan.Step, size, serving int, blocked error) error {
	r.start(steps)
	nodes, groups := r.rollingOrder(steps)
	var repairing, creating, changing []string
	for _, n := range nodes {
		switch {
		case !slices.ContainsFunc(groups[n], func(s plan.Step) bool { return !s.Repair() }):
			repairing = append(repairing, n)
		case !slices.ContainsFunc(groups[n], func(s plan.Step) bool { return s.Action != plan.Create && !s.Repair() }):
			creating = append(creating, n)
		default:
			changing = append(changing, n)
		}
	}
	change := func(ctx context.Context, _ int, n string) error { return r.nodeSteps(ctx, n, groups[n]) }
	if err := fanout.Each(ctx, repairing, r.o.MaxParallel, change); err != nil {
		return err
	}
	if blocked != nil && len(creating)+len(changing) > 0 {
		return blocked
	}
	if err := fanout.Each(ctx, creating, r.o.MaxParallel, change); err != nil {
		return err
	}
	// The batches whose containers may still be watched when the next
	// starts: the last one, where overlaps allows it.
	unsettled := 0
	if overlaps(serving, size) {
		unsettled = 1
	}
	var done [][]string
	for batch := range slices.Chunk(changing, size) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(done) > unsettled {
			settle := done[len(done)-1-unsettled]
			end := r.o.Timeline.Begin("apply: " + strings.Join(settle, ", ") + " up " + r.o.MinUptime.String() + " before the next batch")
			err := r.settleNodes(ctx, settle)
			end()
			if err != nil {
				return err
			}
		}
		if err := r.failedWatch(); err != nil {
			return err
		}
		if err := fanout.Each(ctx, batch, len(batch), change); err != nil {
			return err
		}
		done = append(done, batch)
	}
	return nil
}
