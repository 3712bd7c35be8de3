package decide

import (
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Planned is a plan with everything it was computed from: one observation
// of the cluster (Observed), the desired state, and the certificates. It
// is not changed after Compute returns it: an apply carries it out as it
// is.
type Planned struct {
	Plan     *plan.Plan
	Desired  *desired.Cluster
	Observed *observe.Cluster
	// PKI is the certificate set the desired files hold.
	PKI *pki.Set
	// PKIChanges are the certificates issued or reissued for this plan.
	PKIChanges []pki.Change
	// PKISource says where the PKI came from.
	PKISource pkisource.Source
	// SavePKI is the certificate set an apply saves to the state directory
	// before anything changes on the nodes (a recovered or completed PKI;
	// the old generation during a CA rotation); nil when it need not.
	SavePKI *pki.Set
	// Staged are the staged operations the plan carries (package staged),
	// in the order an apply ends their stages.
	Staged []staged.Operation
	// Budgets are the rolling phases' budgets, resolved against the nodes
	// the plan could not reach: the worker batch, and the phases they
	// block.
	Budgets plan.Budgets
	// Warnings are what the cluster's layout is worth a word about (an
	// even number of etcd members).
	Warnings []string
	// NodeChanges are what the Kubernetes Nodes need besides the steps
	// (labels, taints, stale Nodes; package kubenode): an apply makes them
	// also when the plan has no step.
	NodeChanges []kubenode.Pending
	// Addons are what applying the add-ons would change (a server-side
	// dry run), and those removed from cluster.yml; nil when the API server
	// could not be asked (a new cluster, the control plane down): then an
	// apply that changes the nodes applies every add-on once the control
	// plane runs. AddonHealth is how the add-ons in the cluster are doing;
	// AddonsErr says why the add-ons could not be planned although the
	// API server answered. AddonsWant are the add-ons cluster.yml asks for,
	// as the plan read them.
	Addons      *addons.ChangeSet
	AddonHealth []addons.Health
	AddonsErr   error
	AddonsWant  []addons.Addon
	// Encryption is the generated secrets encryption key and the stage of
	// the operation on it the plan carries out, for people; nil when
	// cluster.yml asks for no generated key.
	Encryption *report.Encryption
	// Teardown marks a plan of the teardown of the cluster (Teardown).
	Teardown bool

	// pki is where the certificates come from and what the plan does about
	// their rotation; encryption the plan of the generated key.
	pki        *pkisource.Resolved
	encryption *secretsenc.Plan
	// removals is the removal guard's refusal (plan.CheckRemovals),
	// membership the refusal of an etcd membership change the members as
	// observed would refuse (plan.CheckMembership), and self the refusal
	// to remove the node rigger runs on (plan.CheckSelfRemoval).
	removals, membership, self error
	// spec is the cluster.yml the plan is of, and ignoreDocker
	// Asked.IgnoreDockerVersion, for the problems of status; spec is nil
	// for a teardown.
	spec         *spec.Cluster
	ignoreDocker bool
}

// Blocked says why the plan must not be applied: a new CA while nodes
// that may hold the cluster's did not answer (a *pkisource.NewCAError in a
// *stall.Error), a staged operation's refusal (a new secrets encryption
// key, the same), more nodes removed than rigger.max_removed_nodes
// allows without Asked.AllowRemovals (a *plan.RemovalGuardError), or an
// etcd membership change the members would refuse (an
// *etcdmember.RefusedError: a member added while another is down), or the
// removal of the node rigger runs on (a *plan.SelfRemovalError); nil when
// it may be applied.
func (p *Planned) Blocked() error {
	if p.pki != nil && p.pki.NewCA != nil {
		return stall.Stalls(stall.NewCABlocked, p.pki.NewCA)
	}
	for _, op := range p.Staged {
		if err := op.Blocked(); err != nil {
			return err
		}
	}
	if p.removals != nil {
		return p.removals
	}
	if p.self != nil {
		return p.self
	}
	return p.membership
}

// Changes reports whether applying the plan changes anything: containers,
// files, certificates, the Kubernetes Nodes, the add-ons or a staged
// operation (a stage to run, a record to keep).
func (p *Planned) Changes() bool {
	return !p.Plan.Empty() || len(p.PKIChanges) > 0 || len(p.NodeChanges) > 0 || p.Addons != nil && !p.Addons.Empty() ||
		slices.ContainsFunc(p.Staged, staged.Operation.Work)
}

// Next says what the apply of this plan goes on with once the plan's
// stage of each staged operation is done, in another plan; "" when no
// stage follows.
func (p *Planned) Next() string {
	var next []string
	for _, op := range p.Staged {
		if n := op.Next(); n != "" {
			next = append(next, n)
		}
	}
	return strings.Join(next, "; ")
}

// AddonWork reports whether applying the plan applies the add-ons: they
// change, or they could not be planned and the nodes change.
func (p *Planned) AddonWork() bool {
	if p.Addons == nil {
		return !p.Plan.Empty()
	}
	return !p.Addons.Empty()
}

// Unreachable are the nodes of cluster.yml the plan could not look at (and
// an apply leaves as they are), in cluster.yml order.
func (p *Planned) Unreachable() []string { return p.Plan.UnreachableNodes() }

// Complete reports whether every node of cluster.yml was looked at: once
// such a plan is applied, the cluster runs what cluster.yml says.
func (p *Planned) Complete() bool { return len(p.Unreachable()) == 0 }

// rotation is what the plan does about certificate rotation; nil when it
// was not decided (a plan of a teardown).
func (p *Planned) rotation() *certrotate.Plan {
	if p.pki == nil {
		return nil
	}
	return p.pki.Rotation
}

// Rotation is the rotation the plan carries out, for people; nil when
// none.
func (p *Planned) Rotation() *report.Rotation {
	rot := p.rotation()
	if rot == nil || rot.Active == nil {
		return nil
	}
	a := rot.Active
	return &report.Rotation{Rotation: a.Rotation, From: a.From, Resumed: rot.Decision.Resume != nil, Stage: a.Stage, Names: slices.Clone(a.Names)}
}

// RotationWaiting is a rotation asked for that waits until the one under
// way is done (the next apply after it starts it); nil when none.
func (p *Planned) RotationWaiting() *pki.Rotation {
	if rot := p.rotation(); rot != nil {
		return rot.Decision.Ignored
	}
	return nil
}

// RotationRecordCleared reports whether applying the plan drops the
// record of cluster.yml's rotate_certificates, which cluster.yml no
// longer has: adding it again then rotates again.
func (p *Planned) RotationRecordCleared() bool {
	rot := p.rotation()
	return rot != nil && rot.Decision.ClearRequested
}

// Status is the status of the cluster the plan was computed from
// (report.BuildStatus), with the problems of rigger doctor's checks that
// its observation answers (doctor.Problems; none for a teardown).
func (p *Planned) Status() *report.Status {
	st := report.BuildStatus(p.input())
	if p.spec != nil {
		st.Problems = doctor.Problems(&doctor.Cluster{Spec: p.spec, Desired: p.Desired, Observed: p.Observed, PKI: p.PKI,
			NewPKI: p.PKISource.Kind == pkisource.New, IgnoreDockerVersion: p.ignoreDocker, Now: p.Observed.At})
	}
	return st
}

// Report is the plan as rigger plan -o json writes it (report.Plan).
func (p *Planned) Report() *report.PlanReport { return report.Plan(p.input()) }

// input is the plan and what it was computed from, for package report.
func (p *Planned) input() report.Input {
	return report.Input{Plan: p.Plan, Desired: p.Desired, Observed: p.Observed,
		PKI: p.PKI, PKIChanges: p.PKIChanges, PKISource: p.PKISource,
		Rotation: p.Rotation(), RotationWaiting: p.RotationWaiting(), RotationRecordCleared: p.RotationRecordCleared(),
		Encryption: p.Encryption, NodeChanges: p.NodeChanges, Addons: p.Addons, AddonHealth: p.AddonHealth,
		AddonsErr: p.AddonsErr, Warnings: p.Warnings, Changes: p.Changes(), Complete: p.Complete(), Blocked: p.Blocked(),
		BlockedPhases: p.Budgets.Blocked(p.Plan)}
}
