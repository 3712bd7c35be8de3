package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// kubeSide is the Kubernetes side of the nodes during one apply (package
// kubenode): cordon and drain around a node's changes, the wait for its
// Node to be Ready, the Nodes of removed machines deleted, the state
// Secret, and, once the plan ran, labels, taints and stale Nodes.
type kubeSide struct {
	s     *Session
	pl    *Planned
	cs    kubernetes.Interface // nil when no controlplane node answered
	hooks *kubenode.Hooks
	// say reports progress through the apply's Step hook.
	say func(node, msg string)
	// stageNetwork, when set, puts the network plugin in the cluster
	// before the workers, whose Nodes become Ready only with it.
	stageNetwork func(ctx context.Context) error
}

// kubeSide returns the Kubernetes side of applying pl through cs (nil
// when no controlplane node was reachable), and hooks whose Step calls are
// serialized with the side's own progress lines (execute serializes its
// own calls only).
func (s *Session) kubeSide(pl *Planned, cs kubernetes.Interface, h execute.Hooks) (*kubeSide, execute.Hooks) {
	if step := h.Step; step != nil {
		var mu sync.Mutex
		h.Step = func(node, msg string, err error) {
			mu.Lock()
			defer mu.Unlock()
			step(node, msg, err)
		}
	}
	ks := &kubeSide{s: s, pl: pl, cs: cs, say: func(node, msg string) {
		if h.Step != nil {
			h.Step(node, msg, nil)
		}
	}}
	u := s.c.UpgradeStrategy
	if u == nil {
		u = &spec.UpgradeStrategy{}
	}
	cfg := kubenode.Config{
		Client: cs, Machines: kubenode.Machines(s.c),
		Drain: u.Drain != nil && *u.Drain,
		Logs: func(ctx context.Context, node, component string) string {
			e, err := s.tr.Docker(ctx, node)
			if err != nil {
				return ""
			}
			return dockerop.Logs(ctx, e, component)
		},
		Say:           ks.say,
		NetworkPlugin: s.networkPluginSelector(),
	}
	if u.DrainInput != nil {
		cfg.DrainInput = *u.DrainInput
	}
	ks.hooks = kubenode.NewHooks(cfg, pl.Plan)
	return ks, h
}

func (k *kubeSide) beforeNode(ctx context.Context, node string, steps []plan.Step) error {
	if k.cs == nil {
		return nil
	}
	return k.hooks.BeforeNode(ctx, node, steps)
}

func (k *kubeSide) afterNode(ctx context.Context, node string, steps []plan.Step) error {
	if k.cs == nil {
		return nil
	}
	return k.hooks.AfterNode(ctx, node, steps)
}

// kubernetes runs in the Kubernetes phase, once the control plane is
// healthy: the kubelets are authorized (kubenode.AuthorizeKubelets), and
// the API servers to the kubelets (kubenode.AuthorizeAPIServer), the
// network plugin is applied (not waited for: its pods run once the
// kubelets do), the Nodes of the machines that left cluster.yml are
// cordoned, drained and deleted before their containers go, and the
// cluster's state and PKI are saved in the Secret
// kube-system/rigger-cluster-state.
func (k *kubeSide) kubernetes(ctx context.Context) error {
	if k.cs == nil {
		return errors.New("connect to the API server: no controlplane node was reachable when the plan was made")
	}
	if err := kubenode.AuthorizeKubelets(ctx, k.cs); err != nil {
		return fmt.Errorf("authorize the kubelets (ClusterRoleBinding %s): %w", kubenode.NodeBinding, err)
	}
	if err := kubenode.AuthorizeAPIServer(ctx, k.cs); err != nil {
		return fmt.Errorf("authorize the API servers to the kubelets (ClusterRole %s): %w", kubenode.APIServerProxyRole, err)
	}
	if k.stageNetwork != nil {
		if err := k.stageNetwork(ctx); err != nil {
			return err
		}
	}
	in := spec.NodeDrainInput{}
	if u := k.s.c.UpgradeStrategy; u != nil && u.DrainInput != nil {
		in = *u.DrainInput
	}
	for _, addr := range k.pl.Plan.RemovedNodes {
		hostname := ""
		for _, n := range k.s.former {
			if n.Address == addr {
				hostname = n.HostnameOverride
			}
		}
		deleted, err := kubenode.RemoveNode(ctx, k.cs, addr, hostname, in)
		for _, name := range deleted {
			k.say(addr, "deleted Node "+name+" (node removed from cluster.yml)")
		}
		if err != nil {
			return err
		}
	}
	return kubenode.SaveState(ctx, k.cs, k.s.c, k.pl.PKI)
}

// reconcile runs after a successful plan, also an empty one: the Nodes
// of machines that answer and are not Ready repaired and waited for (an
// error names each one that stays so), labels and taints of every Node,
// Nodes left cordoned, and stale Nodes (rigger.stale_nodes).
func (k *kubeSide) reconcile(ctx context.Context) error {
	if k.cs == nil {
		return nil
	}
	_, err := kubenode.Reconcile(ctx, k.cs, kubenode.Machines(k.s.c), k.reconcileOptions())
	return err
}

// repair waits for the Nodes of machines that answer and are not Ready,
// repairing those without a pod network (kubenode.RepairNodes): before the
// add-ons, whose pods would wait for them.
func (k *kubeSide) repair(ctx context.Context) error {
	if k.cs == nil {
		return nil
	}
	return kubenode.RepairNodes(ctx, k.cs, kubenode.Machines(k.s.c), k.reconcileOptions())
}

func (k *kubeSide) reconcileOptions() kubenode.ReconcileOptions {
	return kubenode.ReconcileOptions{
		Policy: k.s.c.Rigger.StaleNodes, Down: k.pl.Unreachable(), NetworkPlugin: k.s.networkPluginSelector(), Say: k.say,
	}
}

// networkPluginSelector selects the network plugin's DaemonSets (the
// add-on's label), for the Nodes' repair; "" without a network plugin.
func (s *Session) networkPluginSelector() string {
	if s.c.Network.Plugin == "" || s.c.Network.Plugin == "none" {
		return ""
	}
	return addons.LabelAddon + "=" + sysaddons.NetworkPlugin
}
