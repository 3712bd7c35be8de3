package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// ApplyOptions are the choices of one apply.
type ApplyOptions struct {
	Hooks execute.Hooks
	// AllowRemovals lets an apply remove more nodes than
	// rigger.max_removed_nodes allows.
	AllowRemovals bool
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
	Pass func(pass int, pl *Planned)
}

// MaxPlanAge is how old an observation Apply acts on may be.
const MaxPlanAge = 15 * time.Minute

// Apply carries out pl, from Plan, under the cluster's lock lk (Lock): it
// takes the cluster's Lease (leaseCluster), saves the PKI to the state
// directory first (so that a crash never leaves nodes with certificates
// rigger does not have), records the nodes it touches, runs the plan
// (execute.Run) with a snapshot before any etcd change, and makes the
// Kubernetes side of the nodes right (package kubenode). The result lists
// what was done, also on error. A plan of Options.Teardown removes the
// cluster from the nodes instead.
//
// A staged operation (a CA rotation, pki.CAStages; an operation on the
// generated secrets encryption key, secretsenc.Stages) moves one stage per
// plan: the plan carries out the stage its record is at, and its record
// moves on once the stage is done. When a stage follows (Planned.Next),
// Apply observes and plans again and carries that plan out, told to
// ao.Pass: this loop, observe → plan → execute, is the only place where a
// plan is made again during an apply, for rigger apply and serve alike. A
// plan is never changed once made.
func (s *Session) Apply(ctx context.Context, lk *Lock, pl *Planned, ao ApplyOptions) (*execute.Result, error) {
	if lk == nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, errors.New("apply: the cluster's lock is not held (Session.Lock)")
	}
	if pl.teardown {
		return s.teardown(ctx, pl, ao.Hooks)
	}
	res, err := s.applyOnce(ctx, lk, pl, ao)
	a := asked{rotate: s.opts.Rotate, rotateKey: s.opts.RotateKey}
	for pass := 2; err == nil && pl.continues(); pass++ {
		if pass > maxPasses {
			return res, fmt.Errorf("apply: still a stage to carry out after %d plans (%s): run rigger apply again, and report it if it says the same", maxPasses, pl.Next())
		}
		a = a.after(pl)
		if pl, err = s.plan(ctx, a); err != nil {
			break
		}
		if ao.Pass != nil {
			ao.Pass(pass, pl)
		}
		var next *execute.Result
		next, err = s.applyOnce(ctx, lk, pl, ao)
		res = joinResults(res, next)
	}
	return res, err
}

// maxPasses bounds the plans of one apply: the stages of a CA rotation and
// of a key rotation, one plan each, and the first plan.
const maxPasses = 1 + 3 + 4

// endEncryptionStage ends the stage of the operation on the secrets
// encryption key pl carried out (secretsenc.Plan.EndStage), rec being its
// record as saved before the steps.
func (s *Session) endEncryptionStage(ctx context.Context, pl *Planned, rec secretsenc.Record, cs kubernetes.Interface, hooks execute.Hooks) error {
	e := pl.encryption
	if e == nil || rec.Op == nil {
		return nil
	}
	var down []string
	for _, a := range pl.Unreachable() {
		if dn, ok := pl.Desired.Node(a); ok && dn.HasRole(spec.RoleControlPlane) {
			down = append(down, a)
		}
	}
	rec, err := e.EndStage(ctx, secretsenc.StageEnd{Dir: s.opts.StateDir, Record: rec, Down: down, API: cs, Now: s.opts.Now(),
		Say: func(msg string, err error) {
			if hooks.Step != nil {
				hooks.Step("secrets encryption", msg, err)
			}
		},
		Progress: func(n int) { s.opts.Log.Debug("rewriting Secrets", "cluster", s.c.ClusterName, "rewritten", n) },
	})
	if err == nil && rec.Op == nil && rec.LastRotatedKey != "" && rec.LastRotatedKey == e.Record.Op.NewKey {
		s.opts.Log.Info("secrets encryption key rotated", "cluster", s.c.ClusterName, "key", rec.LastRotatedKey)
	}
	return err
}

// stageTitle says what a stage of a CA rotation does, for people.
func stageTitle(st pki.CAStage) string {
	switch st {
	case pki.StageTrust:
		return "every component trusts both CAs"
	case pki.StageIssue:
		return "every certificate is the new CA's, both CAs trusted"
	case pki.StageFinish:
		return "the new CA alone is trusted"
	}
	return string(st)
}

// joinResults is what two applies in a row did.
func joinResults(a, b *execute.Result) *execute.Result {
	out := *b
	out.Done = append(slices.Clone(a.Done), b.Done...)
	out.Duration = a.Duration + b.Duration
	if out.Addons == nil {
		out.Addons = a.Addons
	}
	return &out
}

// applyOnce is Apply of one plan: its steps, and the end of the stage of
// each staged operation it carries.
func (s *Session) applyOnce(ctx context.Context, lk *Lock, pl *Planned, ao ApplyOptions) (*execute.Result, error) {
	notRun := &execute.Result{NotRun: pl.Plan.Steps}
	tl := s.opts.Timeline
	if ph := ao.Hooks.Phase; ph != nil {
		if r := pl.Rotation(); r != nil && r.Stage != "" {
			ph("rotation", fmt.Sprintf("CA rotation, stage %s: %s", r.Stage, stageTitle(r.Stage)))
		}
		if e := pl.encryption; e != nil && e.Record.Op != nil {
			ph("secrets-encryption", fmt.Sprintf("Secrets encryption: %s, stage %s (keys %s)", e.Record.Op.Kind, e.Record.Op.Stage, strings.Join(e.Want.Names(), ", ")))
		}
	}
	if err := ctx.Err(); err != nil {
		return notRun, err
	}
	if err := pl.Blocked(); err != nil {
		return notRun, err
	}
	if err := plan.CheckRemovals(pl.Plan, len(s.c.Nodes), s.c.Rigger.MaxRemovedNodes, ao.AllowRemovals); err != nil {
		return notRun, err
	}
	cs := s.apiClient(pl)
	end := tl.Begin("apply: take the cluster's Lease")
	unlease, err := s.leaseCluster(ctx, cs, lk.command, lock.LeaseOptions{Timing: clusterLeaseTiming, Wait: ao.WaitLease, Waiting: ao.LeaseWaiting})
	if err != nil {
		return notRun, err
	}
	end()
	defer unlease()
	crashpoint.Reach(crashpoint.ApplyLocked)
	end = tl.Begin("apply: write the state directory")
	if r := pl.pki; r != nil && r.Save {
		if err := pki.Save(s.opts.StateDir, r.State); err != nil {
			return notRun, fmt.Errorf("save certificates before applying: %w", err)
		}
	}
	var encRec secretsenc.Record
	if e := pl.encryption; e != nil {
		if e.Starts {
			s.opts.Log.Info("rotating the secrets encryption key", "cluster", s.c.ClusterName, "new_key", e.Record.Op.NewKey, "keys", e.Want.Names())
		}
		if encRec, err = e.Save(s.opts.StateDir, s.opts.Now()); err != nil {
			return notRun, fmt.Errorf("save the secrets encryption key before applying: %w", err)
		}
	}
	rotRec, err := pl.rotation().Start(s.opts.StateDir, s.opts.Now())
	if err != nil {
		return notRun, err
	}
	if err := s.recordNodes(); err != nil {
		return notRun, err
	}
	end()
	chk, err := s.services().Checker(pl.PKI)
	if err != nil {
		return notRun, err
	}
	workerBatch, workersBlocked, err := plan.Unavailability(pl.Desired, pl.Unreachable(), spec.RoleWorker, s.c.UpgradeStrategy.MaxUnavailableWorker, "max_unavailable_worker")
	if err != nil {
		return notRun, err
	}
	_, cpBlocked, err := plan.Unavailability(pl.Desired, pl.Unreachable(), spec.RoleControlPlane, s.c.UpgradeStrategy.MaxUnavailableControlplane, "max_unavailable_controlplane")
	if err != nil {
		return notRun, err
	}
	// kubenode: cordon, drain, Node Ready, labels, taints, stale Nodes.
	endPhase := func() {}
	timed := ao.Hooks
	if tl != nil {
		timed.Phase = func(p plan.Phase, title string) {
			endPhase()
			endPhase = tl.Begin("apply: phase " + string(p))
			if ao.Hooks.Phase != nil {
				ao.Hooks.Phase(p, title)
			}
		}
	}
	// The network plugin goes in before the workers (kubenode.Side), through
	// the add-ons' engine, made once the hooks are.
	var (
		eng          *addons.Engine
		engErr       error
		stageNetwork func(ctx context.Context) error
	)
	if pl.addonWork() {
		stageNetwork = func(ctx context.Context) error {
			if engErr != nil {
				return fmt.Errorf("apply the network plugin: %w", engErr)
			}
			_, err := eng.Stage(ctx, sysaddons.Network(pl.addons))
			return addons.Refused("apply the network plugin", err)
		}
	}
	side, hooks, say := s.kubeSide(pl, cs, timed, stageNetwork)
	eng, engErr = s.addonEngine(pl.PKI, pl.Observed, func(addon, msg string) { say("addon "+addon, msg) })
	opts := execute.Options{
		Desired:              pl.Desired,
		Nodes:                s.docker,
		Health:               chk,
		Hooks:                hooks,
		BeforeNode:           side.BeforeNode,
		AfterNode:            side.AfterNode,
		HelperImage:          s.c.SystemImages.Alpine,
		MaxParallel:          s.c.Rigger.MaxParallel,
		MaxUnavailableWorker: workerBatch,
		WorkersBlocked:       workersBlocked,
		ControlPlaneBlocked:  cpBlocked,
		MaxPlanAge:           MaxPlanAge,
		Timeline:             tl,
		Now:                  s.opts.Now,
		Snapshot: func(ctx context.Context) error {
			return s.snapshotBeforeChange(ctx, pl.PKI, pl.Desired)
		},
		Etcd: func(ctx context.Context) (execute.Membership, error) {
			return s.services().EtcdClient(ctx, pl.PKI, pl.Observed)
		},
		Kubernetes: side.Kubernetes,
	}
	if pl.addonWork() {
		opts.Addons = func(ctx context.Context) (*addons.ChangeSet, error) {
			if engErr != nil {
				return nil, fmt.Errorf("apply the add-ons: %w", engErr)
			}
			if err := side.Repair(ctx); err != nil {
				return nil, fmt.Errorf("before the add-ons: %w", err)
			}
			return eng.ApplyAll(ctx, pl.addons)
		}
	}
	end = tl.Begin("apply: execute the steps")
	res, err := execute.Run(ctx, pl.Plan, opts)
	endPhase()
	end()
	crashpoint.Reach(crashpoint.ApplyExecuted)
	if werr := s.recordApplied(); werr != nil {
		err = errors.Join(err, werr)
	}
	if err == nil {
		// kubenode: labels, taints and stale Nodes, also after an empty plan.
		end = tl.Begin("apply: the Kubernetes Nodes")
		err = side.Reconcile(ctx)
		end()
	}
	if err == nil {
		// The removed nodes are clean: the next plan need not look.
		err = s.forgetNodes(pl.Plan.RemovedNodes)
	}
	if err == nil && pl.Complete() {
		err = pl.rotation().Finish(ctx, certrotate.End{Dir: s.opts.StateDir, Record: rotRec, Trusted: pl.PKI.Trusted(pki.CACertName), API: cs,
			Say: say, Log: s.opts.Log.With("cluster", s.c.ClusterName)})
	}
	if err == nil {
		end = tl.Begin("apply: end the secrets encryption stage")
		err = s.endEncryptionStage(ctx, pl, encRec, cs, hooks)
		end()
	}
	if res.AddonsErr != nil && !ao.AddonsErrInResult {
		err = errors.Join(err, res.AddonsErr)
	}
	return res, err
}

// apiClient is the API server's client for the cluster's Lease and the
// Kubernetes side of an apply; nil when no controlplane node was
// reachable.
func (s *Session) apiClient(pl *Planned) kubernetes.Interface {
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

// planTeardown observes the nodes and plans the teardown of the cluster
// (Options.Teardown).
func (s *Session) planTeardown(ctx context.Context) *Planned {
	o := s.observeNodes(ctx, false, 0)
	d := &desired.Cluster{Name: s.c.ClusterName, PrefixPath: s.c.PrefixPath}
	return &Planned{Plan: plan.Compute(d, o), Desired: d, Observed: o, teardown: true}
}

// teardown carries out a plan of planTeardown.
func (s *Session) teardown(ctx context.Context, pl *Planned, hooks execute.Hooks) (*execute.Result, error) {
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
	return res, err
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
