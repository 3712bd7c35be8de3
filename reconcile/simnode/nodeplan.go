package simnode

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"

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
// simulated nodes run it: the part of reconcile.Session's plan and apply
// that reads and changes the nodes, without what reads etcd and the
// Kubernetes API (etcd's members, the Nodes, the add-ons' dry run), which
// the simulation does not run, and without the state directory's PKI
// resolution (the PKI set is made beforehand and given).

// Desired is what Session.compute decides for the nodes of c: the desired
// state with each node's certificates and kubeconfigs (pki.NodeFiles, from
// set) and config files (desired.ConfigFiles).
func Desired(c *spec.Cluster, set *pki.Set) (*desired.Cluster, error) {
	d, err := desired.Build(c)
	if err != nil {
		return nil, err
	}
	req := pki.RequestFor(c)
	nodes := make(map[string]pki.Node, len(req.Nodes))
	for _, r := range req.Nodes {
		nodes[r.Address] = r
	}
	for i := range d.Nodes {
		n := &d.Nodes[i]
		files, err := pki.NodeFiles(set, req, nodes[n.Address])
		if err != nil {
			return nil, err
		}
		conf, err := desired.ConfigFiles(c, n)
		if err != nil {
			return nil, err
		}
		for p, b := range conf {
			files[p] = b
		}
		n.Files, n.Reload = files, map[string]string{}
	}
	return d, nil
}

// Checks are the checks Session.compute makes before plan.Compute.
func Checks(c *spec.Cluster, d *desired.Cluster, o *observe.Cluster) error {
	for _, err := range []error{plan.CheckDowngrade(d, o), plan.CheckSkippedMinor(d, o), plan.CheckSkew(d),
		plan.CheckEtcdUpgrade(d, o), plan.CheckStoredAPIs(o), plan.CheckDocker(c, o, false)} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Plan observes every node of c through tr (observe.Observe: ping,
// version, the container list and the files of /etc/kubernetes, at most
// rigger.max_parallel nodes at once), builds the desired state (Desired),
// makes the plan's checks and computes the plan.
func Plan(ctx context.Context, tr transport.Transport, c *spec.Cluster, set *pki.Set) (*desired.Cluster, *observe.Cluster, *plan.Plan, error) {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Address
	}
	o := observe.Observe(ctx, tr, observe.Request{
		Cluster: c.ClusterName, Nodes: addrs, MaxParallel: c.Rigger.MaxParallel,
		FilesImage: c.SystemImages.Alpine, FilesDir: desired.KubernetesDir,
	})
	d, err := Desired(c, set)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("desired state: %w", err)
	}
	if err := Checks(c, d, o); err != nil {
		return nil, nil, nil, err
	}
	return d, o, plan.Compute(d, o), nil
}

// Apply carries out p by execute.Run through tr's connections: the nodes'
// part of an apply (the Kubernetes side's phase, which reads the API
// server, does nothing here). maxPlanAge is reconcile.MaxPlanAge, as an
// apply gives it (this package sits below reconcile and cannot import it).
func Apply(ctx context.Context, tr transport.Transport, c *spec.Cluster, d *desired.Cluster, p *plan.Plan, hooks execute.Hooks, maxPlanAge time.Duration) (*execute.Result, error) {
	return execute.Run(ctx, p, execute.Options{
		Desired: d, HelperImage: c.SystemImages.Alpine, MaxParallel: c.Rigger.MaxParallel,
		MaxPlanAge: maxPlanAge, Hooks: hooks,
		Nodes: func(ctx context.Context, node string) (dockerop.Engine, error) {
			return tr.Docker(ctx, node)
		},
		Kubernetes: func(context.Context) error { return nil },
	})
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
