package kubenode

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

// SideInput is what the Kubernetes side of one apply works with.
type SideInput struct {
	// Client is the API server's; nil when no controlplane node answered.
	Client  kubernetes.Interface
	Cluster *spec.Cluster
	Plan    *plan.Plan
	// PKI is the plan's, kept in the state Secret.
	PKI *pki.Set
	// Former are the nodes of the last apply that cluster.yml no longer
	// has: the plan's removed nodes are among them.
	Former []spec.Node
	// Down are the nodes the plan could not look at.
	Down []string
	// Delete are the stale Nodes the plan deletes, by name
	// (ReconcileOptions.Delete).
	Delete []string
	// Logs, NetworkPlugin, NodeSubnets and Say are as in Config.
	Logs          func(ctx context.Context, node, component string) string
	NetworkPlugin string
	NodeSubnets   bool
	Say           func(node, msg string)
	// StageNetwork, when set, puts the network plugin in the cluster
	// before the workers, whose Nodes become Ready only with it.
	StageNetwork func(ctx context.Context) error
	// Self is rigger's own pod in the cluster (Config.Self).
	Self *observe.Self
}

// Side is the Kubernetes side of the nodes during one apply: cordon and
// drain around a node's changes, the wait for its Node to be Ready, the
// Nodes of removed machines deleted, the state Secret, and, once the plan
// ran, labels, taints and stale Nodes. Without a client it does nothing,
// but for Kubernetes, which needs one.
type Side struct {
	in    SideInput
	hooks *Hooks
}

// NewSide is the Kubernetes side of applying in.Plan.
func NewSide(in SideInput) *Side {
	u := in.Cluster.UpgradeStrategy
	if u == nil {
		u = &spec.UpgradeStrategy{}
	}
	cfg := Config{
		Client: in.Client, Machines: Machines(in.Cluster),
		Drain: u.Drain != nil && *u.Drain,
		Logs:  in.Logs, Say: in.Say, NetworkPlugin: in.NetworkPlugin, NodeSubnets: in.NodeSubnets, Self: in.Self,
		ControllerLeader: electsLeader(in.Cluster.Services.KubeController.ExtraArgs),
	}
	if u.DrainInput != nil {
		cfg.DrainInput = *u.DrainInput
	}
	return &Side{in: in, hooks: NewHooks(cfg, in.Plan)}
}

// electsLeader says whether kube-controller-managers with extraArgs
// elect a leader: RKE's options and the controller manager's own default
// say leader-elect=true.
func electsLeader(extraArgs map[string]string) bool {
	v, ok := extraArgs["leader-elect"]
	if !ok {
		return true
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// BeforeNode runs before a node's changes (Hooks.BeforeNode).
func (k *Side) BeforeNode(ctx context.Context, node string, steps []plan.Step) error {
	if k.in.Client == nil {
		return nil
	}
	return k.hooks.BeforeNode(ctx, node, steps)
}

// AfterNode runs once a node's changed components are healthy
// (Hooks.AfterNode).
func (k *Side) AfterNode(ctx context.Context, node string, steps []plan.Step) error {
	if k.in.Client == nil {
		return nil
	}
	return k.hooks.AfterNode(ctx, node, steps)
}

// Kubernetes runs in the Kubernetes phase, once the control plane is
// healthy: the kubelets are authorized (AuthorizeKubelets), and the API
// servers to the kubelets (AuthorizeAPIServer), the network plugin is
// applied (not waited for: its pods run once the kubelets do), the Nodes
// of the machines that left cluster.yml are cordoned, drained and deleted
// before their containers go, and the cluster's state and PKI are saved in
// the Secret kube-system/rigger-cluster-state.
func (k *Side) Kubernetes(ctx context.Context) error {
	cs := k.in.Client
	if cs == nil {
		return errors.New("connect to the API server: no controlplane node was reachable when the plan was made")
	}
	if err := AuthorizeKubelets(ctx, cs); err != nil {
		return fmt.Errorf("authorize the kubelets (ClusterRoleBinding %s): %w", NodeBinding, err)
	}
	if err := AuthorizeAPIServer(ctx, cs); err != nil {
		return fmt.Errorf("authorize the API servers to the kubelets (ClusterRole %s): %w", APIServerProxyRole, err)
	}
	if k.in.StageNetwork != nil {
		if err := k.in.StageNetwork(ctx); err != nil {
			return err
		}
	}
	in := spec.NodeDrainInput{}
	if u := k.in.Cluster.UpgradeStrategy; u != nil && u.DrainInput != nil {
		in = *u.DrainInput
	}
	for _, addr := range k.in.Plan.RemovedNodes {
		hostname := ""
		for _, n := range k.in.Former {
			if n.Address == addr {
				hostname = n.HostnameOverride
			}
		}
		deleted, err := RemoveNode(ctx, cs, addr, hostname, in, k.in.Self)
		for _, name := range deleted {
			k.in.Say(addr, "deleted Node "+name+" (node removed from cluster.yml)")
		}
		if err != nil {
			return err
		}
	}
	return SaveState(ctx, cs, k.in.Cluster, k.in.PKI)
}

// Reconcile runs after a successful plan, also an empty one: the Nodes of
// machines that answer and are not Ready repaired and waited for (an error
// names each one that stays so), labels and taints of every Node, Nodes
// left cordoned, and the stale Nodes the plan deletes (Delete).
func (k *Side) Reconcile(ctx context.Context) error {
	if k.in.Client == nil {
		return nil
	}
	_, err := Reconcile(ctx, k.in.Client, Machines(k.in.Cluster), k.reconcileOptions())
	return err
}

// Repair waits for the Nodes of machines that answer and are not Ready,
// repairing those without a pod network (RepairNodes): before the add-ons,
// whose pods would wait for them.
func (k *Side) Repair(ctx context.Context) error {
	if k.in.Client == nil {
		return nil
	}
	return RepairNodes(ctx, k.in.Client, Machines(k.in.Cluster), k.reconcileOptions())
}

func (k *Side) reconcileOptions() ReconcileOptions {
	return ReconcileOptions{Delete: k.in.Delete, Down: k.in.Down, NetworkPlugin: k.in.NetworkPlugin, NodeSubnets: k.in.NodeSubnets, Say: k.in.Say}
}
