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
	"strings"
	"sync"
	"time"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
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
// before anything; otherwise one is taken before etcd's membership or
// members change.
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
	r.removed, r.first, r.etcdNew = p.RemovedNodes, p.First, p.NewEtcd
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

// The phases of Options.Kubernetes and Options.Addons; they have no steps.
const (
	phaseKubernetes plan.Phase = "kubernetes"
	phaseAddons     plan.Phase = "addons"
)

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
		_, err := dockerop.Replace(ctx, e, s.Node, s.After, r.bootstrapArgs(s))
		return err
	case plan.Restart:
		return dockerop.Restart(ctx, e, s.Node, s.Component)
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w != nil {
		go func() {
			select {
			case <-w.done:
				if w.err != nil {
					cancel()
				}
			case <-ctx.Done():
			}
		}()
	}
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

// snapshot runs Options.Snapshot once, saying what (done) and what it
// guards (before). An error stops the run: nothing it guards changed.
func (r *runner) snapshot(ctx context.Context, done, before string) error {
	if r.snapshotted || r.o.Snapshot == nil {
		return nil
	}
	r.snapshotted = true
	err := r.o.Snapshot(ctx)
	r.say("etcd", done, err)
	if err != nil {
		return fmt.Errorf("snapshot before %s (nothing was changed): %w", before, err)
	}
	crashpoint.Reach(crashpoint.EtcdSnapshotTaken)
	return nil
}

// etcd runs the etcd steps (see Run).
func (r *runner) etcd(ctx context.Context, steps []plan.Step) error {
	if r.etcdNew {
		// Every member at once: the first cannot become healthy alone.
		if err := r.parallel(ctx, steps, -1, func(ctx context.Context, s plan.Step) error { return r.do(ctx, s) }); err != nil {
			return err
		}
		return r.allEtcdHealthy(ctx)
	}
	r.start(steps)
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if changesEtcd(s) {
			if err := r.snapshot(ctx, "snapshot before the change", "changing etcd"); err != nil {
				return err
			}
		}
		if err := r.do(ctx, s); err != nil {
			return err
		}
		if s.Action == plan.AddMember && s.Member.ID != 0 && !createsEtcd(steps, s.Node) {
			// A learner an earlier apply added (the plan names its ID)
			// and started: it only needs its vote.
			if err := r.promoteStarted(ctx, s.Node); err != nil {
				return err
			}
			continue
		}
		if s.Component != desired.Etcd || s.Action == plan.Remove {
			continue
		}
		if id, ok := r.learner(s.Node); ok {
			// The new member votes once it has caught up with the leader.
			err := r.promote(ctx, id)
			r.say(s.Node, "etcd member promoted from learner to voter", err)
			if err != nil {
				return err
			}
		}
		// A running cluster's next member changes only once this one has
		// stayed up: two members down lose a three-member quorum.
		if err := r.waitHealthy(ctx, s.Node, []string{desired.Etcd}, true); err != nil {
			return err
		}
	}
	return r.allEtcdHealthy(ctx)
}

// createsEtcd reports whether steps create node's etcd container.
func createsEtcd(steps []plan.Step, node string) bool {
	return slices.ContainsFunc(steps, func(s plan.Step) bool {
		return s.Node == node && s.Component == desired.Etcd && s.Action == plan.Create
	})
}

// promoteStarted promotes the learner of node, whose container runs
// already, once it is healthy.
func (r *runner) promoteStarted(ctx context.Context, node string) error {
	id, ok := r.learner(node)
	if !ok {
		return nil // a voter already
	}
	err := r.promote(ctx, id)
	r.say(node, "etcd member promoted from learner to voter", err)
	if err != nil {
		return err
	}
	return r.waitHealthy(ctx, node, []string{desired.Etcd}, true)
}

// changesEtcd reports whether a step changes a running etcd cluster's
// membership or replaces one of its members (a new version, new flags).
func changesEtcd(s plan.Step) bool {
	return s.Action == plan.AddMember || s.Action == plan.RemoveMember ||
		s.Component == desired.Etcd && s.Action == plan.Replace
}

// Membership changes the etcd cluster's members; *etcdmember.Client
// implements it. Each change goes through the members at via, the first
// first (etcdmember.Via).
type Membership interface {
	Members(ctx context.Context) ([]etcdmember.Member, error)
	AddLearner(ctx context.Context, via []string, peerURL string) (etcdmember.Member, error)
	Promote(ctx context.Context, via []string, id uint64) error
	Remove(ctx context.Context, via []string, id uint64) error
}

// leavingMembers are the peer URLs of the members steps remove.
func leavingMembers(steps []plan.Step) []string {
	var out []string
	for _, s := range steps {
		if s.Action == plan.RemoveMember && s.Member != nil {
			out = append(out, s.Member.PeerURLs...)
		}
	}
	return out
}

var _ Membership = (*etcdmember.Client)(nil)

// membership connects to etcd once per Run.
func (r *runner) membership(ctx context.Context) (Membership, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.etcdClient != nil {
		return r.etcdClient, nil
	}
	if r.o.Etcd == nil {
		return nil, errors.New("etcd membership changes need a connection to etcd, which this run has not")
	}
	m, err := r.o.Etcd(ctx)
	if err != nil {
		return nil, err
	}
	r.etcdClient = m
	return m, nil
}

// members is the run's etcd connection and the cluster's members as it
// lists them now.
func (r *runner) members(ctx context.Context) (Membership, []etcdmember.Member, error) {
	m, err := r.membership(ctx)
	if err != nil {
		return nil, nil, err
	}
	members, err := m.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	return m, members, nil
}

func (r *runner) learner(node string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.learners[node]
	return id, ok
}

// addMember adds the step's member as a learner, unless it is a member
// already (an earlier apply added it and stopped).
func (r *runner) addMember(ctx context.Context, s plan.Step) error {
	m, members, err := r.members(ctx)
	if err != nil {
		return err
	}
	peer := s.Member.PeerURLs[0]
	added := etcdmember.Find(members, peer)
	if added == nil {
		if err := etcdmember.CheckAdd(members, etcdmember.Want{Node: s.Node, Name: s.Member.Name, PeerURL: peer}); err != nil {
			return err
		}
		mem, err := m.AddLearner(ctx, etcdmember.Via(members, 0, r.leaving), peer)
		if err != nil {
			return err
		}
		crashpoint.Reach(crashpoint.EtcdLearnerAdded)
		added = &mem
	}
	if added.IsLearner {
		r.mu.Lock()
		if r.learners == nil {
			r.learners = map[string]uint64{}
		}
		r.learners[s.Node] = added.ID
		r.mu.Unlock()
	}
	return nil
}

// removeMember removes the step's member if it is still one, and only
// while the members that stay keep their quorum.
func (r *runner) removeMember(ctx context.Context, s plan.Step) error {
	m, members, err := r.members(ctx)
	if err != nil {
		return err
	}
	target := etcdmember.Find(members, s.Member.PeerURLs[0])
	if target == nil {
		return nil // gone already
	}
	if err := etcdmember.CheckRemove(members, *target); err != nil {
		return err
	}
	return m.Remove(ctx, etcdmember.Via(members, target.ID, r.leaving), target.ID)
}

// promote makes the learner id a voting member.
func (r *runner) promote(ctx context.Context, id uint64) error {
	m, members, err := r.members(ctx)
	if err != nil {
		return err
	}
	return m.Promote(ctx, etcdmember.Via(members, id, r.leaving), id)
}

// joinArgs are the bootstrap flags of a member joining the running
// cluster: the started members and itself, state existing.
func (r *runner) joinArgs(ctx context.Context, s plan.Step) ([]string, error) {
	_, members, err := r.members(ctx)
	if err != nil {
		return nil, err
	}
	dn, ok := r.o.Desired.Node(s.Node)
	if !ok {
		return nil, fmt.Errorf("node %s: not in the desired cluster", s.Node)
	}
	w := etcdmember.Want{Node: s.Node, Name: desired.EtcdMemberName(dn.Hostname), PeerURL: desired.EtcdPeerURL(dn.InternalAddress)}
	return []string{
		"--initial-cluster=" + etcdmember.InitialCluster(members, w),
		"--initial-cluster-state=" + desired.InitialClusterExisting,
		"--initial-cluster-token=" + desired.EtcdClusterToken,
	}, nil
}

// allEtcdHealthy waits for every etcd member of the desired cluster on a
// node the plan could look at (the others are reported as unreachable).
func (r *runner) allEtcdHealthy(ctx context.Context) error {
	var errs []error
	for _, n := range r.o.Desired.Nodes {
		if _, ok := n.Container(desired.Etcd); !ok || r.unreachable[n.Address] {
			continue
		}
		// A new cluster's members serve nothing yet: the control plane
		// may start while they are watched.
		if err := r.waitHealthy(ctx, n.Address, []string{desired.Etcd}, !r.etcdNew); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

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

// rolling changes the nodes of steps. The nodes whose steps only create
// missing containers go first, MaxParallel at once: they stop nothing that
// serves (a new cluster's nodes, a node that joins; RKE too brings a new
// cluster's control plane and workers up in parallel). The others follow
// in batches of size (nodes of Plan.First first); a batch finishes before
// the next starts, and a failed batch stops the phase. A batch starts once
// the containers the batch before started have stayed up MinUptime, or,
// where the serving nodes allow it (overlaps), once they are healthy and
// held, while their watch goes on (one batch's watches overlap the next
// one's work, no more); a watch that fails meanwhile stops the phase
// before the next batch. blocked, when set, stops it at once.
func (r *runner) rolling(ctx context.Context, steps []plan.Step, size, serving int, blocked error) error {
	r.start(steps)
	if blocked != nil {
		return blocked
	}
	nodes, groups := r.rollingOrder(steps)
	var creating, changing []string
	for _, n := range nodes {
		if onlyCreates(groups[n]) {
			creating = append(creating, n)
		} else {
			changing = append(changing, n)
		}
	}
	change := func(ctx context.Context, _ int, n string) error { return r.nodeSteps(ctx, n, groups[n]) }
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

// onlyCreates reports whether steps only create missing containers.
func onlyCreates(steps []plan.Step) bool {
	for _, s := range steps {
		if s.Action != plan.Create {
			return false
		}
	}
	return true
}

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
