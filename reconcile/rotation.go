package reconcile

import (
	"slices"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/pki"
)

// Rotation is the certificate rotation a plan carries out (cluster.yml's
// rotate_certificates, or rigger cert rotate), for people.
type Rotation struct {
	pki.Rotation
	// From says who asked: certrotate.FromClusterYML or FromCommandLine.
	From string `json:"from"`
	// Resumed is set when an earlier apply started the rotation and did not
	// finish it: its certificates are not issued again.
	Resumed bool `json:"resumed,omitempty"`
	// Stage is the stage of a CA rotation the plan moves the nodes to.
	Stage pki.CAStage `json:"stage,omitempty"`
	// Names are the certificates rotated; every component that reads one
	// restarts, node by node.
	Names []string `json:"certificates"`
}

// rotation is what the plan does about certificate rotation; nil when it
// was not decided (a plan of a teardown).
func (p *Planned) rotation() *certrotate.Plan {
	if p.pki == nil {
		return nil
	}
	return p.pki.Rotation
}

// Rotation is the rotation the plan carries out; nil when none.
func (p *Planned) Rotation() *Rotation {
	rot := p.rotation()
	if rot == nil || rot.Active == nil {
		return nil
	}
	a := rot.Active
	return &Rotation{Rotation: a.Rotation, From: a.From, Resumed: rot.Decision.Resume != nil, Stage: a.Stage, Names: slices.Clone(a.Names)}
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
