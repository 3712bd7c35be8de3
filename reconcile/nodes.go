package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/plan"
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
}

// kubeSide returns the Kubernetes side of applying pl, and hooks whose
// Step calls are serialized with the side's own progress lines (execute
// serializes its own calls only).
func (s *Session) kubeSide(pl *Planned, h execute.Hooks) (*kubeSide, execute.Hooks) {
	if step := h.Step; step != nil {
		var mu sync.Mutex
		h.Step = func(node, msg string, err error) {
			mu.Lock()
			defer mu.Unlock()
			step(node, msg, err)
		}
	}
	ks := &kubeSide{s: s, pl: pl, say: func(node, msg string) {
		if h.Step != nil {
			h.Step(node, msg, nil)
		}
	}}
	if cs, err := s.KubeClient(pl.PKI, pl.Observed); err == nil {
		ks.cs = cs
	}
	u := s.c.UpgradeStrategy
	if u == nil {
		u = &spec.UpgradeStrategy{}
	}
	cfg := kubenode.Config{
		Client: ks.cs, Machines: kubenode.Machines(s.c),
		Drain: u.Drain != nil && *u.Drain,
		Logs: func(ctx context.Context, node, component string) string {
			e, err := s.tr.Docker(ctx, node)
			if err != nil {
				return ""
			}
			return dockerop.Logs(ctx, e, component)
		},
		Say: ks.say,
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
// healthy: the kubelets are authorized (kubenode.AuthorizeKubelets), the
// Nodes of the machines that left cluster.yml are cordoned,
// drained and deleted before their containers go, and the cluster's state
// and PKI are saved in the Secret kube-system/rigger-cluster-state.
func (k *kubeSide) kubernetes(ctx context.Context) error {
	if k.cs == nil {
		return errors.New("connect to the API server: no controlplane node was reachable when the plan was made")
	}
	if err := kubenode.AuthorizeKubelets(ctx, k.cs); err != nil {
		return fmt.Errorf("authorize the kubelets (ClusterRoleBinding %s): %w", kubenode.NodeBinding, err)
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

// reconcile runs after a successful plan, also an empty one: labels and
// taints of every Node, Nodes left cordoned, and stale Nodes
// (rigger.stale_nodes).
func (k *kubeSide) reconcile(ctx context.Context) error {
	if k.cs == nil {
		return nil
	}
	_, err := kubenode.Reconcile(ctx, k.cs, kubenode.Machines(k.s.c), k.s.c.Rigger.StaleNodes, k.say)
	return err
}

// planNodes asks the API server what the Nodes need (package kubenode):
// it adds to the plan a restart of the kubelet of each node of cluster.yml
// whose Node is missing while the kubelet runs (the Node was deleted: a
// kubelet registers only when it starts), and sets pl.NodeChanges (labels,
// taints, stale Nodes) and pl.NotReady. Without an API server to ask, the
// plan stays as it is.
func (s *Session) planNodes(ctx context.Context, pl *Planned) {
	cs, err := s.KubeClient(pl.PKI, pl.Observed)
	if err != nil {
		pl.NodesErr = err
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		pl.NodesErr = fmt.Errorf("list Nodes: %w", err)
		return
	}
	machines := kubenode.Machines(s.c)
	l := kubenode.Link(machines, nodes.Items)
	pl.Nodes, pl.Link = nodes.Items, l
	missing := kubenode.MissingNodes(l, kubenode.KubeletRunning(pl.Observed))
	kubenode.RestartMissing(pl.Plan, pl.Desired, pl.Observed, missing)
	pl.NodeChanges = kubenode.Changes(machines, l, s.c.Rigger.StaleNodes)
	pl.NotReady = kubenode.NotReady(machines, l)
}
