package reconcile

import (
	"context"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/sysaddons"
)

// kubeSide returns the Kubernetes side of applying pl through cs (nil
// when no controlplane node was reachable; package kubenode), hooks whose
// Step calls are serialized with the side's own progress lines (execute
// serializes its own calls only), and say, those lines. stageNetwork,
// when set, puts the network plugin in the cluster before the workers.
func (s *Session) kubeSide(pl *decide.Planned, cs kubernetes.Interface, h plan.Hooks, stageNetwork func(ctx context.Context) error) (side *kubenode.Side, hooks plan.Hooks, say func(node, msg string)) {
	if step := h.Step; step != nil {
		var mu sync.Mutex
		h.Step = func(node, msg string, err error) {
			mu.Lock()
			defer mu.Unlock()
			step(node, msg, err)
		}
	}
	say = func(node, msg string) {
		if h.Step != nil {
			h.Step(node, msg, nil)
		}
	}
	side = kubenode.NewSide(kubenode.SideInput{
		Client: cs, Cluster: s.c, Plan: pl.Plan, PKI: pl.PKI, Former: s.former, Down: pl.Unreachable(), Delete: kubenode.Deleted(pl.NodeChanges),
		Logs: func(ctx context.Context, node, component string) string {
			e, err := s.tr.Docker(ctx, node)
			if err != nil {
				return ""
			}
			return dockerop.Logs(ctx, e, component)
		},
		NetworkPlugin: s.networkPluginSelector(), NodeSubnets: sysaddons.FollowsNodeSubnets(s.c.Network.Plugin), Say: say, StageNetwork: stageNetwork, Self: selfPod(pl),
	})
	return side, h, say
}

// networkPluginSelector selects the network plugin's DaemonSets (the
// add-on's label), for the Nodes' repair; "" without a network plugin.
func (s *Session) networkPluginSelector() string {
	if s.c.Network.Plugin == "" || s.c.Network.Plugin == "none" {
		return ""
	}
	return addons.LabelAddon + "=" + sysaddons.NetworkPlugin
}

// selfPod is rigger's own pod when it runs in the cluster of pl, for the
// drains to leave; nil otherwise.
func selfPod(pl *decide.Planned) *observe.Self {
	if pl.Observed == nil || pl.Observed.Kubernetes == nil {
		return nil
	}
	return pl.Observed.Kubernetes.Self
}
