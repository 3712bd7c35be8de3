package execute

import (
	"context"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/plan"
)

// removedNodes removes the containers of nodes gone from cluster.yml and
// cleans their files, MaxParallel nodes at once.
func (r *runner) removedNodes(ctx context.Context, steps []plan.Step) error {
	r.start(steps)
	_, groups := byNode(steps)
	return fanout.Each(ctx, r.removed, r.o.MaxParallel, func(ctx context.Context, _ int, n string) error { return r.cleanNode(ctx, n, groups[n]) })
}

func (r *runner) cleanNode(ctx context.Context, node string, steps []plan.Step) error {
	for _, s := range steps {
		if err := r.do(ctx, s); err != nil {
			return err
		}
	}
	err := r.ops.clean(ctx, node)
	r.say(node, "cleaned "+strings.Join(desired.CleanPaths(r.o.Desired.PrefixPath), ", "), err)
	return err
}

func (r *runner) cleanFiles(ctx context.Context, node string) error {
	e, err := r.o.Nodes(ctx, node)
	if err != nil {
		return err
	}
	return clean(ctx, e, node, r.o.HelperImage, desired.CleanPaths(r.o.Desired.PrefixPath)...)
}

// clean empties the directories paths on the node with a one-shot helper
// container (the directories stay: they may be mount points).
func clean(ctx context.Context, e dockerop.Engine, node, image string, paths ...string) error {
	const script = `for d in "$@"; do [ -d "/host$d" ] && find "/host$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} +; done; exit 0`
	binds := make([]string, 0, len(paths))
	for _, p := range paths {
		binds = append(binds, p+":/host"+p)
	}
	cmd := append([]string{"sh", "-c", script, "clean"}, paths...)
	return dockerop.Run(ctx, e, node, image, cmd, binds)
}
