package simnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sync/errgroup"

	"github.com/docker/docker/api/types/container"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/spec"
)

// The one-flag change BenchmarkScaleSimulated rolls out: a kubelet
// extra_args entry (services.kubelet.extra_args in cluster.yml), set to
// each value in turn, so that every rollout replaces every node's kubelet
// (the first one from cluster.yml without the flag).
const rolloutFlag = "event-qps"

var rolloutValues = [2]string{"6", "7"}

// rolloutRuns is how many of the scalePairs rounds of each size also roll
// the flag out (beside its floor); the median is reported.
const rolloutRuns = 3

// rolloutMinUptime is execute.Options.MinUptime in the rollouts: how long a
// replaced kubelet must run before its node counts as done. A real apply
// waits dockerop.MinUptime (10 s) for each batch; this is a wait, not
// work, and 10 s times a dozen batches would hide what rigger does.
// dockerop.WaitUp inspects the container every 0.5 s: it sees 0.5 s of
// uptime at its first or second inspection.
const rolloutMinUptime = 250 * time.Millisecond

// rollout rolls the flag out to every node (its next value) through
// rigger's code, measured, then checks, outside the measure, that every
// node runs its kubelet with the new flag and that the next plan is a
// no-op. It returns the measure and the rollout's number of batches.
func (sc *scaleCluster) rollout(ctx context.Context, b *testing.B) (run, int) {
	b.Helper()
	next, value := sc.flagged[sc.rollouts%2], rolloutValues[sc.rollouts%2]
	var batches int
	r, err := sc.measure(func() (err error) {
		batches, err = sc.rolloutTo(ctx, next)
		return err
	})
	if err != nil {
		b.Fatalf("roll %s=%s out: %v", rolloutFlag, value, err)
	}
	sc.current = next
	sc.rollouts++
	if err := sc.checkRollout(ctx, next, value); err != nil {
		b.Fatalf("after the rollout of %s=%s: %v", rolloutFlag, value, err)
	}
	return r, batches
}

// rolloutTo is the benchmarked rollout: the nodes' part of `rigger apply`
// of c, whose only change is the kubelet's flag. A transport built from
// c, every node observed and the plan decided (as observePlan:
// decide.Compute, the batch size resolved from
// upgrade_strategy.max_unavailable_worker, its default 10 %, with it), the
// plan checked to replace every node's kubelet and nothing else, and
// carried out by execute.Run with the options an apply gives it
// (simnode.ExecuteOptions) and rigger's health checker (reach.Services.Checker) over
// the same connections: the nodes in batches (the kubelet is in the
// worker phase on every node, the control-plane node's too, the first in
// cluster.yml's order), each node's new kubelet probed on its /healthz
// (127.0.0.1:10248 through the SSH connection) and watched until it has
// run rolloutMinUptime, before the next batch. It returns the number of
// batches.
//
// Left out, because the simulation runs no API server and no etcd: the
// cordon and uncordon of each node and its Node Ready (execute.Options'
// BeforeNode and AfterNode, kubenode's side), the Kubernetes objects'
// phase (Options.Kubernetes, a no-op here), the add-ons; and, as in the
// no-op apply, the lock, the Lease and the state directory's writes.
func (sc *scaleCluster) rolloutTo(ctx context.Context, c *spec.Cluster) (int, error) {
	log := slog.New(slog.DiscardHandler)
	tr, err := reach.Transport(c, nil, nil, false, nil, log)
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	pl, err := sc.plan(ctx, c, tr)
	if err != nil {
		return 0, err
	}
	p := pl.Plan
	if err := rolloutPlan(p, len(c.Nodes)); err != nil {
		return 0, err
	}
	chk, err := reach.Services{Transport: tr, Nodes: c.Nodes, Log: log}.Checker(sc.set)
	if err != nil {
		return 0, err
	}
	var healthy atomic.Int64
	o := simnode.ExecuteOptions(tr, c, pl, reconcile.MaxPlanAge)
	o.Health, o.MinUptime = chk, rolloutMinUptime
	o.Hooks = plan.Hooks{Step: func(_, msg string, err error) {
		if err == nil && strings.HasPrefix(msg, desired.Kubelet+" healthy ") {
			healthy.Add(1)
		}
	}}
	res, err := execute.Run(ctx, p, o)
	if err != nil {
		return 0, err
	}
	if len(res.Done) != len(p.Steps) || len(res.NotRun) > 0 || len(res.Failed()) > 0 {
		return 0, fmt.Errorf("execute ran %d of %d steps (%d not run, %d failed)", len(res.Done), len(p.Steps), len(res.NotRun), len(res.Failed()))
	}
	if int(healthy.Load()) != len(c.Nodes) {
		return 0, fmt.Errorf("execute found %d kubelets healthy, want %d: its health checks did not all run", healthy.Load(), len(c.Nodes))
	}
	return (len(c.Nodes) + pl.Budgets.WorkerBatch - 1) / pl.Budgets.WorkerBatch, nil
}

// rolloutPlan checks that p replaces the kubelet of each of its n nodes,
// in the worker phase (the kubelet's on every node, the control-plane
// node's too: plan.PhaseWorker), and does nothing else.
func rolloutPlan(p *plan.Plan, n int) error {
	if len(p.Unreachable) > 0 {
		return fmt.Errorf("unreachable nodes: %v", p.UnreachableNodes())
	}
	nodes := map[string]bool{}
	for _, s := range p.Steps {
		if s.Component != desired.Kubelet || s.Action != plan.Replace || s.Phase != plan.PhaseWorker || nodes[s.Node] {
			return fmt.Errorf("the plan does more than replace each node's kubelet in the worker phase: %+v (phase %s)",
				firstStep(&plan.Plan{Steps: []plan.Step{s}}), s.Phase)
		}
		nodes[s.Node] = true
	}
	if len(nodes) != n {
		return fmt.Errorf("the plan replaces the kubelet of %d nodes, want %d", len(nodes), n)
	}
	return nil
}

// checkRollout checks, through a transport of its own, that every node
// of c runs a kubelet with the flag at value, and that the plan of c is
// now a no-op.
func (sc *scaleCluster) checkRollout(ctx context.Context, c *spec.Cluster, value string) error {
	tr, err := reach.Transport(c, nil, nil, false, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer tr.Close()
	want := "--" + rolloutFlag + "=" + value
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.Rigger.MaxParallel)
	for _, n := range c.Nodes {
		g.Go(func() error {
			cli, err := tr.Docker(gctx, n.Address)
			if err != nil {
				return err
			}
			ci, err := cli.ContainerInspect(gctx, desired.Kubelet)
			if err != nil {
				return err
			}
			if ci.State == nil || !ci.State.Running || ci.Config == nil || !slices.Contains(ci.Config.Cmd, want) {
				return fmt.Errorf("node %s: the kubelet does not run with %s", n.Address, want)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	pl, err := sc.plan(ctx, c, tr)
	if err != nil {
		return err
	}
	if p := pl.Plan; !p.Empty() || len(p.Unreachable) > 0 {
		return fmt.Errorf("the next plan is not a no-op: %d steps (first %+v), unreachable %v", len(p.Steps), firstStep(p), p.Unreachable)
	}
	return nil
}

// rolloutFloor replaces every node's kubelet without rigger's logic: the
// N SSH connections set up (the same key and known_hosts,
// spec.DefaultMaxParallel at once), then the nodes in batches as the
// rollout makes them, every node of a batch at once, each with the fewest Docker API calls that replace a container
// (stop and remove the old, create and start the new, with the spec rigger
// gives it) and one GET of the new kubelet's /healthz through the same
// connection. The new kubelet is the one the nodes run (the current
// cluster's): the floor changes no flag, so that the cluster stays as the
// rollout finds it.
func (sc *scaleCluster) rolloutFloor(ctx context.Context, batches [][]int, bodies [][]byte) error {
	hostKeys, err := knownhosts.New(sc.knownHosts)
	if err != nil {
		return err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(sc.signer)}, HostKeyCallback: hostKeys,
		Timeout: 30 * time.Second}
	clients := make([]*ssh.Client, len(sc.c.Nodes))
	defer func() {
		for _, cli := range clients {
			if cli != nil {
				cli.Close()
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(spec.DefaultMaxParallel)
	for i, n := range sc.c.Nodes {
		g.Go(func() (err error) {
			clients[i], err = ssh.Dial("tcp", net.JoinHostPort(n.Address, n.Port), cfg)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, batch := range batches {
		g, gctx = errgroup.WithContext(ctx)
		for _, i := range batch {
			g.Go(func() error { return floorReplace(gctx, clients[i], bodies[i]) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// floorReplace replaces the kubelet over cli: stop, remove, create (body),
// start, then one GET of its /healthz.
func floorReplace(ctx context.Context, cli *ssh.Client, body []byte) error {
	docker := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return cli.Dial("unix", simnode.DefaultDockerSocket)
	}}}
	defer docker.CloseIdleConnections()
	call := func(method, path string, body []byte, want ...int) error {
		req, err := http.NewRequestWithContext(ctx, method, "http://docker/v"+simnode.APIVersion+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := docker.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if !slices.Contains(want, resp.StatusCode) {
			return fmt.Errorf("%s %s: %s", method, path, resp.Status)
		}
		return nil
	}
	k := "/containers/" + desired.Kubelet
	for _, c := range []struct {
		method, path string
		body         []byte
		want         []int
	}{
		{http.MethodPost, k + "/stop?t=10", nil, []int{http.StatusNoContent, http.StatusNotModified}},
		{http.MethodDelete, k, nil, []int{http.StatusNoContent}},
		{http.MethodPost, "/containers/create?name=" + desired.Kubelet, body, []int{http.StatusCreated}},
		{http.MethodPost, k + "/start", nil, []int{http.StatusNoContent}},
	} {
		if err := call(c.method, c.path, c.body, c.want...); err != nil {
			return err
		}
	}
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) { return cli.Dial(network, addr) }}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+health.KubeletHealthzPort+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := probe.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New("kubelet /healthz: " + resp.Status)
	}
	return nil
}

// rolloutFloorInput is what the floor is given beforehand: the nodes'
// batches (as rolloutTo's: every node in cluster.yml's order, in batches of
// max_unavailable_worker resolved) and each node's create request of the
// kubelet it runs now.
func (sc *scaleCluster) rolloutFloorInput() ([][]int, [][]byte, error) {
	d, err := desired.Build(sc.current)
	if err != nil {
		return nil, nil, err
	}
	b, err := plan.ResolveBudgets(d, nil, sc.current.UpgradeStrategy)
	if err != nil {
		return nil, nil, err
	}
	size := b.WorkerBatch
	nodes := make([]int, len(d.Nodes))
	for i := range nodes {
		nodes[i] = i
	}
	batches := slices.Collect(slices.Chunk(nodes, size))
	bodies := make([][]byte, len(d.Nodes))
	for i, n := range d.Nodes {
		dc, ok := n.Container(desired.Kubelet)
		if !ok {
			return nil, nil, fmt.Errorf("node %s has no kubelet", n.Address)
		}
		if bodies[i], err = json.Marshal(container.CreateRequest{
			Config: &container.Config{Image: dc.Image, Entrypoint: dc.Entrypoint, Cmd: dc.Args, Env: dc.Env, User: dc.User, Labels: dc.Labels},
			HostConfig: &container.HostConfig{Binds: dc.Binds, NetworkMode: container.NetworkMode(dc.NetworkMode),
				PidMode: container.PidMode(dc.PidMode), Privileged: dc.Privileged, VolumesFrom: dc.VolumesFrom,
				RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(dc.RestartPolicy)}},
		}); err != nil {
			return nil, nil, err
		}
	}
	return batches, bodies, nil
}
