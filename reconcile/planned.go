package reconcile

import (
	"fmt"
	"strings"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Planned is a plan with everything it was computed from: one observation
// of the cluster (Observed), the desired state, and the certificates. It
// is not changed after Plan returns it: Apply carries it out as it is.
type Planned struct {
	Plan     *plan.Plan
	Desired  *desired.Cluster
	Observed *observe.Cluster
	// PKI is the certificate set the desired files hold.
	PKI *pki.Set
	// PKIChanges are the certificates issued or reissued for this plan.
	PKIChanges []pki.Change
	// PKISource says where the PKI came from.
	PKISource PKISource
	// Warnings are what the cluster's layout is worth a word about (an
	// even number of etcd members).
	Warnings []string
	// NodeChanges are what the Kubernetes Nodes need besides the steps
	// (labels, taints, stale Nodes; package kubenode): Apply makes them
	// also when the plan has no step.
	NodeChanges []kubenode.Pending
	// Addons are what applying the add-ons would change (a server-side
	// dry run), and those removed from cluster.yml; nil when the API server
	// could not be asked (a new cluster, the control plane down): then an
	// apply that changes the nodes applies every add-on once the control
	// plane runs. AddonHealth is how the add-ons in the cluster are doing.
	Addons      *addons.ChangeSet
	AddonHealth []addons.Health
	// AddonsErr says why the add-ons could not be planned although the API
	// server answered (then Addons is nil).
	AddonsErr error
	// Encryption is the generated secrets encryption key and the stage of
	// the operation on it the plan carries out; nil when cluster.yml asks
	// for no generated key.
	Encryption *Encryption
	// encryption is what Apply saves and carries out of it.
	encryption *secretsenc.Plan
	// addons are the add-ons cluster.yml asks for, as the plan read them.
	addons []addons.Addon
	// teardown marks a plan of Options.Teardown.
	teardown bool
	// pki is where the certificates come from and what the plan does
	// about their rotation.
	pki *pkisource.Resolved
	// spec is the cluster.yml the plan is of, and ignoreDocker
	// Options.IgnoreDockerVersion, for Problems; spec is nil for a
	// teardown.
	spec         *spec.Cluster
	ignoreDocker bool
}

// Blocked says why the plan must not be applied (a new CA while nodes that
// may hold the cluster's did not answer, a *NewCAError wrapped in an
// *Error; the same for a new secrets encryption key); nil when it may be.
func (p *Planned) Blocked() error {
	if p.pki != nil && p.pki.NewCA != nil {
		return stall.Stalls(ReasonNewCABlocked, p.pki.NewCA)
	}
	if e := p.encryption; e != nil && e.NewKeyBlocked != nil {
		return stall.Stalls(ReasonNewKeyBlocked, e.NewKeyBlocked)
	}
	return nil
}

// Changes reports whether applying the plan changes anything: containers,
// files, certificates (a rotation, or its record), the Kubernetes Nodes,
// the add-ons or the secrets encryption key (a stage to run, a record to
// keep).
func (p *Planned) Changes() bool {
	return !p.Plan.Empty() || len(p.PKIChanges) > 0 || len(p.NodeChanges) > 0 || p.Addons != nil && !p.Addons.Empty() ||
		p.Rotation() != nil || p.RotationRecordCleared() || p.encryption.Work()
}

// Next says what the apply of this plan goes on with once the plan's stage
// of a staged operation is done, in another plan: the next stage of a CA
// rotation, of an operation on the secrets encryption key, or both; ""
// when no stage follows.
func (p *Planned) Next() string {
	var next []string
	if st := p.rotation().Next(); st != "" {
		next = append(next, fmt.Sprintf("CA rotation, stage %s (%s)", st, stageTitle(st)))
	}
	if op := p.encryption.Next(); op != nil {
		next = append(next, fmt.Sprintf("secrets encryption %s, stage %s", op.Kind, op.Stage))
	}
	return strings.Join(next, "; ")
}

// continues reports whether, once this plan was carried out without an
// error, Apply plans again for the next stage: one follows, and the stage
// of this plan is done (a CA rotation's only when every node answered).
func (p *Planned) continues() bool {
	return p.rotation().Next() != "" && p.Complete() || p.encryption.Next() != nil
}

// addonWork reports whether applying the plan applies the add-ons: they
// change, or they could not be planned and the nodes change.
func (p *Planned) addonWork() bool {
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
