package reconcile

import (
	"fmt"
	"strings"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
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
	encryption *resolvedEncryption
	// addons are the add-ons cluster.yml asks for, as the plan read them.
	addons []addons.Addon
	// newCA says why this plan's new CA must not be applied (nodes that may
	// hold the real one did not answer); nil when it may.
	newCA error
	// saveState is set when the state directory must be written before
	// the plan is applied (new, recovered or changed PKI): with statePKI.
	saveState bool
	statePKI  *pki.Set
	// rot is what the plan does about certificate rotation.
	rot *rotationState
}

// Blocked says why the plan must not be applied (a new CA while nodes that
// may hold the cluster's did not answer, a *NewCAError wrapped in an
// *Error; the same for a new secrets encryption key); nil when it may be.
func (p *Planned) Blocked() error {
	if p.newCA != nil {
		return stalls(ReasonNewCABlocked, p.newCA)
	}
	if e := p.encryption; e != nil && e.newKey != nil {
		return stalls(ReasonNewKeyBlocked, e.newKey)
	}
	return nil
}

// Changes reports whether applying the plan changes anything: containers,
// files, certificates (a rotation, or its record), the Kubernetes Nodes,
// the add-ons or the secrets encryption key (a stage to run, a record to
// keep).
func (p *Planned) Changes() bool {
	return !p.Plan.Empty() || len(p.PKIChanges) > 0 || len(p.NodeChanges) > 0 || p.Addons != nil && !p.Addons.Empty() ||
		p.Rotation() != nil || p.RotationRecordCleared() || p.encryption.work()
}

// Next says what the apply of this plan goes on with once the plan's stage
// of a staged operation is done, in another plan: the next stage of a CA
// rotation, of an operation on the secrets encryption key, or both; ""
// when no stage follows.
func (p *Planned) Next() string {
	var next []string
	if st := p.rot.next(); st != "" {
		next = append(next, fmt.Sprintf("CA rotation, stage %s (%s)", st, stageTitle(st)))
	}
	if op := p.encryption.next(); op != nil {
		next = append(next, fmt.Sprintf("secrets encryption %s, stage %s", op.Kind, op.Stage))
	}
	return strings.Join(next, "; ")
}

// continues reports whether, once this plan was carried out without an
// error, Apply plans again for the next stage: one follows, and the stage
// of this plan is done (a CA rotation's only when every node answered).
func (p *Planned) continues() bool {
	return p.rot.next() != "" && p.Complete() || p.encryption.next() != nil
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

// PKISource says where a plan's certificates come from.
type PKISource struct {
	Kind PKIKind `json:"source"`
	// From is the state directory (PKIStateDir) or the node
	// (PKIRecovered) they were read from.
	From string `json:"from,omitempty"`
}

// PKIKind is where a plan's certificates come from.
type PKIKind string

const (
	// PKIStateDir: the state directory's.
	PKIStateDir PKIKind = "state-directory"
	// PKIRecovered: read from a controlplane node, the state directory
	// having none (Apply saves them there first).
	PKIRecovered PKIKind = "recovered"
	// PKINew: a new CA, since no node runs the cluster yet. When some node
	// did not answer, the plan is Blocked: it only shows what a new CA
	// would change.
	PKINew PKIKind = "new"
)

// String says where the certificates come from, for people.
func (s PKISource) String() string {
	switch s.Kind {
	case PKIStateDir:
		return "state directory " + s.From
	case PKIRecovered:
		return "recovered from node " + s.From + " (the state directory had none)"
	case PKINew:
		return "new (no node runs this cluster yet)"
	}
	return string(s.Kind)
}
