// Package execute carries out a plan on the nodes, phase by phase, in the
// order that keeps a cluster serving (see Run). It decides nothing about
// what must change: that is the plan's job. It decides only how fast and in
// which order, and stops when something does not come up healthy.
package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
)

// Nodes gives the Docker engine of a node; transport.Transport's Docker
// method fits it.
type Nodes func(ctx context.Context, node string) (dockerop.Engine, error)

// Health probes components; *health.Checker implements it. It exists so
// that the order and batching of Run can be tested without a cluster.
type Health interface {
	Wait(ctx context.Context, t health.Target, timeout time.Duration) error
}

var _ Health = (*health.Checker)(nil)

// Options are the settings Run needs besides the plan.
type Options struct {
	// Desired is the cluster the plan was computed for: node roles,
	// internal addresses and files.
	Desired *desired.Cluster
	Nodes   Nodes
	Health  Health
	// Hooks receive progress as Run makes it, one call at a time (Run
	// serializes them).
	Hooks plan.Hooks
	// HelperImage is the image of the helper containers that write and
	// clean files (system_images.alpine).
	HelperImage string
	// MaxParallel bounds the nodes worked on at once where order does not
	// matter (files, removed nodes): rigger.max_parallel.
	MaxParallel int
	// Budgets are the plan's unavailability budgets (plan.ResolveBudgets,
	// decided with the plan): WorkerBatch is how many worker nodes change
	// at once (upgrade_strategy.max_unavailable_worker, resolved to a
	// count; 1 when zero); WorkersBlocked and ControlPlaneBlocked, when
	// set, stop their phase before it changes anything, with the reason:
	// the budget is used up by nodes already down.
	Budgets plan.Budgets
	// HealthTimeout bounds the wait for one component to become healthy,
	// and for a container Run started to stay up.
	HealthTimeout time.Duration
	// MinUptime is how long a container Run started (created, replaced,
	// restarted) must run without a restart before its component counts as
	// up (dockerop.WaitUp; dockerop.MinUptime when unset). It is measured
	// from the step, alongside the health checks, so it adds time only to
	// a component that is healthy sooner.
	MinUptime time.Duration
	// BeforeNode and AfterNode, when set, wrap the changes of each node in
	// the control-plane and worker phases: BeforeNode runs before its first
	// step (cordon, drain), AfterNode once its changed components are
	// healthy (the Node Ready, uncordon). An error stops the phase as a
	// failed step does.
	BeforeNode, AfterNode func(ctx context.Context, node string, steps []plan.Step) error
	// Snapshot, when set, takes a snapshot of etcd. It runs once, before
	// the first step of a plan with a Kubernetes upgrade (Plan.Upgrade),
	// else before the first membership change or etcd member replacement
	// of a running cluster. Its error stops the run before anything it
	// guards changes.
	Snapshot func(ctx context.Context) error
	// WriteAgain writes again every object of one of the plan's
	// Plan.WriteAgain resources (storedapi.WriteAgain) and returns how
	// many it wrote. It runs for each of them after the upgrade's
	// snapshot, before anything changes; its error stops the run there.
	WriteAgain func(ctx context.Context, w plan.WriteAgain) (int, error)
	// Etcd connects to the running etcd cluster, for the plan's membership
	// changes (AddMember, RemoveMember); called at most once, when needed.
	Etcd func(ctx context.Context) (Membership, error)
	// Kubernetes, when set, runs once the control plane is healthy and
	// before the workers change: the API objects the nodes need (the
	// kubelets' authorization, the network plugin).
	Kubernetes func(ctx context.Context) error
	// Addons, when set, runs after the workers: the add-ons applied and
	// waited for (by the caller, which keeps what it applied). Its error
	// is Result.AddonsErr.
	Addons func(ctx context.Context) error
	// MaxPlanAge is how old a plan's observation may be (zero: no limit).
	MaxPlanAge time.Duration
	// Now gives the time (nil: time.Now).
	Now func() time.Time
	// Timeline, when set, records each step, each wait for a component to
	// be healthy, and each node's BeforeNode and AfterNode (rigger apply
	// --timings): what waits on what.
	Timeline *timeline.Timeline
}

// DefaultHealthTimeout is Options.HealthTimeout when unset: an API server
// on a busy node takes a minute to answer after start.
const DefaultHealthTimeout = 3 * time.Minute

// Outcome of one step.
type Outcome struct {
	Step plan.Step
	// Err is nil when the step (and the health check after it) succeeded.
	Err      error
	Duration time.Duration
}

// Result is what Run did: every step it ran, in order, and those it did
// not get to.
type Result struct {
	Done   []Outcome
	NotRun []plan.Step
	// AddonsErr is the add-ons phase's failure. It does not stop the run
	// (the add-ons are not what the rest of the cluster stands on), and
	// it is not Run's error: the caller joins it to its own.
	AddonsErr error
	Duration  time.Duration
}

// Failed returns the outcomes that failed.
func (r *Result) Failed() []Outcome {
	var out []Outcome
	for _, o := range r.Done {
		if o.Err != nil {
			out = append(out, o)
		}
	}
	return out
}

// StaleError is a plan whose observation is older than Options.MaxPlanAge.
type StaleError struct {
	Age, Max time.Duration
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("the plan was computed from nodes observed %s ago (at most %s allowed): plan again",
		e.Age.Round(time.Second), e.Max)
}

// Run carries out p:
//
//  1. files: every node's changed files, nodes in parallel;
//  2. etcd: a new cluster's members all at once (etcd needs a quorum to
//     answer), then every member healthy; otherwise one member at a time,
//     each healthy before the next;
//  3. API servers, in a Kubernetes upgrade only (plan.PhaseAPIServer): one
//     node at a time, each healthy before the next;
//  4. control plane: the nodes where it is only created (nothing of it
//     runs there yet) all at once, then one node at a time, its API
//     server (but in an upgrade), controller manager and scheduler
//     healthy before the next node;
//  5. workers: the nodes where they are only created all at once, then
//     batches of Budgets.WorkerBatch nodes, each node's kubelet (and
//     nginx-proxy) healthy before the next batch;
//  6. add-ons (Options.Addons);
//  7. removed nodes: containers removed and rigger's files cleaned, nodes
//     in parallel.
//
// A plan with a Kubernetes upgrade takes a snapshot (Options.Snapshot)
// before anything, then writes again the objects its new minor could not
// read (Options.WriteAgain); otherwise a snapshot is taken before etcd's
// membership or members change.
//
// It stops at the first failure (the nodes of a worker batch finish their
// own steps) and between steps when ctx ends; a failure of the add-ons is
// Result.AddonsErr and stops nothing. The result always lists what was
// done and what was not; the error joins every step's error.
func Run(ctx context.Context, p *plan.Plan, o Options) (*Result, error) {
	return run(ctx, p, o, nil)
}

// nodeOps are the changes run makes to nodes. Tests replace them to check
// order and batching without nodes; nil means the real ones.
type nodeOps struct {
	apply func(context.Context, plan.Step) error
	clean func(ctx context.Context, node string) error
}

func run(ctx context.Context, p *plan.Plan, o Options, ops *nodeOps) (*Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = DefaultHealthTimeout
	}
	if o.MinUptime <= 0 {
		o.MinUptime = dockerop.MinUptime
	}
	if o.Budgets.WorkerBatch <= 0 {
		o.Budgets.WorkerBatch = 1
	}
	start := o.Now()
	r := &runner{o: o, res: &Result{}}
	if ops == nil {
		ops = &nodeOps{apply: r.apply, clean: r.cleanFiles}
	}
	r.ops = *ops
	if age := start.Sub(p.ObservedAt); o.MaxPlanAge > 0 && age > o.MaxPlanAge {
		r.res.NotRun = slices.Clone(p.Steps)
		return r.res, &StaleError{Age: age, Max: o.MaxPlanAge}
	}
	byPhase := map[plan.Phase][]plan.Step{}
	for _, s := range p.Steps {
		byPhase[s.Phase] = append(byPhase[s.Phase], s)
	}
	r.removed, r.first, r.etcdNew, r.etcdLogs = p.RemovedNodes, p.First, p.NewEtcd, p.SnapshotEtcdLogs
	r.leaving = leavingMembers(p.Steps)
	r.unreachable = map[string]bool{}
	for _, u := range p.Unreachable {
		r.unreachable[u.Node] = true
	}
	phases := []struct {
		phase plan.Phase
		title string
		run   func(context.Context, []plan.Step) error
	}{
		{plan.PhaseFiles, "Write certificates and files", r.files},
		{plan.PhaseEtcd, "etcd", r.etcd},
		{plan.PhaseAPIServer, "API servers of the Kubernetes upgrade, one node at a time, before any other component", r.controlPlane},
		{plan.PhaseControlPlane, "Control plane, one node at a time (new ones at once)", r.controlPlane},
		{phaseKubernetes, "Kubernetes objects", r.kubernetes},
		{plan.PhaseWorker, fmt.Sprintf("Workers, %d node(s) at a time (new ones at once)", o.Budgets.WorkerBatch), r.workers},
		{phaseAddons, "Add-ons", r.addons},
		{plan.PhaseRemovedNodes, "Clean nodes removed from cluster.yml", r.removedNodes},
	}
	var err error
	if p.Upgrade != nil {
		err = r.snapshot(ctx, "snapshot before the Kubernetes upgrade", "upgrading Kubernetes")
		if err == nil {
			err = r.writeAgain(ctx, p.WriteAgain)
		}
	}
	for i, ph := range phases {
		steps := byPhase[ph.phase]
		if len(steps) == 0 && !r.runsEmpty(ph.phase, p) {
			continue
		}
		if err == nil {
			err = cmp.Or(ctx.Err(), r.failedWatch())
		}
		if err != nil {
			for _, later := range phases[i:] {
				r.res.NotRun = append(r.res.NotRun, byPhase[later.phase]...)
			}
			break
		}
		if o.Hooks.Phase != nil {
			o.Hooks.Phase(ph.phase, ph.title)
		}
		crashpoint.Reach(crashpoint.PhaseStart(string(ph.phase)))
		if err = ph.run(ctx, steps); err == nil {
			crashpoint.Reach(crashpoint.PhaseDone(string(ph.phase)))
		}
	}
	if err == nil {
		err = r.settle(ctx)
	}
	if c, ok := r.etcdClient.(io.Closer); ok {
		c.Close()
	}
	r.stopWatches()
	r.res.NotRun = append(r.res.NotRun, r.notRun()...)
	r.res.Duration = o.Now().Sub(start)
	return r.res, err
}

// The phases of Options.WriteAgain, Options.Kubernetes and
// Options.Addons; they have no steps.
const (
	phaseWriteAgain plan.Phase = "write-again"
	phaseKubernetes plan.Phase = "kubernetes"
	phaseAddons     plan.Phase = "addons"
)

// writeAgain writes the objects of ws again (Options.WriteAgain), one
// resource after the other.
func (r *runner) writeAgain(ctx context.Context, ws []plan.WriteAgain) error {
	if len(ws) == 0 {
		return nil
	}
	if r.o.Hooks.Phase != nil {
		r.o.Hooks.Phase(phaseWriteAgain, "Objects written again at their storage version, before the upgrade")
	}
	for _, w := range ws {
		if r.o.WriteAgain == nil {
			return fmt.Errorf("the plan writes the objects of %s again before the upgrade, and the apply cannot", w.Resource)
		}
		n, err := r.o.WriteAgain(ctx, w)
		r.say("kubernetes", fmt.Sprintf("%s: %d written again through %s", w.Resource, n, w.At), err)
		if err != nil {
			return fmt.Errorf("write the objects of %s again before upgrading Kubernetes (no node was changed): %w", w.Resource, err)
		}
	}
	return nil
}

// runsEmpty reports whether a phase without steps runs: the cleaning of
// removed nodes that run no container, and the Kubernetes objects of a
// plan that changes something.
func (r *runner) runsEmpty(ph plan.Phase, p *plan.Plan) bool {
	switch ph {
	case plan.PhaseRemovedNodes:
		return len(r.removed) > 0
	case phaseKubernetes:
		return r.o.Kubernetes != nil && !p.Empty()
	case phaseAddons:
		return r.o.Addons != nil
	}
	return false
}

func (r *runner) addons(ctx context.Context, _ []plan.Step) error {
	err := r.o.Addons(ctx)
	r.mu.Lock()
	r.res.AddonsErr = err
	r.mu.Unlock()
	if err != nil {
		r.say("addons", "add-ons applied", err)
	}
	return nil
}

func (r *runner) kubernetes(ctx context.Context, _ []plan.Step) error {
	err := r.o.Kubernetes(ctx)
	r.say("kubernetes", "API objects up to date", err)
	return err
}

// runner holds one Run's progress.
type runner struct {
	o  Options
	mu sync.Mutex
	// hookMu serializes the calls of the hooks.
	hookMu sync.Mutex
	res    *Result
	// ran marks the steps given an outcome, by index key.
	ran map[stepKey]bool
	// pending are steps of started phases not yet run.
	pending []plan.Step
	// removed are the nodes removed from cluster.yml to clean.
	removed []string
	ops     nodeOps
	// first are the nodes whose changes go first (Plan.First).
	first []string
	// etcdNew is set when the plan starts a new etcd cluster (Plan.NewEtcd).
	etcdNew bool
	// etcdClient is the connection of the membership changes.
	etcdClient Membership
	// etcdLogs are the members that save a snapshot of their log before
	// the first of them moves (Plan.SnapshotEtcdLogs); nil once done.
	etcdLogs *plan.SnapshotEtcdLogs
	// learners are the IDs of the members added as learners, by node.
	learners map[string]uint64
	// leaving are the peer URLs of the members the plan removes: the
	// membership changes go to other members first (etcdmember.Via).
	leaving []string
	// unreachable are the nodes the plan could not look at.
	unreachable map[string]bool
	// snapshotted is set once Options.Snapshot ran.
	snapshotted bool
	// up watch the containers the run started until they have stayed up
	// (watchUp); upWG waits for their goroutines.
	up   map[stepKey]*upWatch
	upWG sync.WaitGroup
}

type stepKey struct{ node, component string }

func (r *runner) record(s plan.Step, err error, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Done = append(r.res.Done, Outcome{Step: s, Err: err, Duration: took})
	if r.ran == nil {
		r.ran = map[stepKey]bool{}
	}
	r.ran[stepKey{s.Node, s.Component}] = true
}

// notRun lists the steps of the phases that started but did not finish.
func (r *runner) notRun() []plan.Step {
	var out []plan.Step
	for _, s := range r.pending {
		if !r.ran[stepKey{s.Node, s.Component}] {
			out = append(out, s)
		}
	}
	return out
}

func (r *runner) say(node, msg string, err error) {
	if r.o.Hooks.Step != nil {
		r.hookMu.Lock()
		defer r.hookMu.Unlock()
		r.o.Hooks.Step(node, msg, err)
	}
}

// do runs one step and records it.
func (r *runner) do(ctx context.Context, s plan.Step) error {
	began := r.o.Now()
	end := r.o.Timeline.Begin(fmt.Sprintf("apply %s: %s %s", s.Node, s.Action, s.Component))
	err := ctx.Err()
	if err == nil {
		err = r.ops.apply(ctx, s)
	}
	end()
	r.record(s, err, r.o.Now().Sub(began))
	r.say(s.Node, describe(s), err)
	crashpoint.Reach(crashpoint.Step(string(s.Phase)))
	return err
}

func describe(s plan.Step) string {
	switch s.Action {
	case plan.WriteFiles:
		return fmt.Sprintf("wrote %d file(s) (%s)", len(s.Files), s.Reason)
	case plan.AddMember:
		return fmt.Sprintf("added etcd member %s as a learner", s.Member)
	case plan.RemoveMember:
		return fmt.Sprintf("removed etcd member %s (%s)", s.Member, s.Reason)
	}
	return fmt.Sprintf("%s %s (%s)", past(s.Action), s.Component, s.Reason)
}

func past(a plan.Action) string {
	switch a {
	case plan.Create:
		return "created"
	case plan.Replace:
		return "replaced"
	case plan.Restart:
		return "restarted"
	case plan.Remove:
		return "removed"
	}
	return string(a)
}

// apply does what one step says on its node.
func (r *runner) apply(ctx context.Context, s plan.Step) error {
	// Membership changes go through etcd, not the node (which may be gone).
	switch s.Action {
	case plan.AddMember:
		return r.addMember(ctx, s)
	case plan.RemoveMember:
		return r.removeMember(ctx, s)
	}
	e, err := r.o.Nodes(ctx, s.Node)
	if err != nil {
		return err
	}
	switch s.Action {
	case plan.WriteFiles:
		dn, ok := r.o.Desired.Node(s.Node)
		if !ok {
			return fmt.Errorf("node %s: not in the desired cluster", s.Node)
		}
		files := make(map[string][]byte, len(s.Files))
		for _, p := range s.Files {
			b, ok := dn.Files[p]
			if !ok {
				return fmt.Errorf("node %s: the plan writes %s, which is not a desired file", s.Node, p)
			}
			files[p] = b
		}
		return dockerop.WriteFiles(ctx, e, s.Node, r.o.HelperImage, desired.KubernetesDir, files)
	case plan.Create, plan.Replace, plan.Restart:
		if err := r.startContainer(ctx, e, s); err != nil {
			return err
		}
		r.watchUp(ctx, e, s)
		return nil
	case plan.Remove:
		return dockerop.Remove(ctx, e, s.Node, s.Component)
	}
	return fmt.Errorf("node %s: unknown action %q", s.Node, s.Action)
}

// startContainer creates, replaces or restarts the step's container.
func (r *runner) startContainer(ctx context.Context, e dockerop.Engine, s plan.Step) error {
	switch s.Action {
	case plan.Create:
		args := r.bootstrapArgs(s)
		if _, joining := r.learner(s.Node); joining && s.Component == desired.Etcd {
			var err error
			if args, err = r.joinArgs(ctx, s); err != nil {
				return err
			}
			// A new member starts from an empty data directory: what a
			// member the node had before left there (its etcd role taken
			// away and given back) makes etcd start as that removed member
			// and stop, over and over.
			if err := clean(ctx, e, s.Node, r.o.HelperImage, desired.EtcdHostDataDir); err != nil {
				return fmt.Errorf("node %s: empty %s before the new etcd member starts: %w", s.Node, desired.EtcdHostDataDir, err)
			}
		}
		_, err := dockerop.Create(ctx, e, s.Node, s.After, args)
		return err
	case plan.Replace:
		_, err := dockerop.Replace(ctx, e, s.Node, s.After, r.bootstrapArgs(s), r.stopGrace(ctx, s))
		return err
	case plan.Restart:
		return dockerop.Restart(ctx, e, s.Node, s.Component, r.stopGrace(ctx, s))
	}
	return fmt.Errorf("node %s: unknown action %q", s.Node, s.Action)
}

// bootstrapArgs are the flags etcd reads on its first start. Build gives
// every member those of a new cluster; a member created while others run
// joins the existing cluster instead. (Its data directory decides: when it
// holds the member's data, as after a container was removed by hand, etcd
// ignores these flags.)
func (r *runner) bootstrapArgs(s plan.Step) []string {
	if s.Component != desired.Etcd || s.After == nil {
		return nil
	}
	args := slices.Clone(s.After.BootstrapArgs)
	if !r.etcdNew {
		for i, a := range args {
			if a == "--initial-cluster-state="+desired.InitialClusterNew {
				args[i] = "--initial-cluster-state=" + desired.InitialClusterExisting
			}
		}
	}
	return args
}

// waitHealthy probes the components of a node that Run changed or that the
// next phase depends on, and waits for those whose containers it started
// to hold (dockerop.Hold), or, when strict, to stay up MinUptime
// (watchUp): a component whose container restarts over and over fails,
// also when a probe answered between two restarts. Without strict, the
// watch goes on while the run does (failedWatch, settle).
func (r *runner) waitHealthy(ctx context.Context, node string, components []string, strict bool) error {
	dn, _ := r.o.Desired.Node(node)
	internal := node
	if dn != nil && dn.InternalAddress != "" {
		internal = dn.InternalAddress
	}
	for _, c := range components {
		w := r.watch(node, c)
		probe := health.Probes(c) && r.o.Health != nil
		if !probe && w == nil {
			continue
		}
		began := r.o.Now()
		end := r.o.Timeline.Begin(fmt.Sprintf("apply %s: %s healthy", node, c))
		if w != nil {
			w.arm()
		}
		var err error
		if probe {
			err = r.probe(ctx, health.Target{Node: node, InternalAddress: internal, Component: c}, w)
			if err == nil && w != nil {
				r.healthyFrom(ctx, w)
			}
		}
		if w != nil {
			switch werr, done := w.result(); {
			case err != nil && done && werr != nil:
				err = werr // the crash loop is why the probe failed
			case err == nil && strict:
				err = w.wait(ctx)
			case err == nil:
				err = w.waitHeld(ctx)
			}
			if err != nil {
				r.mu.Lock()
				w.said = true // said here, with the probe's
				r.mu.Unlock()
			}
		}
		var crash *dockerop.CrashLoopError
		if err != nil && !errors.As(err, &crash) {
			err = r.withLogs(ctx, node, c, err)
		}
		end()
		msg := "healthy"
		if !probe {
			msg = "up"
		}
		r.say(node, fmt.Sprintf("%s %s (%s)", c, msg, r.o.Now().Sub(began).Round(100*time.Millisecond)), err)
		if err != nil {
			return err
		}
	}
	return nil
}

// probe waits for the target to be healthy, and stops waiting when w (if
// any) finds its container in a crash loop.
func (r *runner) probe(ctx context.Context, t health.Target, w *upWatch) error {
	ctx, cancel := w.untilCrash(ctx)
	defer cancel()
	return r.o.Health.Wait(ctx, t, r.o.HealthTimeout)
}

// withLogs adds the component's last log lines to a failed health check.
func (r *runner) withLogs(ctx context.Context, node, component string, err error) error {
	e, nerr := r.o.Nodes(ctx, node)
	if nerr != nil {
		return err
	}
	if logs := dockerop.Logs(context.WithoutCancel(ctx), e, component); logs != "" {
		return fmt.Errorf("%w\nlast lines of %s on %s:\n%s", err, component, node, logs)
	}
	return err
}

// files writes every node's files, MaxParallel nodes at once.
func (r *runner) files(ctx context.Context, steps []plan.Step) error {
	return r.parallel(ctx, steps, r.o.MaxParallel, func(ctx context.Context, s plan.Step) error { return r.do(ctx, s) })
}

// parallel runs f for every step, limit at once (no limit when ≤ 0), and
// joins the errors; a failure does not stop the others.
func (r *runner) parallel(ctx context.Context, steps []plan.Step, limit int, f func(context.Context, plan.Step) error) error {
	r.start(steps)
	return fanout.Each(ctx, steps, limit, func(ctx context.Context, _ int, s plan.Step) error { return f(ctx, s) })
}

func (r *runner) start(steps []plan.Step) {
	r.mu.Lock()
	r.pending = append(r.pending, steps...)
	r.mu.Unlock()
}
