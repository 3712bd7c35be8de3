package simnode

import (
	"context"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// The nodes' part of rigger's plan and apply, as the benchmarks on
// simulated nodes run it: the same decision (decide.Compute) and the same
// executor (execute.Run) over an observation of the nodes, without what
// reads etcd and the Kubernetes API (etcd's members, the Nodes, the
// add-ons' dry run), which the simulation does not run: its state
// directory holds the PKI set, made beforehand, and nothing else.

// Plan observes every node of c through tr (observe.Observe: ping,
// version, the container list and the files of /etc/kubernetes, at most
// rigger.max_parallel nodes at once) and decides the plan as rigger plan
// does (decide.Compute), from a state directory that holds set.
func Plan(ctx context.Context, tr transport.Transport, c *spec.Cluster, set *pki.Set) (*decide.Planned, error) {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Address
	}
	o := observe.Observe(ctx, tr, observe.Request{
		Cluster: c.ClusterName, Nodes: addrs, MaxParallel: c.Rigger.MaxParallel,
		FilesImage: c.SystemImages.Alpine, FilesDir: desired.KubernetesDir,
	})
	return decide.Compute(decide.Input{Spec: c, State: &decide.State{PKI: set}, Observed: o, Now: time.Now()})
}

// Desired is the desired state decide.Compute gives the nodes of c from
// the PKI set: their containers, certificates, kubeconfigs and config
// files, for Converge.
func Desired(c *spec.Cluster, set *pki.Set) (*desired.Cluster, error) {
	pl, err := decide.Compute(decide.Input{Spec: c, State: &decide.State{PKI: set}, Observed: &observe.Cluster{Nodes: map[string]*observe.Node{}},
		Now: time.Now()})
	if err != nil {
		return nil, err
	}
	return pl.Desired, nil
}

// ExecuteOptions are the execute.Options of carrying out pl through tr's
// connections, as an apply gives them: the plan's budgets, the helper
// image, rigger.max_parallel, and maxPlanAge (reconcile.MaxPlanAge: this
// package sits below reconcile and cannot import it). The Kubernetes
// side's phase does nothing here, as the simulation runs no API server.
func ExecuteOptions(tr transport.Transport, c *spec.Cluster, pl *decide.Planned, maxPlanAge time.Duration) execute.Options {
	return execute.Options{
		Desired: pl.Desired, Budgets: pl.Budgets, HelperImage: c.SystemImages.Alpine, MaxParallel: c.Rigger.MaxParallel,
		MaxPlanAge: maxPlanAge,
		Nodes: func(ctx context.Context, node string) (dockerop.Engine, error) {
			return tr.Docker(ctx, node)
		},
		Kubernetes: func(context.Context) error { return nil },
	}
}

// Apply carries out pl by execute.Run with ExecuteOptions and hooks: the nodes'
// part of an apply.
func Apply(ctx context.Context, tr transport.Transport, c *spec.Cluster, pl *decide.Planned, hooks plan.Hooks, maxPlanAge time.Duration) (*execute.Result, error) {
	o := ExecuteOptions(tr, c, pl, maxPlanAge)
	o.Hooks = hooks
	return execute.Run(ctx, pl.Plan, o)
}

// Converge puts on e what rigger's desired state gives node dn of c: its
// containers, labelled as rigger labels them (run-once ones exited), the
// helper image, and the files rigger writes under /etc/kubernetes. A plan
// of a node so converged is empty.
func Converge(e *Engine, c *spec.Cluster, dn desired.Node) {
	for _, dc := range dn.Containers {
		state := container.StateRunning
		if dc.RunOnce {
			state = container.StateExited
		}
		e.Add(Container{Name: dc.Name, Image: dc.Image, Labels: dc.Labels, Binds: dc.Binds,
			Entrypoint: dc.Entrypoint, Cmd: dc.Args, Env: dc.Env, State: state})
	}
	e.AddImage(c.SystemImages.Alpine)
	for p, content := range dn.Files {
		e.WriteFile(p, content)
	}
}
