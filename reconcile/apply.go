package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// ApplyOptions are the choices of one apply.
type ApplyOptions struct {
	Hooks plan.Hooks
	// AddonsErrInResult leaves a failure of the add-ons in the result's
	// AddonsErr instead of returning it: a restore's apply, after which
	// the add-ons' pods restart on their own once the API servers are
	// back.
	AddonsErrInResult bool
	// WaitLease waits while another rigger holds the cluster's Lease
	// instead of refusing (--wait-lock); LeaseWaiting, when set, is told
	// who holds it meanwhile (see lock.LeaseOptions.Waiting).
	WaitLease    bool
	LeaseWaiting func(*lock.HeldError)
	// Pass, when set, is shown each plan Apply makes after the first, for
	// the next stage of a staged operation (pass counts from 2).
	Pass func(pass int, pl *decide.Planned)
}

// Result is what an apply did: what the executor did (execute.Result:
// each step run, with its error, those not run, the add-ons' failure) and
// the add-on changes it made.
type Result struct {
	execute.Result
	// Addons are the add-on changes the apply made; nil when its add-ons
	// phase did not run.
	Addons *addons.ChangeSet
}

// MaxPlanAge is how old an observation Apply acts on may be.
const MaxPlanAge = 15 * time.Minute

// Apply carries out pl, from Plan, under the cluster's lock lk (Lock), as
// its phases (applying.phases): it refuses a blocked plan, takes the
// cluster's Lease (leaseCluster), saves the PKI and each staged
// operation's records to the state directory first (so that a crash never
// leaves nodes with certificates or keys rigger does not have), records
// the nodes it touches, runs the plan (execute.Run) with a snapshot before
// any etcd change, makes the Kubernetes side of the nodes right (package
// kubenode) and ends each staged operation's stage. The result lists what
// was done, also on error. A plan of Options.Teardown removes the cluster
// from the nodes instead.
//
// A staged operation (package staged: a CA rotation, an operation on the
// generated secrets encryption key) moves one stage per plan: the plan
// carries out the stage its record is at, and its record moves on once
// the stage is done. When a stage follows, Apply observes and plans again
// and carries that plan out, told to ao.Pass: this loop, observe → plan →
// execute, is the only place where a plan is made again during an apply,
// for rigger apply and serve alike. A plan is never changed once made.
func (s *Session) Apply(ctx context.Context, lk *Lock, pl *decide.Planned, ao ApplyOptions) (*Result, error) {
	if lk == nil {
		return &Result{Result: execute.Result{NotRun: pl.Plan.Steps}}, errors.New("apply: the cluster's lock is not held (Session.Lock)")
	}
	if pl.Teardown {
		return s.teardown(ctx, pl, ao.Hooks)
	}
	res, next, err := s.applyOnce(ctx, lk, pl, ao)
	a := s.asked()
	for pass := 2; err == nil && next; pass++ {
		if pass > maxPasses {
			return res, fmt.Errorf("apply: still a stage to carry out after %d plans (%s): run rigger apply again, and report it if it says the same", maxPasses, pl.Next())
		}
		a = a.After(pl)
		if pl, err = s.plan(ctx, a); err != nil {
			break
		}
		if ao.Pass != nil {
			ao.Pass(pass, pl)
		}
		var more *Result
		more, next, err = s.applyOnce(ctx, lk, pl, ao)
		res = joinResults(res, more)
	}
	return res, err
}

// maxPasses bounds the plans of one apply: the stages of a CA rotation and
// of a key rotation, one plan each, and the first plan.
const maxPasses = 1 + 3 + 4

// joinResults is what two applies in a row did.
func joinResults(a, b *Result) *Result {
	out := *b
	out.Done = append(slices.Clone(a.Done), b.Done...)
	out.Duration = a.Duration + b.Duration
	if out.Addons == nil {
		out.Addons = a.Addons
	}
	return &out
}

// applyOnce is Apply of one plan: its phases in order, each titled in the
// timeline (--timings), until one fails. It reports whether a staged
// operation's stage ended that another follows.
func (s *Session) applyOnce(ctx context.Context, lk *Lock, pl *decide.Planned, ao ApplyOptions) (*Result, bool, error) {
	a := &applying{Session: s, lk: lk, pl: pl, ao: ao, res: &Result{Result: execute.Result{NotRun: pl.Plan.Steps}}, unlease: func() {}}
	defer func() { a.unlease() }()
	if ph := ao.Hooks.Phase; ph != nil {
		for _, op := range pl.Staged {
			if id, title := op.Title(); title != "" {
				ph(id, title)
			}
		}
	}
	var err error
	for _, p := range a.phases() {
		end := s.opts.Timeline.Begin("apply: " + p.title)
		err = p.run(ctx)
		end()
		if err != nil {
			break
		}
	}
	if a.res.AddonsErr != nil && !ao.AddonsErrInResult {
		err = errors.Join(err, a.res.AddonsErr)
	}
	return a.res, a.next, err
}

// applying is one plan being carried out: what its phases share.
type applying struct {
	*Session
	lk *Lock
	pl *decide.Planned
	ao ApplyOptions
	// res is what was done: every step not run until the steps ran.
	res *Result
	// cs is the API server's client (nil: no controlplane node was
	// reachable); unlease gives the cluster's Lease back.
	cs      kubernetes.Interface
	unlease func()
	// ends end the staged operations' stages (their Before's After).
	ends []stageEnd
	// side is the Kubernetes side of the nodes, and hooks the apply's
	// hooks, whose Step calls are serialized with the side's own lines.
	side  *kubenode.Side
	hooks plan.Hooks
	// next is set when a stage ended that another follows.
	next bool
}

// stageEnd is a staged operation and what ends its stage.
type stageEnd struct {
	op  staged.Operation
	end staged.After
}

// phase is a step of an apply, titled.
type phase struct {
	title string
	run   func(ctx context.Context) error
}

// phases are what an apply does with its plan, in order; the first that
// fails ends it.
func (a *applying) phases() []phase {
	return []phase{
		{"refuse a plan that must not be applied", a.refuse},
		{"take the cluster's Lease", a.lease},
		{"write the state directory", a.before},
		{"execute the steps", a.execute},
		{"the Kubernetes Nodes", a.nodes},
		{"forget the nodes cleaned", a.forget},
		{"end the stages", a.end},
	}
}

// refuse stops an apply whose context ended or whose plan is blocked
// (decide.Planned.Blocked: a new CA or key while nodes did not answer, the
// removal guard).
func (a *applying) refuse(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return a.pl.Blocked()
}

// lease takes the cluster's Lease (leaseCluster) through the API server's
// client the rest of the apply uses; not when the plan saw no node run an
// etcd member (reach.ErrNoEtcdMember), and the API servers cannot answer.
func (a *applying) lease(ctx context.Context) error {
	a.cs = a.apiClient(a.pl)
	var down error
	if k := a.pl.Observed.Kubernetes; k != nil && errors.Is(k.Err, reach.ErrNoEtcdMember) {
		down = k.Err
	}
	unlease, err := a.leaseCluster(ctx, a.cs, down, a.lk.command, lock.LeaseOptions{Timing: clusterLeaseTiming, Wait: a.ao.WaitLease, Waiting: a.ao.LeaseWaiting})
	if err != nil {
		return err
	}
	a.unlease = unlease
	crashpoint.Reach(crashpoint.ApplyLocked)
	return nil
}

// before writes the state directory before any node changes: the plan's
// PKI, each staged operation's records (staged.Operation.Before), and the
// nodes the apply touches.
func (a *applying) before(context.Context) error {
	if set := a.pl.SavePKI; set != nil {
		if err := pki.Save(a.opts.StateDir, set); err != nil {
			return fmt.Errorf("save certificates before applying: %w", err)
		}
	}
	start := staged.Start{Dir: a.opts.StateDir, Now: a.opts.Now(), Log: a.log()}
	for _, op := range a.pl.Staged {
		end, err := op.Before(start)
		if err != nil {
			return err
		}
		a.ends = append(a.ends, stageEnd{op, end})
	}
	return a.recordNodes()
}

// execute runs the plan's steps (execute.Run), with the Kubernetes side
// of the nodes (kubenode: cordon, drain, Node Ready, the network plugin
// before the workers), the add-ons after them, the plan's budgets, and a
// snapshot before etcd or Kubernetes changes version or members; then it
// records when the steps ended.
func (a *applying) execute(ctx context.Context) error {
	s, pl := a.Session, a.pl
	chk, err := s.services().Checker(pl.PKI)
	if err != nil {
		return err
	}
	hooks, endPhase := a.timedHooks()
	ad := &addonsPhase{Session: s, pl: pl}
	var stageNetwork func(context.Context) error
	if pl.AddonWork() {
		stageNetwork = ad.stageNetwork
	}
	var say func(node, msg string)
	a.side, a.hooks, say = s.kubeSide(pl, a.cs, hooks, stageNetwork)
	ad.start(say)
	opts := execute.Options{
		Desired: pl.Desired, Nodes: s.docker, Health: chk, Hooks: a.hooks, Budgets: pl.Budgets,
		BeforeNode: a.side.BeforeNode, AfterNode: a.side.AfterNode, Kubernetes: a.side.Kubernetes,
		HelperImage: s.c.SystemImages.Alpine, MaxParallel: s.c.Rigger.MaxParallel,
		MaxPlanAge: MaxPlanAge, Timeline: s.opts.Timeline, Now: s.opts.Now,
		Snapshot: func(ctx context.Context) error {
			return s.snapshotBeforeChange(ctx, pl.PKI, pl.Desired)
		},
		Etcd: func(ctx context.Context) (execute.Membership, error) {
			return s.services().EtcdClient(ctx, pl.PKI, pl.Observed)
		},
		WriteAgain: func(ctx context.Context, w plan.WriteAgain) (int, error) {
			return s.writeAgain(ctx, pl, w)
		},
	}
	if pl.AddonWork() {
		opts.Addons = func(ctx context.Context) error { return ad.apply(ctx, a.side.Repair) }
	}
	res, err := execute.Run(ctx, pl.Plan, opts)
	endPhase()
	a.res.Result, a.res.Addons = *res, ad.applied
	crashpoint.Reach(crashpoint.ApplyExecuted)
	if werr := s.recordApplied(); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// timedHooks are the apply's hooks with, under --timings, a span of the
// timeline for each of the executor's phases, which endPhase ends.
func (a *applying) timedHooks() (plan.Hooks, func()) {
	tl, hooks := a.opts.Timeline, a.ao.Hooks
	end := func() {}
	if tl != nil {
		hooks.Phase = func(p plan.Phase, title string) {
			end()
			end = tl.Begin("apply: phase " + string(p))
			if a.ao.Hooks.Phase != nil {
				a.ao.Hooks.Phase(p, title)
			}
		}
	}
	return hooks, func() { end() }
}

// nodes makes the Kubernetes Nodes right once the steps ran, also after an
// empty plan (kubenode.Side.Reconcile): the one part of an apply that
// reads the cluster again (see the package doc).
func (a *applying) nodes(ctx context.Context) error { return a.side.Reconcile(ctx) }

// forget drops the removed nodes, now clean, from the nodes' record: the
// next plan need not look at them.
func (a *applying) forget(context.Context) error { return a.forgetNodes(a.pl.Plan.RemovedNodes) }

// end ends each staged operation's stage (the After its Before returned),
// in the plan's order, and notes whether one ended that another follows.
func (a *applying) end(ctx context.Context) error {
	e := staged.End{Dir: a.opts.StateDir, Now: a.opts.Now(), Desired: a.pl.Desired, Unreachable: a.pl.Unreachable(),
		API: a.cs, Step: a.hooks.Step, Log: a.log()}
	for _, st := range a.ends {
		done, err := st.end(ctx, e)
		if err != nil {
			return err
		}
		a.next = a.next || done && st.op.Next() != ""
	}
	return nil
}

// log is the session's log of the cluster.
func (s *Session) log() *slog.Logger { return s.opts.Log.With("cluster", s.c.ClusterName) }

// apiClient is the API server's client for the cluster's Lease and the
// Kubernetes side of an apply; nil when no controlplane node was
// reachable.
func (s *Session) apiClient(pl *decide.Planned) kubernetes.Interface {
	cs, err := s.services().KubeClient(pl.PKI, pl.Observed)
	if err != nil {
		return nil
	}
	return cs
}

// snapshotBeforeChange takes the etcd snapshot that goes before a
// membership or version change of etcd, or a Kubernetes upgrade. One
// verified copy is enough to go on.
func (s *Session) snapshotBeforeChange(ctx context.Context, set *pki.Set, d *desired.Cluster) error {
	res, err := etcdsnap.Save(ctx, s.etcdOps(set, d), etcdsnap.SaveOptions{Kind: etcdsnap.KindBeforeChange})
	if res == nil || res.Sidecar == nil {
		return err
	}
	if err != nil {
		s.opts.Log.Warn("snapshot before the etcd change taken, not everywhere", "cluster", s.c.ClusterName,
			"snapshot", res.Sidecar.Name, "error", err)
	}
	return nil
}

// teardown carries out a plan of Options.Teardown (decide.Teardown).
func (s *Session) teardown(ctx context.Context, pl *decide.Planned, hooks plan.Hooks) (*Result, error) {
	res, err := execute.Run(ctx, pl.Plan, execute.Options{
		Desired:     pl.Desired,
		Nodes:       s.docker,
		Hooks:       hooks,
		HelperImage: s.c.SystemImages.Alpine,
		MaxParallel: s.c.Rigger.MaxParallel,
		MaxPlanAge:  MaxPlanAge,
		Now:         s.opts.Now,
	})
	if err == nil {
		err = s.forgetNodes(pl.Plan.RemovedNodes)
	}
	return &Result{Result: *res}, err
}

// recordNodes saves, before anything changes, the nodes an apply touches:
// cluster.yml's and the former ones not cleaned yet.
func (s *Session) recordNodes() error {
	if err := statedir.WriteJSON(s.opts.StateDir, nodesFile, slices.Concat(s.c.Nodes, s.former)); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
	return nil
}

// forgetNodes drops from the record the former nodes that were cleaned.
func (s *Session) forgetNodes(cleaned []string) error {
	keep := slices.DeleteFunc(slices.Clone(s.former), func(n spec.Node) bool { return slices.Contains(cleaned, n.Address) })
	if err := statedir.WriteJSON(s.opts.StateDir, nodesFile, slices.Concat(s.c.Nodes, keep)); err != nil {
		return fmt.Errorf("save nodes: %w", err)
	}
	s.former = keep
	return nil
}
